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


def load_torch_file(path: str | Path) -> Any:
    """The object torch.save wrote to the file `path`, read onto the CPU with weights_only=True; a missing file
    raises MissingFileError, an unreadable or unsafe one `checkpoint_error`'s CheckpointError."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"{path}: no such file")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch reports damaged archives with many error types
        raise checkpoint_error(path, e) from e


def checkpoint_error(path: str | Path, error: Exception) -> CheckpointError:
    """What torch.load(weights_only=True)'s `error` on the file `path` means: UnsafeCheckpointError (a
    pickle.UnpicklingError too) when the file holds Python objects beyond tensors and plain values, else a
    CheckpointError for a damaged file or one that torch.save did not write."""
    if not zipfile.is_zipfile(path):  # what torch.save writes; garbage and cut-off files are no zip archive
        return CheckpointError(f"{path}: unreadable: truncated, or not a file that torch.save wrote")
    if isinstance(error, pickle.UnpicklingError):
        return UnsafeCheckpointError(f"{path}: refused: it holds Python objects beyond tensors and plain values, and "
                                     "seqssm never unpickles those, since loading them could run any code")
    reason = str(error).strip().splitlines()[0] if str(error).strip() else "no detail"
    return CheckpointError(f"{path}: unreadable, damaged archive ({type(error).__name__}: {reason})")
