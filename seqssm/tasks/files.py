"""Training outputs on disk: crash-safe checkpoints and logs, and one run per folder.

A process killed (or out of disk) while writing must leave the previous version readable: checkpoints are
written with `seqssm.files.atomic_write` (Lightning's own writer stages through a temporary file elsewhere and
copies it into place when that is another device, which a kill can cut), and log lines are appended so that a
failed append is cut off again.

Two runs writing into one folder would interleave their checkpoints and logs: `RunFolderLock` keeps a
second one out while the first runs.
"""

from __future__ import annotations

import fcntl
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Optional

import torch
from fsspec.implementations.local import LocalFileSystem
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.cloud_io import get_filesystem

from seqssm.errors import RunFolderBusyError, disk_full_reported
from seqssm.files import atomic_write
from seqssm.models.safe_load import load_torch_file


def append_or_roll_back(path: str | Path, data: bytes) -> None:
    """Append `data` to `path` and flush it to disk; if that fails, cut the file back to its old length."""
    path = Path(path)
    size = path.stat().st_size
    with disk_full_reported(path):
        try:
            with open(path, "ab") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            os.truncate(path, size)
            raise


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's torch.save checkpoint IO, writing local files with `atomic_write` and reading them with
    `load_torch_file` (weights_only=True, errors naming the file); remote URLs as before."""

    def load_checkpoint(self, path: Any, map_location: Optional[Any] = None,
                        weights_only: Optional[bool] = None) -> dict[str, Any]:
        if weights_only is False or not isinstance(get_filesystem(path), LocalFileSystem):
            return super().load_checkpoint(path, weights_only=weights_only)
        return load_torch_file(path)

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Optional[Any] = None) -> None:
        if storage_options is not None or not isinstance(get_filesystem(path), LocalFileSystem):
            return super().save_checkpoint(checkpoint, path, storage_options)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda tmp: torch.save(checkpoint, tmp))


LOCK_FILE = ".seqssm-fit.lock"


class RunFolderLock:
    """Held while a run writes into `folder`: `<folder>/.seqssm-fit.lock`, flock-ed and naming the holder
    ("PID 1234 on host h since 2026-01-01 12:00:00 UTC").

    A second process is refused with a RunFolderBusyError naming the folder and the holder. The kernel drops
    the flock when its process dies however it dies, so a lock file left by a killed run is taken over, with a
    line on stderr naming the run that left it. Use as a context manager.
    """

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self._fd: int | None = None
        self._made = False

    def __enter__(self) -> "RunFolderLock":
        self._made = not self.folder.exists()
        self.folder.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise RunFolderBusyError(
                    f"{self.folder} is in use by another seqssm fit ({holder or 'its lock file names no process'}); "
                    "two runs in one folder would overwrite each other's checkpoints. Wait for it to end, or give "
                    "this run its own folder with --trainer.default_root_dir.") from None
            try:  # a holder that ended between our open and our flock removed the file: lock the one there now
                if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        stale = _read_holder(fd)
        if stale:
            print(f"seqssm: {self.folder} was locked by a run that is no longer running ({stale}); taking its lock "
                  "over", file=sys.stderr, flush=True)
        os.ftruncate(fd, 0)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        os.pwrite(fd, f"PID {os.getpid()} on host {socket.gethostname()} since {stamp}\n".encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._fd is None:
            return
        # removed while still locked, so that a process waiting on the old file finds it gone and retries
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None
        if self._made:  # a run refused before writing anything leaves no empty folder behind
            try:
                self.folder.rmdir()
            except OSError:
                pass  # not empty: the run wrote into it


def _read_holder(fd: int) -> str:
    """The holder line of an open lock file ("" when empty)."""
    return os.pread(fd, 512, 0).decode(errors="replace").strip()
