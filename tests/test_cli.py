"""The `seqssm` command: fit / resume / test / export through the console script, config errors, DDP on CPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import torch
import yaml

from tasks.helpers import one_thread  # noqa: F401  (autouse: tiny models run on one thread)

from seqssm.cli import main
from seqssm.models import SequenceModel
from seqssm.models.loading import model_from_checkpoint

TINY_RECIPE = {
    "seed_everything": 0,
    "trainer": {"max_epochs": 1, "default_root_dir": "run", "enable_progress_bar": False,
                "enable_model_summary": False, "log_every_n_steps": 1},
    "model": {"class_path": "seqssm.tasks.Classification",
              "init_args": {"model": "mamba-s6", "model_overrides": {"d_model": 16, "n_layers": 1, "dropout": 0.0},
                            "lr": 3e-3}},
    "data": {"class_path": "seqssm.data.SpeciesDataModule",
             "init_args": {"data_dir": "genomes", "generate": True, "generate_length": 4000, "species": ["human", "mouse"],
                           "max_length": 32, "batch_size": 16, "train_size": 64, "val_size": 32, "test_size": 32}},
}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A folder holding the tiny recipe; tests run inside it."""
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY_RECIPE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["seqssm"])
    return tmp_path


def seqssm(*args: str, cwd, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run the installed console script (falling back to the module) and return the finished process."""
    command = [shutil.which("seqssm")] if shutil.which("seqssm") else [sys.executable, "-m", "seqssm.cli"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # tiny models; threads only fight on a shared machine
    result = subprocess.run(command + list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"seqssm {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def global_step(path) -> int:
    return torch.load(path, map_location="cpu", weights_only=True)["global_step"]


def test_fit_resume_test_and_export(workdir, capsys):
    seqssm("fit", "--config", "tiny.yaml", cwd=workdir)
    last = workdir / "run" / "checkpoints" / "last.ckpt"
    assert global_step(last) == 4
    assert any(p.name.startswith("epoch=0-step=4-val_acc=") for p in last.parent.iterdir())
    logs = workdir / "run" / "lightning_logs" / "version_0"
    assert yaml.safe_load((logs / "hparams.yaml").read_text())["n_classes"] == 2  # linked from the data
    config = logs / "config.yaml"

    # the rest in this process: same entry point, without paying for another interpreter start
    main(["fit", "--config", "tiny.yaml", "--ckpt_path", "last", "--trainer.max_epochs", "2"])
    assert global_step(last) == 8, "resumed from step 4 and trained one more epoch"

    main(["test", "--config", str(config), "--ckpt_path", str(last)])
    assert "test_acc" in capsys.readouterr().out

    main(["export", str(last), "exported"])
    exported = SequenceModel.from_pretrained(workdir / "exported").eval()
    trained = model_from_checkpoint(last).eval()
    x = torch.randint(7, 11, (3, 32))
    with torch.no_grad():
        assert torch.equal(exported(x), trained(x))


@pytest.mark.parametrize("args, code, words", [
    (["--model.init_args.lr", "-1"], 1, ["Classification.lr must be a positive number", "--model.init_args.lr"]),
    (["--model.init_args.lr", "fast"], 2, ['Parser key "lr"', "Expected a <class 'float'>. Got value: fast"]),
    (["--model.init_args.model", "mamba-s7"], 1, ["unknown model 'mamba-s7'"]),
    (["--data.init_args.task", "ntp"], 1, ["n_classes", "NextTokenPrediction"]),
    (["--model", "seqssm.tasks.NextTokenPrediction", "--model.init_args.model", "mamba-s6-bi"], 1, ["causal"]),
    (["--weights_only", "false"], 1, ["weights_only"]),
])
def test_bad_config_values_fail_naming_the_field(workdir, capsys, args, code, words):
    with pytest.raises(SystemExit) as info:
        main(["fit", "--config", "tiny.yaml", *args])
    assert info.value.code == code
    err = capsys.readouterr().err
    for word in words:
        assert word in err


def test_ddp_two_cpu_processes(workdir):
    # Write the genomes and their FASTA indexes first: both ranks read them in setup, and pyfaidx building the
    # same index in two processes at once races (a DataModule issue, reported).
    from seqssm.data import SpeciesDataModule

    SpeciesDataModule(**TINY_RECIPE["data"]["init_args"]).setup()
    result = seqssm("fit", "--config", "tiny.yaml", "--trainer.strategy", "ddp", "--trainer.devices", "2",
                    "--trainer.accelerator", "cpu", "--trainer.max_epochs", "2", "--trainer.max_steps", "3",
                    "--checkpoint.last_every_n_train_steps", "1", cwd=workdir)
    output = result.stdout + result.stderr
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in output
    last = torch.load(workdir / "run" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    # 64 windows split over 2 ranks at batch 16: 2 batches per rank and epoch (one process would have 4),
    # so step 3 falls in epoch 1
    assert last["global_step"] == 3 and last["epoch"] == 1
