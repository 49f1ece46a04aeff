"""metrics.csv survives a full disk: a failed write keeps every row saved before it."""

from __future__ import annotations

import errno
import resource
import signal

import lightning as L
import pytest

from seqssm.tasks.logs import CSVLogger

from .helpers import TinyTokens, make_task, make_trainer, one_thread  # noqa: F401


class DiskFullAt(L.Callback):
    """At the hook `when` of optimizer step `step`, lets files grow by only 20 more bytes than metrics.csv has (the
    process file-size limit): the next write that needs more fails part-way, as on a full disk, whoever writes."""

    def __init__(self, when: str, step: int, metrics_csv):
        self.when, self.step, self.metrics_csv = when, step, metrics_csv
        self.before: bytes | None = None

    def fill_disk(self, trainer):
        if trainer.global_step == self.step and self.before is None:
            self.before = self.metrics_csv.read_bytes()
            resource.setrlimit(resource.RLIMIT_FSIZE, (len(self.before) + 20, resource.RLIM_INFINITY))

    def on_train_batch_start(self, trainer, *args):
        if self.when == "train":
            self.fill_disk(trainer)

    def on_validation_start(self, trainer, *args):
        if self.when == "validation" and not trainer.sanity_checking:
            self.fill_disk(trainer)


def run_until_the_disk_is_full(root: str, when: str) -> None:
    """Child-process body of the test below: train until a write fails, print what metrics.csv held (JSON)."""
    import json
    from pathlib import Path

    # with SIGXFSZ ignored, a write past the limit fails with EFBIG instead of killing the process
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    tmp_path = Path(root)
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=1)
    metrics_csv = tmp_path / "lightning_logs" / "version_0" / "metrics.csv"
    # in a train step the next save appends a row; after the first validation it adds val_* columns: a rewrite
    disk_full = DiskFullAt(when, step=3 if when == "train" else 6, metrics_csv=metrics_csv)
    trainer = make_trainer(tmp_path, max_epochs=2, logger=logger, log_every_n_steps=1, callbacks=[disk_full])
    try:
        trainer.fit(make_task(), TinyTokens())
        error = None
    except OSError as e:
        error = e.errno
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    print(json.dumps({"errno": error, "before": (disk_full.before or b"").decode()}))


@pytest.mark.parametrize("when", ["train", "validation"], ids=["append", "rewrite-for-new-columns"])
def test_metrics_csv_keeps_its_rows_when_the_disk_is_full(tmp_path, when):
    # The file-size limit that stages the full disk holds for a whole process: it runs in a child of its own, so
    # that no other file this test run writes (pytest's captures, a redirected log) meets it.
    import json
    import subprocess
    import sys
    from pathlib import Path

    tests = Path(__file__).resolve().parents[1]
    code = ("import sys; sys.path[:0] = [sys.argv[1]]; "
            "from tasks.test_logs import run_until_the_disk_is_full as run; run(sys.argv[2], sys.argv[3])")
    child = subprocess.run([sys.executable, "-c", code, str(tests), str(tmp_path), when], capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    result = json.loads(child.stdout.strip().splitlines()[-1])
    assert result["errno"] == errno.EFBIG
    assert result["before"].count("\n") >= 4, "rows were saved before the disk filled up"
    metrics_csv = tmp_path / "lightning_logs" / "version_0" / "metrics.csv"
    assert metrics_csv.read_bytes().decode() == result["before"]
    assert [p.name for p in metrics_csv.parent.iterdir() if p.name.startswith(".")] == [], "no temporary file left"


def test_metrics_csv_gains_columns_and_keeps_rows(tmp_path):
    trainer = make_trainer(tmp_path, max_epochs=1, logger=CSVLogger(tmp_path, flush_logs_every_n_steps=1),
                           log_every_n_steps=1)
    trainer.fit(make_task(), TinyTokens())
    lines = (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text().splitlines()
    assert lines[0].split(",") == ["epoch", "lr", "step", "train_acc", "train_loss", "val_acc", "val_loss"]
    assert len(lines) == 1 + 6 + 2  # header, one row per step, the epoch's val and train rows
    assert "lr: 0.001" in (tmp_path / "lightning_logs" / "version_0" / "hparams.yaml").read_text()
