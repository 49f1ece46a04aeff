"""`CSVLogger`: Lightning's CSV logger (`metrics.csv`, `hparams.yaml`) with writes that a crash cannot truncate.

Lightning's writer rewrites `metrics.csv` in place whenever a new column appears (the first validation,
say): a full disk or a kill in that moment leaves it empty. Here a rewrite goes through a temporary file
and a rename, and an append that fails is cut back, so the file always holds every row saved before.
A run resumed in its own version folder (`seqssm fit --ckpt_path last`) goes on appending to its
`metrics.csv`, where Lightning's writer would delete it. `seqssm fit` uses this logger unless
`trainer.logger` names another.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any

from fsspec.implementations.local import LocalFileSystem
from lightning.pytorch.core.saving import save_hparams_to_yaml
from lightning.pytorch.loggers import CSVLogger as LightningCSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

from seqssm.files import atomic_write

from .files import append_or_roll_back


class CrashSafeExperimentWriter(ExperimentWriter):
    """ExperimentWriter whose `metrics.csv` and `hparams.yaml` keep their previous content when a write fails,
    and whose `metrics.csv` in an existing folder (a resumed run's) is continued, not deleted."""

    def _check_log_dir_exists(self) -> None:
        if not isinstance(self._fs, LocalFileSystem):
            return super()._check_log_dir_exists()
        if os.path.isfile(self.metrics_file_path):
            with open(self.metrics_file_path, newline="") as f:
                self.metrics_keys = next(csv.reader(f), [])

    def save(self) -> None:
        if not self.metrics:
            return
        if not isinstance(self._fs, LocalFileSystem):
            return super().save()
        new_keys = self._record_new_keys()
        path = Path(self.metrics_file_path)
        if path.is_file() and not new_keys:
            append_or_roll_back(path, self._csv(self.metrics, header=False))
        else:
            old_rows = []
            if path.is_file():
                with open(path, newline="") as f:
                    old_rows = list(csv.DictReader(f))
            data = self._csv(old_rows + self.metrics, header=True)
            atomic_write(path, data)
        self.metrics = []

    def _csv(self, rows: list[dict[str, Any]], header: bool) -> bytes:
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=self.metrics_keys)
        if header:
            writer.writeheader()
        writer.writerows(rows)
        return text.getvalue().encode()

    def log_hparams(self, params: dict[str, Any]) -> None:
        self.hparams.update(params)
        path = os.path.join(self.log_dir, self.NAME_HPARAMS_FILE)
        if not isinstance(self._fs, LocalFileSystem):
            return save_hparams_to_yaml(path, self.hparams)
        atomic_write(path, lambda tmp: save_hparams_to_yaml(tmp, self.hparams))


class CSVLogger(LightningCSVLogger):
    """Lightning's CSVLogger (same folders and files) writing through `CrashSafeExperimentWriter`."""

    @property
    @rank_zero_experiment
    def experiment(self) -> CrashSafeExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = CrashSafeExperimentWriter(log_dir=self.log_dir)
        return self._experiment
