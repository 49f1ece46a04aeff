"""Crash-safe file writes, for every part of the package: a file is replaced whole or not at all.

A process killed (or out of disk) while writing must leave the previous version readable. The new content is
written under a temporary name in the file's own folder, flushed to disk, then renamed over the old one
(`os.replace` is atomic on a local filesystem, which a copy from another folder's device is not). The file gets
the rights a plain `open` gives, as far as the umask allows. A full disk is reported as such (`DiskFullError`:
the folder and "no space left"), not as the writer's own message (torch's is "unexpected pos 704 vs 598").
This module imports nothing of seqssm but `seqssm.errors`, so every part of the package may use it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from seqssm.errors import disk_full_reported

TEMPORARY_MARK = ".tmp-"


def temporary_path(path: Path) -> Path:
    """The name `path` is written under before it is renamed into place (hidden, marked with this process)."""
    return path.with_name(f".{path.name}{TEMPORARY_MARK}{os.getpid()}")


def atomic_write(path: str | Path, content: str | bytes | Callable[[Path], None]) -> None:
    """Replace `path` with `content` (text, written as UTF-8; bytes; or a function writing the temporary file it is
    given) through a temporary beside it, flushed to disk; on any failure the old `path` is untouched and the
    temporary removed."""
    path = Path(path)
    tmp = temporary_path(path)
    with disk_full_reported(path):
        try:
            if isinstance(content, str):
                tmp.write_text(content, encoding="utf-8")
            elif isinstance(content, bytes):
                tmp.write_bytes(content)
            else:
                content(tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def remove_stale_temporaries(folder: str | Path) -> list[Path]:
    """Delete the temporary files that a killed writer left in `folder`; returns them."""
    folder = Path(folder)
    stale = [p for p in folder.glob(f".*{TEMPORARY_MARK}*") if p.is_file()] if folder.is_dir() else []
    for p in stale:
        p.unlink(missing_ok=True)
    return stale
