"""What the task tests share: tiny token data, tiny tasks and trainers, a one-thread fixture; and callbacks that
stage the faults the resume tests need (signals, kills, non-finite values) and record learning rates.

Importable as `tasks.helpers` (tests/ is on the path), also from a `seqssm fit` subprocess given PYTHONPATH=tests.
"""

from __future__ import annotations

import os
import signal

import lightning as L
import numpy as np
import pytest
import torch

from seqssm.data import SeqDataModule
from seqssm.tasks import Classification
from seqssm.tasks.resume import ResumableTrainData


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run fastest on one thread; two threads on a busy 2-core machine wait far longer than they work."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


TINY = {"d_model": 16, "n_layers": 1, "dropout": 0.0}
VOCAB, PAD, MASK, CLASSES = 12, 0, 3, 3


class TinyTokens(SeqDataModule):
    """Token sequences of varied length whose class sets which tokens dominate; vocab 12, pad 0, [MASK] 3."""

    name = "tiny"

    def __init__(self, n_train: int = 96, n_eval: int = 32, batch_size: int = 16, seed: int = 0):
        super().__init__(data_dir="unused", batch_size=batch_size, seed=seed)
        self.vocab_size, self.n_classes, self.pad_token_id, self.mask_token_id = VOCAB, CLASSES, PAD, MASK
        self.sizes = (n_train, n_eval)

    def build_splits(self):
        rng = np.random.default_rng(self.seed)

        def items(n):
            out = []
            for _ in range(n):
                label = int(rng.integers(CLASSES))
                length = int(rng.integers(8, 17))
                common = rng.random(length) < 0.7
                ids = np.where(common, 4 + 2 * label + rng.integers(0, 2, length), rng.integers(4, VOCAB, length))
                out.append((ids.astype(np.uint8), label))
            return out

        n_train, n_eval = self.sizes
        return {"train": items(n_train), "val": items(n_eval), "test": items(n_eval)}


def make_task(cls=Classification, model="mamba-s6", **kwargs):
    dims = dict(vocab_size=VOCAB, n_classes=CLASSES, mask_token_id=MASK)
    return cls(model=model, model_overrides={**TINY, **kwargs.pop("model_overrides", {})}, **dims, **kwargs)


def make_trainer(tmp_path=None, **kwargs):
    defaults = dict(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                    enable_checkpointing=False, callbacks=[ResumableTrainData()], default_root_dir=tmp_path)
    return L.Trainer(**{**defaults, **kwargs})


def a_batch(data: TinyTokens, split: str = "val"):
    data.setup()
    return next(iter(data.val_dataloader() if split == "val" else data.train_dataloader()))


class SignalAt(L.Callback):
    """Sends `signum` to this process at the start of optimizer step `step`, as a user or a scheduler would."""

    def __init__(self, step: int, signum: int = int(signal.SIGINT)):
        self.step, self.signum = step, signum

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)


class AllocateAt(L.Callback):
    """Asks torch's allocator for `nbytes` at the start of optimizer step `step`, as a batch too large for the
    machine does; 2**50 bytes (1 PiB, more than any address space holds) fails on every machine."""

    def __init__(self, step: int, nbytes: int = 2**50):
        self.step, self.nbytes = step, nbytes

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            torch.empty(self.nbytes, dtype=torch.uint8)


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


class PoisonAt(L.Callback):
    """Turns the head's weights into NaN right before optimizer step `step`."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            with torch.no_grad():
                pl_module.model.head.weight.fill_(float("nan"))
