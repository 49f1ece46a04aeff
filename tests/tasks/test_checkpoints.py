"""Checkpoints: export/import round trip, safe loading, finetuning from pretrained weights, exact resume."""

from __future__ import annotations

import json
import pickle

import lightning as L
import pytest
import torch

from seqssm.models import SequenceModel, build
from seqssm.models.hub import FORMAT, FORMAT_VERSION, save_pretrained
from seqssm.models.loading import export_checkpoint, read_weights
from seqssm.models.surgery import fuse_f1r1
from seqssm.tasks import Classification, IncompatibleWeightsError, NextTokenPrediction
from seqssm.tasks.checkpoint import TaskCheckpoint
from seqssm.tasks.resume import ResumableTrainData

from .helpers import MASK, VOCAB, TinyTokens, a_batch, make_task, make_trainer, one_thread  # noqa: F401


def fit_with_checkpoints(tmp_path, task, max_epochs=1, callbacks=(), **trainer_kwargs):
    checkpoint = TaskCheckpoint(dirpath=tmp_path / "ckpt", last_every_n_train_steps=1)
    trainer = make_trainer(tmp_path, max_epochs=max_epochs, enable_checkpointing=True,
                           callbacks=[ResumableTrainData(), checkpoint, *callbacks], **trainer_kwargs)
    trainer.fit(task, TinyTokens())
    return trainer, tmp_path / "ckpt" / "last.ckpt"


def backbone_state(model):
    return {k: v.clone() for k, v in model.state_dict().items() if not k.startswith("head.")}


def test_export_round_trip_gives_identical_outputs(tmp_path):
    task = make_task()
    _, last = fit_with_checkpoints(tmp_path, task)
    out = export_checkpoint(last, tmp_path / "exported")
    meta = json.loads((out / "config.json").read_text())
    assert meta["format"] == FORMAT and meta["format_version"] == FORMAT_VERSION
    assert meta["model"] == task.model.config.to_dict()
    assert (out / "model.safetensors").is_file()
    loaded = SequenceModel.from_pretrained(out).eval()
    batch = a_batch(TinyTokens())
    with torch.no_grad():
        expected = task.model.eval()(batch["inputs"], lengths=batch["lengths"])
        assert torch.equal(loaded(batch["inputs"], lengths=batch["lengths"]), expected)
        assert torch.equal(SequenceModel.from_pretrained(last).eval()(batch["inputs"], lengths=batch["lengths"]), expected)


def test_tied_language_model_head_survives_the_round_trip(tmp_path):
    task = make_task(NextTokenPrediction, model_overrides={"tie_embeddings": True})
    loaded = SequenceModel.from_pretrained(save_pretrained(task.model, tmp_path / "lm"))
    assert loaded.head.weight is loaded.embedding.weight
    torch.testing.assert_close(loaded.state_dict()["head.weight"], task.model.state_dict()["head.weight"])


class Payload:
    """Stands for code an attacker would have a pickle run."""


def test_loading_never_unpickles_code(tmp_path):
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {"model.head.weight": torch.zeros(1)}, "payload": Payload()}, path)
    with pytest.raises(pickle.UnpicklingError):
        read_weights(path)
    with pytest.raises(pickle.UnpicklingError):
        SequenceModel.from_pretrained(path)


def test_finetune_from_ntp_checkpoint_reports_head_mismatch_then_reinitialises_it(tmp_path):
    pretrain = make_task(NextTokenPrediction)
    _, last = fit_with_checkpoints(tmp_path, pretrain)
    pretrained = backbone_state(pretrain.model)

    strict = make_task(init_from=str(last))
    with pytest.raises(IncompatibleWeightsError) as info:
        strict.setup("fit")
    message = str(info.value)
    assert "shape mismatch: head.weight" in message and f"[{VOCAB}, 16]" in message and "[3, 16]" in message
    assert "missing from the weights (1): head.bias" in message

    finetune = make_task(init_from=str(last), reinit_head=True, freeze_backbone=True)
    fresh_head = {k: v.clone() for k, v in finetune.model.head.state_dict().items()}
    trainer = make_trainer(tmp_path, max_epochs=1)
    trainer.fit(finetune, TinyTokens())
    report = finetune.init_report
    assert report.clean and sorted(report.skipped) == ["head.bias", "head.weight"]
    # the frozen backbone is the pretrained one, untouched by training; the head trained from scratch
    for key, value in backbone_state(finetune.model).items():
        assert torch.equal(value, pretrained[key]), key
    assert not torch.equal(finetune.model.head.weight, fresh_head["weight"])
    assert all(not p.requires_grad for n, p in finetune.model.named_parameters() if not n.startswith("head."))


