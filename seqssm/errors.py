"""The exceptions that reach a user, in one place: mistakes the user can fix (`SeqssmError`), and a training run
stopped by a signal (`TrainingInterrupted`).

The `seqssm` command prints a SeqssmError as one line, `seqssm CMD: error: MESSAGE`, and exits with status 2
(SEQSSM_DEBUG=1 shows the traceback instead); so each message names the file, option or value at fault and what
to do. Each class also keeps the built-in base that callers catch (ValueError, FileNotFoundError, ...).
This module imports nothing from seqssm, so every part of the package may raise these.
"""

from __future__ import annotations

import errno
import operator
import pickle
import shutil
import signal
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


class SeqssmError(Exception):
    """A user mistake whose message says what is wrong and what to do."""


def user_error_in(error: BaseException | None) -> SeqssmError | None:
    """The first SeqssmError in `error`'s chain of causes (libraries such as jsonargparse wrap errors raised in a
    constructor in their own), or None."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, SeqssmError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


# -- command lines, configs and recipes -----------------------------------------------------------------------------
class UsageError(SeqssmError):
    """A command line or config file names an unknown option or gives one a value of the wrong type; the message
    names it (and the closest valid option). `prog` is the command whose parser refused it ("seqssm data download")."""

    def __init__(self, message: str, prog: str | None = None):
        super().__init__(message)
        self.prog = prog


class ConfigError(SeqssmError, ValueError):
    """A setting of a task or an RL run is invalid: the message names the option, the value given and what is valid."""


def check_int(where: str, name: str, value, minimum: int = 1) -> int:
    """`value` as an int if it is one (numpy ints too, bool not) and >= `minimum`, else ConfigError
    "WHERE: NAME must be an integer >= MINIMUM, got VALUE": the size checks of constructors, generators and runs."""
    try:
        number = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        number = None
    if number is None or number < minimum:
        raise ConfigError(f"{where}: {name} must be an integer >= {minimum}, got {value!r}")
    return number


class RecipeError(SeqssmError, ValueError):
    """A recipe's `_base_` is missing, loops, or is not a mapping; the message names the files."""


class MissingExtraError(SeqssmError, ImportError):
    """A command needs an optional dependency that is not installed; the message names the extra to install."""


# -- files ----------------------------------------------------------------------------------------------------------
class MissingFileError(SeqssmError, FileNotFoundError):
    """A file or folder given by the user does not exist; the message names it and what would make it."""


class OutputExistsError(SeqssmError, FileExistsError):
    """A folder to write is not empty (or not a folder) and replacing it was not asked for, or is unsafe."""


class RunFolderBusyError(SeqssmError, RuntimeError):
    """Another running `seqssm fit` holds the run folder (its lock file names the process)."""


class DiskFullError(SeqssmError, OSError):
    """A write stopped because the device holding the folder is full; what was there before is kept."""


# Messages of writers that stop on a full disk without saying so: torch's zip writer ("unexpected pos 704 vs 598",
# "file write failed") and safetensors (`IoError(Os { code: 28, kind: StorageFull, ... })`).
SHORT_WRITE_MARKS = ("unexpected pos", "file write failed", "StorageFull", "QuotaExceeded", "No space left")


