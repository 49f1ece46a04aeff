"""Reading files that torch.save wrote without running any code in them, with errors that name the file.

Every checkpoint seqssm reads (task checkpoints, `init_from` weights, pytorch_model.bin folders, RL agents)
goes through `load_torch_file`: torch.load(weights_only=True), whose failures become one CheckpointError
saying what the file is (`checkpoint_error`), never torch's advice to retry with weights_only=False.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from seqssm.errors import CheckpointError, MissingFileError, UnsafeCheckpointError

# pickle protocol 2, then the 10-byte integer torch.serialization.MAGIC_NUMBER, as torch.save's legacy format starts
LEGACY_HEAD = b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")


def load_torch_file(path: str | Path, mmap: bool = False) -> Any:
    """The object torch.save wrote to the file `path`, read onto the CPU with weights_only=True; a missing file
    raises MissingFileError, an unreadable or unsafe one `checkpoint_error`'s CheckpointError. `mmap`: map the
    tensors of a zip-format file rather than read them (to look at shapes without the memory)."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"{path}: no such file")
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap and zipfile.is_zipfile(path))
    except Exception as e:  # noqa: BLE001 - torch reports damaged archives with many error types
        raise checkpoint_error(path, e) from e


def checkpoint_error(path: str | Path, error: Exception) -> CheckpointError:
    """What torch.load(weights_only=True)'s `error` on the file `path` means: UnsafeCheckpointError (a
    pickle.UnpicklingError too) when the file holds Python objects beyond tensors and plain values, else a
    CheckpointError for a damaged file or one that torch.save did not write."""
    archive = zipfile.is_zipfile(path)  # what torch.save writes; garbage and cut-off files are no zip archive
    legacy = not archive and is_legacy_torch_file(path)
    if not (archive or legacy):
        return CheckpointError(f"{path}: unreadable: truncated, or not a file that torch.save wrote")
    # a legacy file is one pickle, so garbage in it fails as unpickling too; torch names a refused GLOBAL
    if isinstance(error, pickle.UnpicklingError) and (archive or "GLOBAL" in str(error)):
        return UnsafeCheckpointError(f"{path}: refused: it holds Python objects beyond tensors and plain values, and "
                                     "seqssm never unpickles those, since loading them could run any code")
    reason = str(error).strip().splitlines()[0] if str(error).strip() else "no detail"
    kind = "archive" if archive else "file of torch.save's legacy format"
    return CheckpointError(f"{path}: unreadable, damaged {kind} ({type(error).__name__}: {reason})")


def is_legacy_torch_file(path: str | Path) -> bool:
    """Whether `path` starts as torch.save's legacy (non-zip) format does: a pickled magic number."""
    with open(path, "rb") as f:
        return f.read(len(LEGACY_HEAD)) == LEGACY_HEAD
