"""The NaN guard: a non-finite loss or gradient stops training before the update, and the checkpoint it names
is from before the failure and resumes."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from seqssm.tasks import NonFiniteLossError
from seqssm.tasks.checkpoint import TaskCheckpoint
from seqssm.tasks.resume import ResumableTrainData

from .helpers import PoisonAt, PoisonGradientAt, TinyTokens, make_task, make_trainer, one_thread  # noqa: F401


def fit(folder, callbacks=(), ckpt_path=None, max_epochs=2):
    L.seed_everything(0)
    task = make_task()
    checkpoint = TaskCheckpoint(dirpath=folder / "ckpt", last_every_n_train_steps=1)
    trainer = make_trainer(folder, max_epochs=max_epochs, enable_checkpointing=True,
                           callbacks=[ResumableTrainData(), checkpoint, *callbacks])
    trainer.fit(task, TinyTokens(), ckpt_path=ckpt_path)
    return trainer, task


@pytest.mark.parametrize("step", [3, 6], ids=["mid-epoch", "first-step-of-an-epoch"])
def test_a_non_finite_gradient_stops_before_the_update_and_names_the_checkpoint_before_it(tmp_path, step):
    # the loss is finite; only the gradient is not: the update must not happen, nor a checkpoint after it
    with pytest.raises(NonFiniteLossError) as info:
        fit(tmp_path, callbacks=[PoisonGradientAt(step=step)])
    last = tmp_path / "ckpt" / "last.ckpt"
    message = str(info.value)
    assert f"non-finite gradient of model.head.weight at global step {step}" in message
    assert "training stopped before this step's update" in message
    # last.ckpt held this very step, which resumed exactly gives the same gradients: the one before is put back
    assert f"Last good checkpoint: {last} (global step {step - 1})" in message
    saved = torch.load(last, weights_only=True)
    assert saved["global_step"] == step - 1
    assert sorted(p.name for p in last.parent.iterdir() if p.name.startswith(".")) == []
    assert all(torch.isfinite(v).all() for v in saved["state_dict"].values())

    trainer, task = fit(tmp_path, ckpt_path="last")  # the named checkpoint resumes and trains on
    assert trainer.global_step == 12
    assert all(torch.isfinite(p).all() for p in task.parameters())


def test_a_checkpoint_that_fails_at_once_is_not_called_good(tmp_path):
    fit(tmp_path, max_epochs=1)
    with pytest.raises(NonFiniteLossError) as info:
        fit(tmp_path, callbacks=[PoisonAt(step=6)], ckpt_path="last")  # the first step after resuming
    message = str(info.value)
    assert f"none: this run resumed from {tmp_path / 'ckpt' / 'last.ckpt'} at this very step" in message
    assert "the best one is" in message
