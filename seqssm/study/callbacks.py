"""Callbacks the species recipes and the study use: length-scaled learning rate, training clock."""

from __future__ import annotations

import statistics
import time
from typing import Any

import lightning as L


def scaled_lr(base_lr: float, reference_length: int, length: int) -> float:
    """The thesis's length rule (16.3): `base_lr * reference_length / length`."""
    if length <= 0 or reference_length <= 0:
        raise ValueError(f"lengths must be positive, got reference_length={reference_length}, length={length}")
    return base_lr * reference_length / length


class LengthScaledLR(L.Callback):
    """Sets the task's peak lr to `base_lr * reference_length / L`, L = the DataModule's `max_length`.

    Runs in `setup`, before Lightning builds the optimizer, so a recipe states the rule once
    instead of a number per length; the value used is saved in the checkpoint's hyperparameters.
    """

    def __init__(self, base_lr: float, reference_length: int):
        self.base_lr, self.reference_length = base_lr, reference_length

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        length = getattr(trainer.datamodule, "max_length", None)
        if length is None:
            raise ValueError("LengthScaledLR needs a DataModule with `max_length` (the training sequence length)")
        pl_module.hparams.lr = scaled_lr(self.base_lr, self.reference_length, length)


class TrainClock(L.Callback):
    """Wall-clock seconds of a fit (train start to end, validation included) and of each training step.

    `median_step_s` is the steady per-step cost: on a machine shared with other jobs it is far less
    disturbed by their bursts than the totals.
    """

    def __init__(self) -> None:
        self.fit_s = 0.0
        self.steps: list[float] = []
        self._fit_start = self._step_start = 0.0

    @property
    def step_s(self) -> float:
        """Seconds spent in training steps (forward, backward, optimizer), data loading and validation excluded."""
        return sum(self.steps)

    @property
    def median_step_s(self) -> float:
        """Median seconds of one training step (0 before any)."""
        return statistics.median(self.steps) if self.steps else 0.0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._fit_start = time.perf_counter()

    def on_train_batch_start(self, *args: Any) -> None:
        self._step_start = time.perf_counter()

    def on_train_batch_end(self, *args: Any) -> None:
        self.steps.append(time.perf_counter() - self._step_start)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.fit_s += time.perf_counter() - self._fit_start
