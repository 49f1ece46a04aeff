"""Errors raised by the data readers, worded so the user knows what to fetch or fix."""

from __future__ import annotations

from pathlib import Path


class DataFormatError(ValueError):
    """Input exists but is not in the expected published format (truncated, malformed)."""


class CorruptFileError(DataFormatError):
    """A source file that cannot be unpacked (truncated, corrupt, or not the published file); `path` names it."""

    def __init__(self, path: str | Path, message: str):
        super().__init__(message)
        self.path = Path(path)


class DataNotFoundError(FileNotFoundError):
    """A dataset directory or file is missing; the message shows the layout and the command."""


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


class DownloadError(RuntimeError):
    """A source file could not be fetched; the message names the URLs tried and why each failed."""


class DigestMismatchError(DownloadError):
    """A fetched file's digest differs from the published or recorded one."""
