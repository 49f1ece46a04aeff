"""Sequence models: SequenceModel (embedding -> blocks -> pooling -> head) and the named thesis models."""

from seqssm.models.registry import BASE_NAMES, THESIS_TABLE3, THESIS_TABLE6, VARIANTS, build, model_config, parse_name
from seqssm.models.sequence_model import SequenceModel, sample_next

__all__ = [
    "BASE_NAMES",
    "THESIS_TABLE3",
    "THESIS_TABLE6",
    "VARIANTS",
    "SequenceModel",
    "build",
    "model_config",
    "parse_name",
    "sample_next",
]
