"""Studies that chain training stages: `seqssm study species` (thesis 16) and the callbacks its recipes use."""

from .callbacks import LengthScaledLR, TrainClock, scaled_lr

__all__ = ["LengthScaledLR", "TrainClock", "scaled_lr"]
