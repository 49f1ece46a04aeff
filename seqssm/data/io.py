"""Low-level readers of the published file formats: TSV rows, IDX arrays, Python pickles, and the checks
every reader shares (UTF-8 text, class labels)."""

from __future__ import annotations

import codecs
import gzip
import math
import numbers
import pickle
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from seqssm.errors import DataFormatError, UnsafePickleError

from .unpickle import load_data_pickle


def read_tsv(path: str | Path, n_columns: int, header: tuple[str, ...] | None = None,
             parse: Callable[[list[str]], object] | None = None) -> list:
    """`parse(fields)` of each row of a tab-separated file (no quoting, like LRA).

    A row with the wrong number of fields, or one `parse` rejects, raises DataFormatError
    naming the file and 1-based line number; so do bytes that are not UTF-8, and a file
    without rows. `header`, if given, must be the first row.
    """
    path = Path(path)
    try:
        rows = list(_tsv_rows(path, n_columns, header, parse))
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    if not rows:
        raise DataFormatError(f"{path}: no rows (the file is empty or holds only its header); fix the file or "
                              "fetch it again")
    return rows


def _tsv_rows(path: Path, n_columns: int, header: tuple[str, ...] | None,
              parse: Callable[[list[str]], object] | None) -> Iterator[object]:
    with open(path, encoding="utf-8", newline="\n") as f:
        for lineno, line in enumerate(f, start=1):
            line = line.rstrip("\r\n")
            if not line:
                continue
            fields = line.split("\t")
            if lineno == 1 and header is not None:
                if tuple(fields) != header:
                    raise DataFormatError(f"{path}:1: expected header {'<TAB>'.join(header)!r}, got {line[:80]!r}")
                continue
            if len(fields) != n_columns:
                raise DataFormatError(
                    f"{path}:{lineno}: expected {n_columns} tab-separated fields, found {len(fields)} "
                    f"(row starts {line[:60]!r}); fix or delete this row"
                )
            try:
                yield parse(fields) if parse else fields
            except (ValueError, KeyError) as e:
                raise DataFormatError(f"{path}:{lineno}: malformed row ({e}): {line[:60]!r}; fix or delete this "
                                      "row") from None


def not_utf8(path: str | Path) -> DataFormatError:
    """The error for a file that fails to decode as UTF-8: names its first bad byte's line and byte offset."""
    path = Path(path)
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = newlines = 0  # bytes and newlines before the current chunk
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            pending = len(decoder.getstate()[0])  # bytes of a character split across chunks
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as e:  # e.object is pending + chunk
                where = offset - pending + e.start
                line = newlines + e.object[: e.start].count(b"\n") + 1
                return DataFormatError(
                    f"{path}: not UTF-8 text: line {line} (byte offset {where}) holds byte 0x{e.object[e.start]:02x}, "
                    "which is not valid UTF-8; re-save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`) "
                    "or fetch it again")
            if not chunk:
                return DataFormatError(f"{path}: not UTF-8 text; re-save the file as UTF-8 or fetch it again")
            offset += len(chunk)
            newlines += chunk.count(b"\n")


def read_text(path: str | Path) -> str:
    """Whole UTF-8 text of a file; bytes that are not UTF-8 raise DataFormatError naming line and offset."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise not_utf8(path) from None


def parse_int_label(text: str, n_classes: int) -> int:
    """Integer class label from text such as "3" or "1.0", checked to lie in [0, n_classes)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not _is_label(value, n_classes):
        raise ValueError(f"label {text!r} is not an integer in 0..{n_classes - 1}")
    return int(value)


def _is_label(value, n_classes: int) -> bool:
    return (isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
            and value == int(value) and 0 <= value < n_classes)


def check_labels(labels: Sequence | np.ndarray, n_classes: int, path: str | Path, item: str = "item",
                 fix: str = "fix the file or fetch it again") -> np.ndarray:
    """int64 (N,) copy of `labels` if each is an integer in [0, n_classes); else DataFormatError naming
    `path`, the first bad `item` (counted from 0), its value, the valid range and the `fix`."""
    array = np.asarray(labels)
    if array.dtype.kind not in "iuf" and not isinstance(labels, np.ndarray):
        array = np.asarray(labels, dtype=object)  # keep each value as given, e.g. [0, "x"] is not all strings
    if array.ndim != 1:
        raise DataFormatError(f"{path}: labels have shape {array.shape}, expected one label per {item}")
    if array.dtype.kind in "iu":
        bad = np.flatnonzero((array < 0) | (array >= n_classes))
    elif array.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(array) | (array != np.round(array)) | (array < 0) | (array >= n_classes))
    else:  # None, strings, booleans, mixed objects: one by one
        bad = [i for i, y in enumerate(array.tolist()) if not _is_label(y, n_classes)]
    if len(bad):
        i = int(bad[0])
        value = array[i].item() if isinstance(array[i], np.generic) else array[i]
        raise DataFormatError(
            f"{path}: {item} {i} (counting from 0) has label {value!r}, expected an integer in 0..{n_classes - 1} "
            f"({len(bad)} bad label(s) in all); {fix}")
    return array.astype(np.int64)


def open_maybe_gz(path: Path):
    """Binary file object; transparently gunzips `*.gz`."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """Array stored in an IDX file (MNIST's format), e.g. (N, 28, 28) uint8 images or (N,) labels."""
    path = Path(path)
    try:
        with open_maybe_gz(path) as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise DataFormatError(f"{path}: cannot read ({e}); the file is corrupt or truncated, download it again") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise DataFormatError(f"{path}: not an IDX file (bad magic number {raw[:4].hex()})")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataFormatError(f"{path}: truncated IDX header")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_IDX_TYPES[raw[2]])
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - header != expected:
        raise DataFormatError(
            f"{path}: IDX header promises shape {shape} ({expected} bytes) but the file holds "
            f"{len(raw) - header} bytes: truncated or corrupt, download it again"
        )
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)


def write_idx(path: str | Path, array: np.ndarray) -> None:
    """Write a uint8 array in IDX format (used by tests and converters); gzip if `path` ends in .gz."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    blob = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in array.shape) + array.tobytes()
    path = Path(path)
    with (gzip.open(path, "wb") if path.suffix == ".gz" else open(path, "wb")) as f:
        f.write(blob)


def read_pickle(path: str | Path, fix: str):
    """Unpickle a data file (Python 2 strings as bytes) without running code: only numpy arrays and plain
    containers are admitted. A disallowed global, or a corrupt / truncated file, raises DataFormatError
    ending in `fix` (what to do)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            return load_data_pickle(f, encoding="bytes")
    except UnsafePickleError as e:
        raise DataFormatError(
            f"{path}: refused to unpickle {e.qualname}: a data file holds only arrays, lists, dicts, strings and "
            f"numbers, so this one is not the published file and may carry code (nothing was run); {fix}"
        ) from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as e:
        raise DataFormatError(
            f"{path}: cannot unpickle ({type(e).__name__}: {e}); the file is truncated or corrupt; {fix}"
        ) from None
    except MemoryError as e:  # an array call of the pickle asks for more than the machine has (numpy says how much)
        raise DataFormatError(
            f"{path}: asks for more memory than there is ({e or 'MemoryError'}), far more than its "
            f"{size_text(path.stat().st_size)} can hold: not the published file; {fix}"
        ) from None


def size_text(n: int) -> str:
    """Bytes as e.g. "80.2 MiB"."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
