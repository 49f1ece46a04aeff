"""Interruptions lose at most the step in flight: SIGINT / SIGTERM save last.ckpt and stop, last.ckpt is refreshed
on a clock, a kill -9 (even while a checkpoint is written) leaves a loadable last.ckpt that resumes exactly."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml
from test_cli import workdir  # noqa: F401

import seqssm.tasks.checkpoint as checkpoint_module
from seqssm.cli import main
from seqssm.tasks import TrainingInterrupted
from seqssm.tasks.checkpoint import TaskCheckpoint
from seqssm.files import temporary_path
from seqssm.tasks.files import AtomicCheckpointIO
from seqssm.tasks.resume import ResumableTrainData

from .helpers import SignalAt, TinyTokens, make_task, make_trainer, one_thread  # noqa: F401

TESTS = Path(__file__).resolve().parents[1]


def load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def fit(folder, max_epochs=2, ckpt_path=None, callbacks=(), **checkpoint_kwargs):
    L.seed_everything(0)
    task = make_task(model_overrides={"dropout": 0.1})
    checkpoint = TaskCheckpoint(dirpath=folder / "ckpt", **checkpoint_kwargs)
    trainer = make_trainer(folder, max_epochs=max_epochs, enable_checkpointing=True,
                           callbacks=[ResumableTrainData(), checkpoint, *callbacks])
    trainer.fit(task, TinyTokens(), ckpt_path=ckpt_path)
    return trainer, task


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_saves_last_ckpt_and_stops_after_the_step(tmp_path, signum):
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(TrainingInterrupted) as info:
        fit(tmp_path, callbacks=[SignalAt(step=8, signum=int(signum))])  # epoch 1, batch 2: mid-epoch
    stop = info.value
    last = tmp_path / "ckpt" / "last.ckpt"
    assert stop.signum == signum and stop.global_step == 9 and Path(stop.checkpoint) == last.resolve()
    assert f"training stopped by {signum.name} at global step 9" in str(stop) and "--ckpt_path last" in str(stop)
    assert load(last)["global_step"] == 9  # the step in flight finished and was saved
    assert {s: signal.getsignal(s) for s in handlers} == handlers, "the previous handlers are back"
    if signum == signal.SIGINT:  # resuming it gives the uninterrupted run (once is enough)
        reference, ref_task = fit(tmp_path / "ref")
        resumed, task = fit(tmp_path, ckpt_path="last")
        assert resumed.global_step == reference.global_step == 12
        for key, value in ref_task.state_dict().items():
            assert torch.equal(task.state_dict()[key], value), key


def test_seqssm_fit_on_sigterm_says_where_the_run_is_and_how_to_resume(workdir, capsys):
    recipe = yaml.safe_load((workdir / "tiny.yaml").read_text())
    recipe["trainer"]["callbacks"] = [{"class_path": "tasks.helpers.SignalAt",
                                      "init_args": {"step": 2, "signum": int(signal.SIGTERM)}}]
    (workdir / "stop.yaml").write_text(yaml.safe_dump(recipe))
    with pytest.raises(SystemExit) as info:
        main(["fit", "--config", "stop.yaml", "--torch_threads", "1"])
    assert info.value.code == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    last = Path("run") / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    assert f"training stopped by SIGTERM at global step 3; the run is saved in {last}" in err
    assert "Resume it with: seqssm fit --config stop.yaml --torch_threads 1 --ckpt_path last" in err
    assert load(workdir / last)["global_step"] == 3


def test_a_second_ctrl_c_stops_at_once_with_exit_code_130_and_keeps_last_ckpt(workdir, capsys):
    # Before: Lightning's "Detected KeyboardInterrupt" and exit code 1, which reads as a failure
    recipe = yaml.safe_load((workdir / "tiny.yaml").read_text())
    twice = {"class_path": "tasks.helpers.SignalAt", "init_args": {"step": 2, "signum": int(signal.SIGINT)}}
    recipe["trainer"]["callbacks"] = [twice, twice]  # the second comes before the step in flight ends
    (workdir / "twice.yaml").write_text(yaml.safe_dump(recipe))
    with pytest.raises(SystemExit) as info:
        main(["fit", "--config", "twice.yaml", "--torch_threads", "1", "--checkpoint.last_every_n_train_steps", "1"])
    assert info.value.code == 128 + signal.SIGINT
    last = Path("run") / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    assert (f"seqssm fit: stopped at once by Ctrl-C (SIGINT), without saving the step in flight; {last} (global step "
            "2) is intact: resume it with --ckpt_path last") in capsys.readouterr().err
    assert load(workdir / last)["global_step"] == 2
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Ctrl-C works again in this process


def test_last_ckpt_is_refreshed_on_a_clock_by_default(tmp_path, monkeypatch):
    assert TaskCheckpoint().last_every_n_minutes == 10
    clock = {"now": 0.0}

    class Clock:
        @staticmethod
        def monotonic():
            return clock["now"]

    class ThreeMinutesPerStep(L.Callback):
        def on_train_batch_start(self, *args):
            clock["now"] += 3 * 60

    monkeypatch.setattr(checkpoint_module, "time", Clock)
    written = []
    save = TaskCheckpoint.save_last_now
    monkeypatch.setattr(TaskCheckpoint, "save_last_now",
                        lambda self, trainer: written.append(trainer.global_step) or save(self, trainer))
    fit(tmp_path, max_epochs=1, callbacks=[ThreeMinutesPerStep()])
    assert written == [4, 6]  # 12 minutes after the start (step 4), then the end of the epoch (step 6)


class Interrupted(BaseException):
    """Stands for the end of the process in the middle of a write."""


def test_a_failed_checkpoint_write_leaves_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"global_step": 1}, path)

    def write_half_then_fail(obj, f, *args, **kwargs):
        Path(f).write_bytes(b"PK\x03\x04 half a zip")
        raise Interrupted

    monkeypatch.setattr(torch, "save", write_half_then_fail)
    with pytest.raises(Interrupted):
        io.save_checkpoint({"global_step": 2}, path)
    assert load(path) == {"global_step": 1}
    assert not temporary_path(path).exists()


def test_kill_9_while_writing_a_checkpoint_then_resume_reaches_the_uninterrupted_run(workdir):
    extra = ["--trainer.max_epochs", "2", "--checkpoint.last_every_n_train_steps", "1", "--torch_threads", "1"]
    killer = [{"class_path": "tasks.helpers.KillDuringCheckpointWrite", "init_args": {"step": 6}}]
    recipe = yaml.safe_load((workdir / "tiny.yaml").read_text())
    (workdir / "killed.yaml").write_text(yaml.safe_dump({**recipe, "trainer": {**recipe["trainer"], "callbacks": killer}}))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    script = Path(sys.executable).with_name("seqssm")  # this interpreter's own entry point, whatever PATH holds
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "seqssm.cli"]
    run = subprocess.run([*command, "fit", "--config", "killed.yaml", *extra], cwd=workdir, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == -signal.SIGKILL, run.stderr[-3000:]

    folder = workdir / "run" / "lightning_logs" / "version_0" / "checkpoints"
    last = folder / "last.ckpt"
    assert load(last)["global_step"] == 5, "the previous last.ckpt is intact: step 5, 4 batches per epoch"
    cut = list(folder.glob(".last.ckpt.tmp-*"))
    assert len(cut) == 1 and cut[0].stat().st_size > 0, "the kill cut the write of step 6 short"

    main(["fit", "--config", "tiny.yaml", *extra, "--ckpt_path", "last"])  # resumed, without the killer
    assert not (workdir / "run" / "lightning_logs" / "version_1").exists(), "a resumed run goes on in its folder"
    assert not cut[0].exists(), "the resumed run cleans up the cut write"
    resumed = load(last)

    main(["fit", "--config", "tiny.yaml", *extra, "--trainer.default_root_dir", "ref"])  # never interrupted
    reference = load(workdir / "ref" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt")
    assert resumed["global_step"] == reference["global_step"] == 8
    for key, value in reference["state_dict"].items():
        torch.testing.assert_close(resumed["state_dict"][key], value, rtol=1e-5, atol=1e-6, msg=key)
    logs = folder.parent, workdir / "ref" / "lightning_logs" / "version_0"  # resumed in its own folder
    resumed_metrics, reference_metrics = (final_metrics(log / "metrics.csv") for log in logs)
    assert resumed_metrics == pytest.approx(reference_metrics, rel=1e-5)


def final_metrics(path) -> dict[str, float]:
    """The last value of each epoch metric in a metrics.csv (Lightning writes train and val on separate rows)."""
    last = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            last.update({key: float(value) for key, value in row.items() if value})
    return {key: last[key] for key in ("epoch", "step", "train_loss", "train_acc", "val_loss", "val_acc")}
