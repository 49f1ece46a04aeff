"""Training one `seqssm fit` config in a folder of its own: what the species study and the reproductions both do."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterable

import lightning as L
import torch
import yaml

from seqssm.study.callbacks import TrainClock


def fit_in_folder(run_dir: Path, config: dict, callbacks: Iterable[L.Callback] = ()):
    """Train the `seqssm fit` config `config` (its trainer.default_root_dir being run_dir) in run_dir ->
    (the LightningCLI after fit, its TrainClock). run.yaml records the config; an interrupted earlier attempt's
    checkpoints are deleted first, and torch's process-wide thread count is restored afterwards (each run sets
    its own)."""
    from seqssm.tasks.lightning_cli import make_cli

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    # A fresh fit rather than a resume of last.ckpt: Lightning 2.6 resumed from an epoch-end checkpoint trains no
    # further batches, and a whole fit keeps the wall-clock honest.
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    threads = torch.get_num_threads()
    cli = make_cli(["--config", str(run_dir / "run.yaml")], run=False)
    clock = TrainClock()
    cli.trainer.callbacks.extend([clock, *callbacks])
    try:
        cli.trainer.fit(cli.model, cli.datamodule)
    finally:
        torch.set_num_threads(threads)
    return cli, clock
