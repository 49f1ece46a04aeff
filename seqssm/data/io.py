"""Low-level readers of the published file formats: TSV rows, IDX arrays, Python pickles."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from .errors import DataFormatError


def read_tsv(path: str | Path, n_columns: int, header: tuple[str, ...] | None = None,
             parse: Callable[[list[str]], object] | None = None) -> Iterator[object]:
    """Yield `parse(fields)` for each row of a tab-separated file (no quoting, like LRA).

    A row with the wrong number of fields, or one `parse` rejects, raises DataFormatError
    naming the file and 1-based line number. `header`, if given, must be the first row.
    """
    path = Path(path)
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
                raise DataFormatError(f"{path}:{lineno}: malformed row ({e}): {line[:60]!r}") from None


def parse_int_label(text: str, n_classes: int) -> int:
    """Integer class label from text such as "3" or "1.0", checked to lie in [0, n_classes)."""
    value = float(text)
    if value != int(value) or not 0 <= value < n_classes:
        raise ValueError(f"label {text!r} is not an integer in [0, {n_classes})")
    return int(value)


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


def read_pickle(path: str | Path) -> dict:
    """Unpickle a CIFAR-10 python batch (bytes keys); corrupt/truncated files raise DataFormatError."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            return pickle.load(f, encoding="bytes")
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as e:
        raise DataFormatError(
            f"{path}: cannot unpickle ({type(e).__name__}: {e}); the file is truncated or corrupt, "
            "download and extract cifar-10-python.tar.gz again"
        ) from None
