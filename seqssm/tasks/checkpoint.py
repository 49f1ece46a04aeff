"""`TaskCheckpoint`: keeps `last.ckpt` and the best checkpoint by the task's own validation metric."""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from .base import SequenceTask


class TaskCheckpoint(ModelCheckpoint):
    """ModelCheckpoint with `save_last=True` whose monitor defaults to the task's `val_<metric>`.

    Classification and MaskedLM keep the highest `val_acc`, NextTokenPrediction the lowest
    `val_ppl`. Any ModelCheckpoint argument may be given (e.g. `every_n_train_steps` for
    mid-epoch checkpoints to resume from).
    """

    def __init__(self, save_last: bool = True, **kwargs):
        super().__init__(save_last=save_last, **kwargs)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.monitor is None and isinstance(pl_module, SequenceTask):
            self.monitor = f"val_{pl_module.metric_name}"
            self.mode = pl_module.monitor_mode
            self.kth_value = torch.tensor(-torch.inf if self.mode == "max" else torch.inf)
            if self.filename is None:
                self.filename = "{epoch}-{step}-{" + self.monitor + ":.4f}"
        super().setup(trainer, pl_module, stage)
