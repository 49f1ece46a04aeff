"""`TaskCheckpoint`: keeps the best checkpoint by the task's own validation metric and `last.ckpt`."""

from __future__ import annotations

import os
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from .base import SequenceTask


class TaskCheckpoint(ModelCheckpoint):
    """ModelCheckpoint with `save_last=True` whose monitor defaults to the task's `val_<metric>`.

    Classification and MaskedLM keep the highest `val_acc`, NextTokenPrediction the lowest
    `val_ppl`; the best is chosen after each validation. `last_every_n_train_steps` also
    refreshes `last.ckpt` every n optimizer steps, so a run killed mid-epoch resumes from
    close to where it stopped (`--ckpt_path last`).
    """

    def __init__(self, last_every_n_train_steps: int = 0, save_last: bool = True, **kwargs: Any):
        if last_every_n_train_steps < 0:
            raise ValueError(f"checkpoint.last_every_n_train_steps must be >= 0, got {last_every_n_train_steps}")
        super().__init__(save_last=save_last, **kwargs)
        self.last_every_n_train_steps = last_every_n_train_steps

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.monitor is None and isinstance(pl_module, SequenceTask):
            self.monitor = f"val_{pl_module.metric_name}"
            self.mode = pl_module.monitor_mode
            self.kth_value = torch.tensor(-torch.inf if self.mode == "max" else torch.inf)
            if self.filename is None:
                self.filename = "{epoch}-{step}-{" + self.monitor + ":.4f}"
        super().setup(trainer, pl_module, stage)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        super().on_train_batch_end(trainer, pl_module, *args)
        n = self.last_every_n_train_steps
        if n and trainer.global_step % n == 0 and not trainer.sanity_checking:
            path = os.path.join(self.dirpath, self.CHECKPOINT_NAME_LAST + self.FILE_EXTENSION)
            trainer.save_checkpoint(path)
            self.last_model_path = path
