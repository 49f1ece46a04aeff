"""Callbacks that stage the faults the resume tests need: signals, kills, non-finite gradients; and an lr recorder.

Importable as `tasks.helpers` (tests/ is on the path), also from a `seqssm fit` subprocess given PYTHONPATH=tests.
"""

from __future__ import annotations

import os
import signal

import lightning as L
import torch


class SignalAt(L.Callback):
    """Sends `signum` to this process at the start of optimizer step `step`, as a user or a scheduler would."""

    def __init__(self, step: int, signum: int = int(signal.SIGINT)):
        self.step, self.signum = step, signum

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)


class KillDuringCheckpointWrite(L.Callback):
    """SIGKILLs this process halfway through writing the checkpoint of optimizer step `step`."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, *args):
        # runs before TaskCheckpoint's on_train_batch_end (Lightning calls checkpoint callbacks last)
        if trainer.global_step == self.step:
            real_save = torch.save

            def save_half_then_die(obj, f, *a, **kw):
                real_save(obj, f, *a, **kw)
                size = os.path.getsize(f)
                os.truncate(f, size // 2)
                os.kill(os.getpid(), signal.SIGKILL)

            torch.save = save_half_then_die


class PoisonGradientAt(L.Callback):
    """Makes one gradient infinite after the backward pass of optimizer step `step` (the loss stays finite)."""

    def __init__(self, step: int):
        self.step = step

    def on_after_backward(self, trainer, pl_module):
        if trainer.global_step == self.step:
            pl_module.model.head.weight.grad[0, 0] = float("inf")


class RecordLR(L.Callback):
    """Records the learning rates each optimizer step trains with: {global_step: [lr of each group]}."""

    def __init__(self):
        self.lrs: dict[int, list[float]] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.lrs[trainer.global_step] = [g["lr"] for g in trainer.optimizers[0].param_groups]
