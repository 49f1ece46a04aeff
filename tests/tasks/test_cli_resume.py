"""`seqssm fit` and resuming: --ckpt_path last finds the run or says where it looked; a new run never overwrites
another run's last.ckpt; a run stopped by --trainer.max_steps resumes for more steps."""

from __future__ import annotations

import pytest
import torch
from test_cli import workdir  # noqa: F401

from seqssm.cli import main

from .helpers import one_thread  # noqa: F401


def fit(*args):
    main(["fit", "--config", "tiny.yaml", "--torch_threads", "1", *args])


def test_resume_finds_the_run_or_says_where_it_looked(workdir, capsys):
    with pytest.raises(SystemExit) as info:
        fit("--ckpt_path", "last")
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert ("seqssm fit: error: --ckpt_path last: nothing to resume: no last.ckpt in run/checkpoints (the checkpoints "
            "folder of trainer.default_root_dir=run)") in err
    assert "leave out --ckpt_path to start a new run" in err and "save_last" not in err
    assert not (workdir / "run").exists(), "nothing was written"

    fit("--trainer.max_steps", "2")  # stops inside the first epoch (4 batches)
    last = workdir / "run" / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == 2
    before = last.read_bytes()

    with pytest.raises(SystemExit) as info:
        fit()  # a new run in the same folder
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert ("seqssm fit: error: run/checkpoints/last.ckpt holds the state of an earlier run, which this run would "
            "overwrite. Resume that run with --ckpt_path last") in err
    assert last.read_bytes() == before

    fit("--ckpt_path", "last", "--trainer.max_steps", "3")
    assert torch.load(last, weights_only=True)["global_step"] == 3
