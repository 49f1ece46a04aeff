"""Studies that chain training stages: `seqssm study species` (Ulbaek 2024 thesis, 16) and the training clock it
reads."""

from .callbacks import TrainClock

__all__ = ["TrainClock"]