def test_non_strict_loading_reports_what_did_not_fit(tmp_path):
    folder = save_pretrained(make_task(model_overrides={"n_layers": 2}).model, tmp_path / "two-layers")
    task = make_task(init_from=str(folder), init_strict=False)
    task.setup("fit")
    report = task.init_report
    assert report.unexpected and all(k.startswith("backbone.layers.1.") for k in report.unexpected)
    assert not report.missing and not report.mismatched and report.loaded


def test_init_from_exported_folder_is_exact(tmp_path):
    source = make_task()
    folder = save_pretrained(source.model, tmp_path / "folder")
    task = make_task(init_from=str(folder))
    task.setup("fit")
    assert task.init_report.clean
    for key, value in source.model.state_dict().items():
        assert torch.equal(task.model.state_dict()[key], value)


def test_init_from_records_the_folder_and_its_lineage_as_parent(tmp_path):
    """A task started from a surgery folder records it as its parent, with the folder's own provenance nested."""
    small = dict(vocab_size=12, d_model=16, n_layers=2)
    forward_dir = save_pretrained(build("mamba-s6", **small), tmp_path / "fwd")
    reverse_dir = save_pretrained(build("mamba-s6", **small), tmp_path / "rev")
    fused_dir = save_pretrained(fuse_f1r1(forward_dir, reverse_dir), tmp_path / "f1r1")
    record = json.loads((fused_dir / "config.json").read_text())["provenance"]
    task = Classification(model="mamba-s6-bi", model_overrides={"d_model": 16, "n_layers": 2}, vocab_size=12,
                          n_classes=5, init_from=str(fused_dir), reinit_head=True)
    task.setup("fit")
    expected = {"operation": "init_from", "parents": [{"role": "init_from", "path": str(fused_dir),
                                                       "provenance": record}]}
    assert task.model.provenance == expected
    checkpoint = {}
    task.on_save_checkpoint(checkpoint)
    assert checkpoint["seqssm_provenance"] == expected and task.hparams.init_from == str(fused_dir)


class Crash(RuntimeError):
    """The simulated death of the training process."""


class CrashAt(L.Callback):
    """Simulates the process dying after optimizer step `step`, before that step's checkpoint is written."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == self.step:
            raise Crash(f"killed after step {self.step}")


def test_resume_mid_epoch_matches_an_uninterrupted_run(tmp_path):
    dropout = {"model_overrides": {"dropout": 0.2}}  # exercises the random stream, not only the data order
    L.seed_everything(0)
    reference = make_task(**dropout)
    ref_trainer, _ = fit_with_checkpoints(tmp_path / "ref", reference, max_epochs=2)

    L.seed_everything(0)
    interrupted = make_task(**dropout)
    crash_step = 8  # epoch 1 (6 batches per epoch), batch 2
    with pytest.raises(Crash):
        fit_with_checkpoints(tmp_path / "run", interrupted, max_epochs=2, callbacks=[CrashAt(crash_step)])
    # checkpoint callbacks run last, so the newest checkpoint is the step before: that step is trained again
    assert torch.load(tmp_path / "run" / "ckpt" / "last.ckpt", weights_only=True)["global_step"] == crash_step - 1

    L.seed_everything(123)  # a fresh process would not share the first run's random state
    resumed = make_task(**dropout)
    checkpoint = TaskCheckpoint(dirpath=tmp_path / "run" / "ckpt", last_every_n_train_steps=1)
    trainer = make_trainer(tmp_path / "run", max_epochs=2, enable_checkpointing=True,
                           callbacks=[ResumableTrainData(), checkpoint])
    trainer.fit(resumed, TinyTokens(), ckpt_path="last")

    assert trainer.global_step == ref_trainer.global_step == 12
    for key in ("val_loss", "val_acc", "train_loss", "train_acc"):
        assert torch.equal(trainer.callback_metrics[key], ref_trainer.callback_metrics[key]), key
    for key, value in reference.state_dict().items():
        assert torch.equal(resumed.state_dict()[key], value), key
