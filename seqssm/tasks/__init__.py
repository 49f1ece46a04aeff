"""Lightning tasks: Classification, NextTokenPrediction, MaskedLM on a shared SequenceTask base."""

from .base import ConfigError, NonFiniteLossError, SequenceTask
from .checkpoint import TaskCheckpoint, TrainingInterrupted
from .classification import Classification
from .mlm import MaskedLM, mask_tokens
from .ntp import NextTokenPrediction
from .pretrained import IncompatibleWeightsError, LoadReport, load_weights
from .resume import ResumableTrainData

__all__ = [
    "Classification", "ConfigError", "IncompatibleWeightsError", "LoadReport", "MaskedLM", "NextTokenPrediction",
    "NonFiniteLossError", "ResumableTrainData", "SequenceTask", "TaskCheckpoint", "TrainingInterrupted", "load_weights",
    "mask_tokens",
]
