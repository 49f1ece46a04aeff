"""The wording of a missing dataset: the path, the layout expected there and the command that makes it.

The data errors themselves live in `seqssm.errors`; they are importable from here too.
"""

from __future__ import annotations

from pathlib import Path

from seqssm.errors import (
    CorruptFileError,
    DataFormatError,
    DataNotFoundError,
    DigestMismatchError,
    DownloadError,
)

__all__ = ["CorruptFileError", "DataFormatError", "DataNotFoundError", "DigestMismatchError", "DownloadError",
           "missing", "require"]


def missing(path: str | Path, layout: str, command: str) -> DataNotFoundError:
    """Build the error for a missing `path`: expected `layout` (tree text) and the `command` that makes it."""
    return DataNotFoundError(
        f"Dataset file or directory not found: {path}\n"
        f"Expected layout:\n{layout.rstrip()}\n"
        f"To create it, run:\n    {command}\n"
        "(see data/README.md for where each dataset comes from)"
    )


def require(path: str | Path, layout: str, command: str) -> Path:
    """Return `path` as a Path if it exists, else raise `missing(...)`."""
    path = Path(path)
    if not path.exists():
        raise missing(path, layout, command)
    return path
