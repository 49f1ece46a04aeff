"""Arrow cache (through `datasets`) of tokenised splits, read back as zero-copy numpy arrays."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

CACHE_VERSION = 1


class Ragged:
    """N variable-length sequences over a few Arrow chunks; `seq(i)` is a (L_i,) numpy view."""

    def __init__(self, chunks: list[tuple[np.ndarray, np.ndarray]], labels: np.ndarray):
        self.chunks = chunks  # (values, offsets) per chunk, offsets into that chunk's values
        self.starts = np.cumsum([0] + [len(o) - 1 for _, o in chunks])
        self.labels = labels

    def __len__(self) -> int:
        return int(self.starts[-1])

    def seq(self, i: int) -> np.ndarray:
        """Tokens of sequence `i`, shape (L_i,)."""
        c = int(np.searchsorted(self.starts, i, side="right")) - 1
        values, offsets = self.chunks[c]
        j = i - self.starts[c]
        return values[offsets[j] : offsets[j + 1]]

    @classmethod
    def from_array(cls, x: np.ndarray, labels: Iterable[int]) -> "Ragged":
        """Equal-length sequences from a (N, W) array, without copying it."""
        x = np.ascontiguousarray(x).reshape(len(x), -1)
        offsets = np.arange(len(x) + 1, dtype=np.int64) * x.shape[1]
        return cls([(x.reshape(-1), offsets)], np.asarray(list(labels), dtype=np.int64))

    @classmethod
    def from_lists(cls, seqs: list[np.ndarray], labels: Iterable[int]) -> "Ragged":
        """Build in memory from a list of 1-D arrays (tests, small data)."""
        lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        values = np.concatenate(seqs) if seqs else np.zeros(0, np.uint8)
        return cls([(values, offsets)], np.asarray(list(labels), dtype=np.int64))


def source_stamp(paths: Iterable[str | Path]) -> list:
    """[path, size, mtime] of each file, and of each folder [path, files, bytes, digest of every file's relative
    path, size and mtime] (recursively): changes whenever any source file is added, removed, resized or touched."""
    out = []
    for p in sorted(str(p) for p in paths):
        if os.path.isdir(p):
            files = sorted(_tree_files(p))
            digest = hashlib.sha1("\n".join(f"{rel}\t{size}\t{mtime}" for rel, size, mtime in files).encode())
            out.append([os.path.abspath(p), len(files), sum(f[1] for f in files), digest.hexdigest()])
        else:
            st = os.stat(p)
            out.append([os.path.abspath(p), st.st_size, st.st_mtime_ns])
    return out


def _tree_files(root: str, prefix: str = "") -> Iterator[tuple[str, int, int]]:
    """(path relative to root, size, mtime_ns) of every file below `root`: one scandir stat per file."""
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.is_dir():
                yield from _tree_files(entry.path, prefix + entry.name + "/")
            elif entry.is_file():
                st = entry.stat()
                yield prefix + entry.name, st.st_size, st.st_mtime_ns


def cache_key(spec: dict) -> str:
    """Stable short hash of a JSON-able description of what was tokenised and how."""
    blob = json.dumps({"version": CACHE_VERSION, **spec}, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def _to_table(seqs: list[np.ndarray], labels: Iterable[int]):
    import pyarrow as pa

    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    values = np.concatenate(seqs) if seqs else np.zeros(0, np.uint8)
    arr = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))
    return pa.table({"input_ids": arr, "label": pa.array(np.asarray(list(labels), dtype=np.int64))})


def _from_dataset(ds) -> Ragged:
    col = ds.data.table.column("input_ids")
    chunks = []
    for ch in col.chunks:
        chunks.append((ch.values.to_numpy(zero_copy_only=False), ch.offsets.to_numpy()))
    labels = ds.data.table.column("label").to_numpy()
    return Ragged(chunks, labels)


def cached_splits(
    cache_dir: str | Path,
    name: str,
    sources: Iterable[str | Path],
    spec: dict,
    build: Callable[[], dict[str, tuple[list[np.ndarray], list[int]]]],
) -> dict[str, Ragged]:
    """Load `name`'s splits from `cache_dir/name-<hash>`, or `build()` and save them first.

    The hash covers `spec` (how the data is tokenised) and the stamp of every source file or folder
    in `sources` (`source_stamp`), so any change to the inputs builds afresh. `build` returns
    {split: (list of 1-D token arrays, labels)}; the saved form is one `datasets` Arrow dataset per
    split (memory-mapped when read back). A damaged cache is built afresh, with a warning.
    """
    spec = {**spec, "sources": source_stamp(sources)}
    root = Path(cache_dir) / f"{name}-{cache_key(spec)}"
    if (root / "COMPLETE").exists():
        try:
            return _load(root)
        except (OSError, ValueError) as e:  # a file deleted or cut short; pyarrow's ArrowInvalid is a ValueError
            warnings.warn(f"{root}: cached splits unreadable ({e}); building them afresh", stacklevel=2)
    _save(root, spec, build())
    return _load(root)


def _save(root: Path, spec: dict, splits: dict[str, tuple[list[np.ndarray], list[int]]]) -> None:
    import datasets

    tmp = root.with_name(root.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for split, (seqs, labels) in splits.items():
            datasets.Dataset(_to_table(seqs, labels)).save_to_disk(str(tmp / split))
        (tmp / "spec.json").write_text(json.dumps(spec, indent=1, default=str))
        (tmp / "COMPLETE").write_text("")
        shutil.rmtree(root, ignore_errors=True)
        os.replace(tmp, root)  # atomic: a crashed build never looks complete
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # a failed save (disk full, Ctrl-C) leaves nothing behind


def _load(root: Path) -> dict[str, Ragged]:
    import datasets

    splits = sorted(p.name for p in root.iterdir() if p.is_dir())
    return {s: _from_dataset(datasets.load_from_disk(str(root / s))) for s in splits}