def disk_full_error(error: BaseException, path: str | Path) -> DiskFullError | None:
    """A one-line DiskFullError for `error` raised while writing `path` (a file or the folder written), when it, or
    an error it was raised from, is an out-of-space error (ENOSPC, EDQUOT) or a writer's message of a short write;
    else None."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, DiskFullError):
            return error
        seen.add(id(error))
        if getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or any(
                mark in str(error) for mark in SHORT_WRITE_MARKS):
            break
        error = error.__cause__ or error.__context__
    else:
        return None
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    existing = next((p for p in (folder, *folder.parents) if p.is_dir()), Path("."))
    free = f"{shutil.disk_usage(existing).free / 2**20:.1f} MiB free there now"
    what = f" while writing {path.name}" if folder != path else ""
    # torch's message starts with the C++ source line of its check ("[enforce fail at inline_container.cc:672] . ")
    detail = (str(error).strip().splitlines() or [type(error).__name__])[0].rpartition("] . ")[2]
    full = DiskFullError(f"{folder}: no space left on its device{what} ({detail}; {free}). Nothing was lost: the "
                         "files there before are kept. Free some space there, or write elsewhere.")
    full.errno = errno.ENOSPC
    return full


@contextmanager
def disk_full_reported(path: str | Path) -> Iterator[None]:
    """Re-raise an out-of-space error of the block, which writes `path`, as `disk_full_error`'s one-line
    DiskFullError; every other error passes unchanged."""
    try:
        yield
    except BaseException as e:
        full = disk_full_error(e, path)
        if full is None:
            raise
        raise full from e


class CheckpointError(SeqssmError, ValueError):
    """A file is not a readable checkpoint of the kind expected: the message names the file and the problem."""


class UnsafeCheckpointError(CheckpointError, pickle.UnpicklingError):
    """A checkpoint holds Python objects beyond tensors and plain values: refused, never unpickled."""


class PretrainedFormatError(SeqssmError, ValueError):
    """A pretrained folder lacks a file, holds unreadable or mismatched tensors, or a setting seqssm cannot hold."""


class NotASeqssmFolderError(SeqssmError, ValueError):
    """A folder lacks the files or the format marker of a seqssm model folder."""


# -- data -----------------------------------------------------------------------------------------------------------
class DataFormatError(SeqssmError, ValueError):
    """Input exists but is not in the expected published format (truncated, malformed)."""


class CorruptFileError(DataFormatError):
    """A source file that cannot be unpacked (truncated, corrupt, or not the published file); `path` names it."""

    def __init__(self, path: str | Path, message: str):
        super().__init__(message)
        self.path = Path(path)


class DataNotFoundError(MissingFileError):
    """A dataset directory or file is missing; the message shows the layout and the command."""


class DownloadError(SeqssmError, RuntimeError):
    """A source file could not be fetched; the message names the URLs tried and why each failed."""


class DigestMismatchError(DownloadError):
    """A fetched file's digest differs from the published or recorded one."""


class UnsafePickleError(SeqssmError, pickle.UnpicklingError):
    """A data pickle names a global outside the data allow-list; `qualname` is that global."""

    def __init__(self, qualname: str):
        super().__init__(f"refused to unpickle {qualname}")
        self.qualname = qualname


# -- tensors given to ops, layers and models ------------------------------------------------------------------------
class InputShapeError(SeqssmError, ValueError):
    """A tensor of the wrong shape; the message names the expected and the given shape."""


class InputDtypeError(SeqssmError, TypeError):
    """A tensor of a dtype that is not taken here; the message names the dtypes taken and the cast that fixes it."""


# -- models, training, studies --------------------------------------------------------------------------------------
class SurgeryError(SeqssmError, ValueError):
    """A model cannot take the F1 / F1R1 surgery; the message names what differs."""


class IncompatibleWeightsError(SeqssmError, RuntimeError):
    """Pretrained weights do not fit the model under strict loading."""


class UploadError(SeqssmError, RuntimeError):
    """A model could not be uploaded to the Hugging Face Hub; the message names the repository and the reason."""


class NonFiniteLossError(SeqssmError, FloatingPointError):
    """Training produced a NaN or infinite loss or gradient; raised before the optimizer step touches the weights."""


class StudyError(SeqssmError, ValueError):
    """The study cannot run as asked; the message says what to change."""


class ReproduceError(SeqssmError, ValueError):
    """A reproduction cannot run as asked; the message says what to change."""


class TrainingInterrupted(Exception):
    """Training stopped on SIGINT or SIGTERM after saving `checkpoint`; resume from it with `--ckpt_path last`."""

    def __init__(self, signum: int, checkpoint: str, global_step: int):
        self.signum, self.checkpoint, self.global_step = signum, checkpoint, global_step
        self.signal_name = signal.Signals(signum).name
        super().__init__(f"training stopped by {self.signal_name} at global step {global_step}; the run is saved in "
                         f"{checkpoint}. Resume it with --ckpt_path last (seqssm fit) or "
                         f"Trainer.fit(..., ckpt_path={checkpoint!r}).")
