"""metrics.csv survives a full disk: a failed write keeps every row saved before it."""

from __future__ import annotations

import errno
import resource
import signal

import lightning as L
import pytest
from test_tasks import TinyTokens, make_task, make_trainer, one_thread  # noqa: F401

from seqssm.tasks.logs import CSVLogger


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


@pytest.fixture
def file_size_limit_restored():
    limits, handler = resource.getrlimit(resource.RLIMIT_FSIZE), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    yield  # with SIGXFSZ ignored, a write past the limit fails with EFBIG instead of killing the process
    resource.setrlimit(resource.RLIMIT_FSIZE, limits)
    signal.signal(signal.SIGXFSZ, handler)


@pytest.mark.parametrize("when", ["train", "validation"], ids=["append", "rewrite-for-new-columns"])
def test_metrics_csv_keeps_its_rows_when_the_disk_is_full(tmp_path, file_size_limit_restored, when):
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=1)
    metrics_csv = tmp_path / "lightning_logs" / "version_0" / "metrics.csv"
    # in a train step the next save appends a row; after the first validation it adds val_* columns: a rewrite
    disk_full = DiskFullAt(when, step=3 if when == "train" else 6, metrics_csv=metrics_csv)
    trainer = make_trainer(tmp_path, max_epochs=2, logger=logger, log_every_n_steps=1, callbacks=[disk_full])
    with pytest.raises(OSError) as info:
        trainer.fit(make_task(), TinyTokens())
    assert info.value.errno == errno.EFBIG
    assert disk_full.before.count(b"\n") >= 4, "rows were saved before the disk filled up"
    assert metrics_csv.read_bytes() == disk_full.before
    assert [p.name for p in metrics_csv.parent.iterdir() if p.name.startswith(".")] == [], "no temporary file left"


def test_metrics_csv_gains_columns_and_keeps_rows(tmp_path):
    trainer = make_trainer(tmp_path, max_epochs=1, logger=CSVLogger(tmp_path, flush_logs_every_n_steps=1),
                           log_every_n_steps=1)
    trainer.fit(make_task(), TinyTokens())
    lines = (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text().splitlines()
    assert lines[0].split(",") == ["epoch", "lr", "step", "train_acc", "train_loss", "val_acc", "val_loss"]
    assert len(lines) == 1 + 6 + 2  # header, one row per step, the epoch's val and train rows
    assert "lr: 0.001" in (tmp_path / "lightning_logs" / "version_0" / "hparams.yaml").read_text()
