"""Lightning tasks: Classification, NextTokenPrediction, MaskedLM on a shared SequenceTask base."""

from seqssm.errors import ConfigError, IncompatibleWeightsError, NonFiniteLossError, TrainingInterrupted

from .base import SequenceTask
from .checkpoint import TaskCheckpoint
from .classification import Classification
from .mlm import MaskedLM, mask_tokens
from .ntp import NextTokenPrediction
from .pretrained import LoadReport, load_weights
from .resume import ResumableTrainData

__all__ = [
    "Classification", "ConfigError", "IncompatibleWeightsError", "LoadReport", "MaskedLM", "NextTokenPrediction",
    "NonFiniteLossError", "ResumableTrainData", "SequenceTask", "TaskCheckpoint", "TrainingInterrupted", "load_weights",
    "mask_tokens",
]
