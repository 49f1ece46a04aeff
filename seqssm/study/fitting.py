"""Training one config in a folder of its own, what the species study and the reproductions both do: skip a run
whose record (result.json) holds the same config, refuse one made with another config, say when an interrupted
attempt starts over, fit a `seqssm fit` config, and write the record whole or not at all."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import torch
import yaml

from seqssm.errors import SeqssmError
from seqssm.files import atomic_write
from seqssm.recipes import differences

if TYPE_CHECKING:  # the record helpers run without Lightning; fit_in_folder imports it when it trains
    import lightning as L

RESULT = "result.json"  # a finished run's record, in its folder
SHOWN_DIFFERENCES = 5  # settings named in the error about a run made with other settings


def finished_record(run_dir: Path, config: Any, error: type[SeqssmError]) -> dict | None:
    """The record in run_dir/result.json if it was made with `config` (compared as JSON gives it back: tuples are
    lists); None if the run has no record; `error` naming the settings that differ if it was made with others."""
    path = run_dir / RESULT
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    changed = differences(record.get("config"), json.loads(json.dumps(config)))
    if changed:
        more = f"; {len(changed) - SHOWN_DIFFERENCES} more" if len(changed) > SHOWN_DIFFERENCES else ""
        raise error(f"{path} was made with other settings ({'; '.join(changed[:SHOWN_DIFFERENCES])}{more}); use "
                    f"another --out, or delete {run_dir} to run it again")
    return record


def write_record(run_dir: Path, record: dict) -> None:
    """Write a finished run's record to run_dir/result.json, whole or not at all (a run killed while writing stays
    unfinished rather than half-recorded)."""
    atomic_write(run_dir / RESULT, json.dumps(record, indent=2) + "\n")


def interrupted(run_dir: Path) -> bool:
    """Whether run_dir holds an earlier attempt that stopped before its record: such a run starts over."""
    return run_dir.is_dir() and not (run_dir / RESULT).is_file() and any(run_dir.iterdir())


def restart_note(run_dir: Path) -> str:
    """" (interrupted before: starting over)" for a run whose earlier attempt stopped before its record, else ""."""
    return " (interrupted before: starting over)" if interrupted(run_dir) else ""


def fit_in_folder(run_dir: Path, config: dict, callbacks: Iterable[L.Callback] = ()):
    """Train the `seqssm fit` config `config` (its trainer.default_root_dir being run_dir) in run_dir ->
    (the LightningCLI after fit, its TrainClock). run.yaml records the config; an interrupted earlier attempt's
    checkpoints are deleted first, and torch's process-wide thread count is restored afterwards (each run sets
    its own)."""
    from seqssm.study.callbacks import TrainClock
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
