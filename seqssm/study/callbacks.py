"""Callbacks of the studies: a training clock."""

from __future__ import annotations

import statistics
import time
from typing import Any

import lightning as L


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
