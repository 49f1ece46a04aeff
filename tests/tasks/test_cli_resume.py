"""`seqssm fit` runs and their folders: each new run of a recipe is a new version beside the others, --ckpt_path last
resumes the newest run in its own folder (or says where it looked), a run stopped by --trainer.max_steps resumes for
more steps, a run folder is locked while a run writes to it, a full disk is one line that names the folder, and a
run that failed at once leaves nothing that refuses the next one."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_cli import run, workdir  # noqa: F401

from seqssm.cli import main
from seqssm.errors import RunFolderBusyError
from seqssm.files import temporary_path
from seqssm.tasks.files import LOCK_FILE, RunFolderLock

from .helpers import one_thread  # noqa: F401


def fit(*args):
    main(["fit", "--config", "tiny.yaml", "--torch_threads", "1", *args])


def version(n: int) -> Path:
    """Run n's folder in the tiny recipe's default_root_dir (relative to the working directory)."""
    return Path("run") / "lightning_logs" / f"version_{n}"


def step_of(path) -> int:
    return torch.load(path, weights_only=True)["global_step"]


def test_resume_finds_the_run_or_says_where_it_looked(workdir, capsys):
    code, err = run(["fit", "--config", "tiny.yaml", "--ckpt_path", "last"], capsys)
    assert code == 2
    assert ("seqssm fit: error: --ckpt_path last: nothing to resume: no last.ckpt in run/lightning_logs/version_*/"
            "checkpoints (the runs of trainer.default_root_dir=run)") in err
    assert "leave out --ckpt_path to start a new run" in err and "save_last" not in err
    assert not (workdir / "run" / "lightning_logs").exists(), "nothing was written"

    fit("--trainer.max_steps", "2")  # stops inside the first epoch (4 batches)
    last = version(0) / "checkpoints" / "last.ckpt"
    assert step_of(last) == 2

    fit("--ckpt_path", "last", "--trainer.max_steps", "3")
    assert step_of(last) == 3, "resumed in its own folder"
    assert sorted(p.name for p in (workdir / "run" / "lightning_logs").iterdir()) == ["version_0"]
    with open(version(0) / "metrics.csv", newline="") as f:
        steps = [int(row["step"]) for row in csv.DictReader(f) if row.get("lr")]
    assert steps == [0, 1, 2], "the resumed run's rows follow the first part's in the same metrics.csv"


def test_a_second_run_of_a_recipe_is_a_new_version_and_last_resumes_the_newest(workdir, capsys):
    fit("--trainer.max_steps", "2")
    first = version(0) / "checkpoints" / "last.ckpt"
    before = first.read_bytes()
    fit("--trainer.max_steps", "1")  # the same command again: a new run beside the first
    second = version(1) / "checkpoints" / "last.ckpt"
    assert step_of(second) == 1 and (version(1) / "config.yaml").is_file()
    assert first.read_bytes() == before, "the first run's checkpoints are untouched"

    fit("--ckpt_path", "last", "--trainer.max_steps", "2")
    assert step_of(second) == 2 and first.read_bytes() == before, "last is the newest run, resumed where it is"
    fit("--ckpt_path", "last", "--trainer.max_steps", "3")
    assert step_of(second) == 3, "and it stays the newest"
    assert not version(2).exists()

    fit("--ckpt_path", str(first), "--trainer.max_steps", "3")  # an older run, named: resumed in its folder
    assert step_of(first) == 3 and not version(2).exists()


def test_resuming_from_a_best_checkpoint_starts_a_new_version_and_leaves_its_run_as_it_was(workdir, capsys):
    fit()  # one epoch: a best checkpoint at its validation, step 4
    files = {p: p.read_bytes() for p in (version(0) / "checkpoints").iterdir()}
    best = next(p for p in files if p.name.startswith("epoch=0-step=4-val_acc="))
    fit("--ckpt_path", str(best), "--trainer.max_epochs", "2")
    assert {p: p.read_bytes() for p in (version(0) / "checkpoints").iterdir()} == files
    assert step_of(version(1) / "checkpoints" / "last.ckpt") == 8
    assert any(p.name.startswith("epoch=1-step=8-") for p in (version(1) / "checkpoints").iterdir())


def test_a_run_folder_is_locked_while_a_run_writes_to_it(workdir, capsys):
    with RunFolderLock("run"):
        code, err = run(["fit", "--config", "tiny.yaml"], capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"seqssm fit: error: run is in use by another seqssm fit (PID {os.getpid()} on host ")
    assert "--trainer.default_root_dir" in err
    assert not (workdir / "run").exists(), "the refused run wrote nothing; the lock went with its holder"
    code, err = run(["fit", "--config", "tiny.yaml", "--model.init_args.lr", "-1"], capsys)
    assert code == 2 and not (workdir / "run").exists(), "a run refused for its settings leaves no folder either"

    # another process's lock, held while it runs: refused, naming that process
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from seqssm.tasks.files import RunFolderLock\n"
                               "with RunFolderLock('run'):\n    print('held', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(RunFolderBusyError, match=f"in use by another seqssm fit \\(PID {holder.pid} on host "):
            RunFolderLock("run").__enter__()
    finally:
        holder.communicate("", timeout=60)
    with RunFolderLock("run"):  # released when it ended
        pass


def test_the_lock_of_a_run_that_died_is_taken_over_with_a_line(workdir, capsys):
    (workdir / "run").mkdir()
    (workdir / "run" / LOCK_FILE).write_text("PID 4194303 on host elsewhere since 2026-01-01 00:00:00 UTC\n")
    fit("--trainer.max_steps", "1")
    err = capsys.readouterr().err
    assert ("seqssm: run was locked by a run that is no longer running (PID 4194303 on host elsewhere since "
            "2026-01-01 00:00:00 UTC); taking its lock over") in err
    assert step_of(version(0) / "checkpoints" / "last.ckpt") == 1
    assert not (workdir / "run" / LOCK_FILE).exists()


def test_a_nan_at_the_first_steps_says_there_is_nothing_to_resume_and_refuses_nothing_after(workdir, capsys):
    code, err = run(["fit", "--config", "tiny.yaml", "--torch_threads", "1", "--model.init_args.lr", "1e30",
                     "--checkpoint.last_every_n_train_steps", "1"], capsys)
    assert code == 2 and "non-finite training loss (nan) at global step 1" in err
    assert "No good checkpoint: this run saved none from before this step" in err
    assert "Lower model.init_args.lr" in err and "check the data" in err and "start the run again" in err
    assert "--ckpt_path" not in err, "nothing to resume: no advice to resume"
    assert not (version(0) / "checkpoints" / "last.ckpt").exists(), "the failing state is not left to resume"

    code, err = run(["fit", "--config", "tiny.yaml", "--ckpt_path", "last"], capsys)
    assert code == 2 and "nothing to resume" in err
    fit("--trainer.max_steps", "1")  # a fresh run is not refused
    assert step_of(version(1) / "checkpoints" / "last.ckpt") == 1


def test_the_same_checkpoint_folder_named_twice_is_refused_not_overwritten(workdir, capsys):
    fit("--trainer.max_steps", "1", "--checkpoint.dirpath", "ckpts")
    before = (workdir / "ckpts" / "last.ckpt").read_bytes()
    code, err = run(["fit", "--config", "tiny.yaml", "--checkpoint.dirpath", "ckpts"], capsys)
    assert code == 2 and "ckpts/last.ckpt holds the state of an earlier run, which this run would overwrite" in err
    assert (workdir / "ckpts" / "last.ckpt").read_bytes() == before
    fit("--checkpoint.dirpath", "ckpts", "--ckpt_path", "last", "--trainer.max_steps", "2")
    assert step_of(workdir / "ckpts" / "last.ckpt") == 2


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux) to fill a write")
def test_a_full_disk_during_fit_is_one_line_naming_the_folder_and_keeps_the_checkpoint(workdir, capsys):
    fit("--trainer.max_steps", "2")
    folder = version(0) / "checkpoints"
    before = (folder / "last.ckpt").read_bytes()
    # the next last.ckpt is written under this name: let it be a device on which every write finds no space
    temporary_path(folder / "last.ckpt").symlink_to("/dev/full")
    code, err = run(["fit", "--config", "tiny.yaml", "--torch_threads", "1", "--ckpt_path", "last",
                     "--trainer.max_steps", "3", "--checkpoint.last_every_n_train_steps", "1"], capsys)
    lines = [line for line in err.splitlines() if line.startswith("seqssm fit: error: ")]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"seqssm fit: error: {folder}: no space left on its device while writing last.ckpt")
    assert "unexpected pos" in lines[0] and "Nothing was lost" in lines[0] and "Traceback" not in err
    assert (folder / "last.ckpt").read_bytes() == before
    assert not temporary_path(folder / "last.ckpt").exists()


def test_a_batch_larger_than_memory_is_one_line_naming_batch_size_and_keeps_the_checkpoint(workdir, capsys):
    # Before: torch's allocator traceback ("DefaultCPUAllocator: can't allocate memory"), no word of batch_size
    fit("--trainer.max_steps", "2")
    last = version(0) / "checkpoints" / "last.ckpt"
    before = last.read_bytes()
    code, err = run(["fit", "--config", "tiny.yaml", "--torch_threads", "1", "--ckpt_path", "last",
                     "--trainer.max_steps", "4", "--trainer.callbacks+=tasks.helpers.AllocateAt",
                     "--trainer.callbacks.step", "2"], capsys)
    lines = [line for line in err.splitlines() if line.startswith("seqssm fit: error: ")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0] == ("seqssm fit: error: out of memory: a step of seqssm fit asked for 1.0 PiB in memory, more "
                        "than was free; lower --data.init_args.batch_size (now 16; e.g. 8, with "
                        "--trainer.accumulate_grad_batches doubled to keep the effective batch), or max_length or the "
                        "model's size. The checkpoints written so far are kept")
    assert last.read_bytes() == before


def test_out_of_memory_on_a_gpu_names_the_amount_and_batch_size():
    from seqssm.tasks.lightning_cli import out_of_memory

    error = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of "
                                   "79.19 GiB of which 3.94 GiB is free. Including non-PyTorch memory, ...")
    assert out_of_memory(error, "test", 64) == (
        "out of memory: a step of seqssm test asked for 20.00 GiB on the GPU, more than was free; lower "
        "--data.init_args.batch_size (now 64), or max_length or the model's size. The checkpoints written so far "
        "are kept")
    assert out_of_memory(RuntimeError("shape mismatch"), "fit", 64) is None  # other errors stay themselves


def test_a_full_disk_during_export_is_one_line_naming_the_folder_and_keeps_the_model(workdir, capsys, monkeypatch):
    import safetensors.torch
    from safetensors import SafetensorError

    fit("--trainer.max_steps", "1")
    last = str(version(0) / "checkpoints" / "last.ckpt")
    main(["export", last, "model"])
    before = {p.name: p.read_bytes() for p in (workdir / "model").iterdir()}

    def no_space(*args, **kwargs):  # what safetensors raises when the device fills up under it
        raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space '
                              'left on device" })')

    monkeypatch.setattr(safetensors.torch, "serialize_file", no_space)
    capsys.readouterr()
    code, err = run(["export", last, "model", "--overwrite"], capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"seqssm export: error: model: no space left on its device (Error while serializing: "
                          "IoError(Os { code: 28, kind: StorageFull")
    assert {p.name: p.read_bytes() for p in (workdir / "model").iterdir()} == before, "the previous export is kept"
    assert sorted(p.name for p in workdir.iterdir() if p.name.startswith(".model")) == [], "no staging left"
    # convert writes model folders the same way (`staged_folder`)
    code, err = run(["convert", "model", "converted", "--to", "seqssm"], capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("seqssm convert: error: .: no space left on its device while writing converted (")
    assert not (workdir / "converted").exists(), "nothing half-written"


def test_fast_dev_run_trains_and_leaves_no_run_to_resume(workdir, capsys):
    fit("--trainer.fast_dev_run", "1")  # Lightning swaps in a logger without a folder and saves no checkpoint
    assert not list((workdir / "run").glob("lightning_logs/version_*/checkpoints/last.ckpt"))
