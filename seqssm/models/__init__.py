"""Sequence models: SequenceModel (embedding -> blocks -> pooling -> head), its typed config, Ulbaek 2024's models."""

from seqssm.models.config import SequenceModelConfig
from seqssm.models.registry import (
    BASE_NAMES, THESIS_TABLE3, THESIS_TABLE6, THESIS_TABLE6_VOCAB_SIZE, VARIANTS, model_config, parse_name
)
from seqssm.models.sequence_model import SequenceModel, build, sample_next

__all__ = [
    "BASE_NAMES",
    "THESIS_TABLE3",
    "THESIS_TABLE6",
    "THESIS_TABLE6_VOCAB_SIZE",
    "VARIANTS",
    "SequenceModel",
    "SequenceModelConfig",
    "build",
    "model_config",
    "parse_name",
    "sample_next",
]
