"""Resume continues exactly: a longer max_steps or max_epochs trains the extra steps, a new lr or length is
applied to the rest of the schedule, a moved run keeps writing its last.ckpt, last.ckpt is always current."""

from __future__ import annotations

import shutil
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar

from seqssm.tasks.checkpoint import TaskCheckpoint
from seqssm.tasks.resume import ResumableTrainData

from .helpers import RecordLR, TinyTokens, make_task, make_trainer, one_thread  # noqa: F401

BATCHES = 6  # TinyTokens: 96 training sequences in batches of 16
FLAT = {"min_lr_ratio": 1.0}  # a constant lr: runs of different lengths share their first steps exactly


def fit(folder, max_epochs=1, max_steps=-1, ckpt_path=None, callbacks=(), **task_kwargs):
    """A tiny fit writing checkpoints to `folder`/ckpt; returns (trainer, task)."""
    L.seed_everything(0)
    task = make_task(model_overrides={"dropout": 0.1}, **task_kwargs)  # dropout: the random stream must resume too
    checkpoint = TaskCheckpoint(dirpath=folder / "ckpt")
    trainer = make_trainer(folder, max_epochs=max_epochs, max_steps=max_steps, enable_checkpointing=True,
                           callbacks=[ResumableTrainData(), checkpoint, *callbacks])
    trainer.fit(task, TinyTokens(), ckpt_path=ckpt_path)
    return trainer, task


def load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def assert_same_run(trainer, task, ref_trainer, ref_task):
    assert trainer.global_step == ref_trainer.global_step
    assert trainer.current_epoch == ref_trainer.current_epoch
    for key, value in ref_task.state_dict().items():  # weights, and the running metric sums
        assert torch.equal(task.state_dict()[key], value), key
    assert torch.equal(trainer.callback_metrics["train_loss"], ref_trainer.callback_metrics["train_loss"])


@pytest.mark.parametrize("first, then", [
    ((1, 3), (1, 5)),    # stopped by max_steps mid-epoch, more steps (Lightning 2.6 trained none)
    ((1, -1), (2, 8)),   # a finished run extended by epochs and steps (Lightning 2.6 trained none)
    ((2, 9), (2, -1)),   # stopped mid-epoch 1, run to the end of its epochs
    ((1, 6), (2, 9)),    # stopped by max_steps exactly at an epoch end
], ids=["mid-epoch-more-steps", "finished-more-epochs-and-steps", "mid-epoch-to-the-end", "epoch-end-more-steps"])
def test_resume_with_larger_limits_trains_the_extra_steps_as_an_uninterrupted_run(tmp_path, first, then):
    ref_trainer, ref_task = fit(tmp_path / "ref", *then, **FLAT)
    fit(tmp_path / "run", *first, **FLAT)
    assert load(tmp_path / "run" / "ckpt" / "last.ckpt")["global_step"] == (first[1] if first[1] > 0 else BATCHES)
    trainer, task = fit(tmp_path / "run", *then, ckpt_path="last", **FLAT)
    assert_same_run(trainer, task, ref_trainer, ref_task)
    assert load(tmp_path / "run" / "ckpt" / "last.ckpt")["global_step"] == ref_trainer.global_step


def test_resume_applies_a_new_lr_and_length_to_the_rest_of_the_schedule(tmp_path):
    settings = {"lr": 1e-3, "warmup_steps": 2}
    ref_lrs = RecordLR()
    fit(tmp_path / "ref", max_steps=5, callbacks=[ref_lrs], **settings)  # the run as if started with the new settings
    fit(tmp_path / "run", max_steps=3, lr=1e-2, warmup_steps=2)
    lrs = RecordLR()
    trainer, task = fit(tmp_path / "run", max_steps=5, ckpt_path="last", callbacks=[lrs], **settings)
    assert trainer.global_step == 5
    assert sorted(lrs.lrs) == [3, 4]
    for step in (3, 4):
        assert lrs.lrs[step] == ref_lrs.lrs[step], step
    groups = trainer.optimizers[0].param_groups
    assert max(g["initial_lr"] for g in groups) == 1e-3  # the tagged SSM groups keep their fraction of it
    assert load(tmp_path / "run" / "ckpt" / "last.ckpt")["hyper_parameters"]["lr"] == 1e-3


def test_a_fresh_run_keeps_the_optimizer_it_built(tmp_path):
    lrs = RecordLR()
    trainer, _ = fit(tmp_path, max_steps=4, callbacks=[lrs], lr=1e-2, warmup_steps=2)
    assert max(lrs.lrs[0]) == pytest.approx(0.5e-2) and max(lrs.lrs[1]) == pytest.approx(1e-2)


def test_a_moved_run_keeps_writing_its_last_ckpt(tmp_path):
    fit(tmp_path / "old", max_epochs=1)
    shutil.move(tmp_path / "old", tmp_path / "new")
    trainer, _ = fit(tmp_path / "new", max_epochs=2, ckpt_path="last")
    folder = (tmp_path / "new" / "ckpt").resolve()
    assert sorted(p.name for p in folder.glob("last*")) == ["last.ckpt"]
    assert load(folder / "last.ckpt")["global_step"] == trainer.global_step == 2 * BATCHES
    callback = trainer.checkpoint_callback
    assert callback.last_model_path == str(folder / "last.ckpt")
    assert Path(callback.best_model_path).parent == folder and Path(callback.best_model_path).is_file()


def test_last_ckpt_is_current_after_every_epoch_even_without_a_new_best(tmp_path):
    # lr so small that val_acc never improves after the first epoch: Lightning 2.6 then left last.ckpt at epoch 0
    trainer, task = fit(tmp_path, max_epochs=3, lr=1e-7)
    last = load(tmp_path / "ckpt" / "last.ckpt")
    assert last["global_step"] == trainer.global_step == 3 * BATCHES
    assert torch.equal(last["state_dict"]["model.head.weight"], task.model.head.weight)


class BarAtEachBatch(L.Callback):
    """Records the training bar's total and description (TQDM's or Rich's) as each training batch ends."""

    def __init__(self):
        self.seen = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        bar = trainer.progress_bar_callback
        if isinstance(bar, TQDMProgressBar):
            total, description = bar.train_progress_bar.total, bar.train_progress_bar.desc
        else:
            task = bar.progress.tasks[bar.train_progress_bar_id]
            total, description = task.total, task.description
        self.seen.append((batch_idx, total, description.split("/")[0].rstrip(": ")))  # "Epoch 0: ", "Epoch 0/1"


@pytest.mark.parametrize("bar", [TQDMProgressBar, RichProgressBar])
def test_a_mid_epoch_resume_shows_the_epoch_and_its_batches_in_the_progress_bar(tmp_path, bar):
    if bar is RichProgressBar:
        pytest.importorskip("rich")
    fit(tmp_path, max_steps=3)  # last.ckpt at batch 3 of 6
    L.seed_everything(0)
    bars = BarAtEachBatch()
    trainer = make_trainer(tmp_path, max_epochs=2, max_steps=8, enable_checkpointing=True, enable_progress_bar=True,
                           callbacks=[ResumableTrainData(), TaskCheckpoint(dirpath=tmp_path / "ckpt"), bar(), bars])
    trainer.fit(make_task(), TinyTokens(), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    # Lightning 2.6 alone showed TQDM's "Training: 4/?" for the rest of the resumed epoch
    assert bars.seen == [(i, BATCHES, "Epoch 0") for i in (3, 4, 5)] + [(i, BATCHES, "Epoch 1") for i in (0, 1)]
