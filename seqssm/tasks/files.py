"""Crash-safe writes for training outputs: a file is replaced whole or not at all.

A process killed (or out of disk) while writing must leave the previous version readable. Every
file is written under a temporary name in its own folder, flushed to disk, then renamed over the
old one (`os.replace` is atomic on a local filesystem). Lightning's own writer stages through a
temporary file elsewhere and copies it into place when that is another device, which a kill can cut.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from fsspec.implementations.local import LocalFileSystem
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.cloud_io import get_filesystem

from seqssm.models.safe_load import load_torch_file

TEMPORARY_MARK = ".tmp-"


def temporary_path(path: Path) -> Path:
    """The name `path` is written under before it is renamed into place (hidden, marked with this process)."""
    return path.with_name(f".{path.name}{TEMPORARY_MARK}{os.getpid()}")


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> None:
    """Call `write(tmp)` to write a temporary file beside `path`, flush it to disk, then rename it to `path`; on
    any failure the old `path` is untouched and the temporary file removed."""
    path = Path(path)
    tmp = temporary_path(path)
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def append_or_roll_back(path: str | Path, data: bytes) -> None:
    """Append `data` to `path` and flush it to disk; if that fails, cut the file back to its old length."""
    path = Path(path)
    size = path.stat().st_size
    try:
        with open(path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        os.truncate(path, size)
        raise


def remove_stale_temporaries(folder: str | Path) -> list[Path]:
    """Delete temporary files that a killed writer left in `folder`; returns them."""
    folder = Path(folder)
    stale = [p for p in folder.glob(f".*{TEMPORARY_MARK}*") if p.is_file()] if folder.is_dir() else []
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


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
