"""The wording of a missing dataset: the path, the layout expected there and the command that makes it."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from seqssm.errors import DataNotFoundError


def path_problem(path: str | Path, folder: bool = False) -> str | None:
    """What stands in the way of `path` ("data/x is a file, not a folder", "... a broken symlink", "... a symlink
    loop"), checked from the root down: a folder on the way (or `path` itself, when `folder`) that is a file or a
    link leading nowhere. None when nothing does (`path` exists, or merely does not exist yet)."""
    path = Path(path)
    for p in [*reversed(path.parents), path]:
        if p.is_symlink():
            try:
                p.stat()
            except OSError as e:
                if e.errno == errno.ELOOP:
                    return f"{p} is a symlink loop (it leads back to itself), not a folder"
                return f"{p} is a broken symlink: its target {os.readlink(p)} cannot be read ({e.strerror})"
        if not p.exists():
            return None
        if (p != path or folder) and not p.is_dir():
            return f"{p} is a file, not a folder"
    return None


def missing(path: str | Path, layout: str, command: str) -> DataNotFoundError:
    """Build the error for a missing `path`: expected `layout` (tree text) and the `command` that makes it; when a
    file or a broken link stands where a folder on its way should be, one line saying so instead (writing there
    would fail the same way)."""
    problem = path_problem(path)
    if problem:
        return DataNotFoundError(f"cannot read {path}: {problem}; point data_dir at a folder")
    return DataNotFoundError(
        f"Dataset file or directory not found: {path}\n"
        f"Expected layout:\n{layout.rstrip()}\n"
        f"To create it, run:\n    {command}\n"
        "(see data/README.md for where each dataset comes from)"
    )

