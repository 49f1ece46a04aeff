"""Random stand-ins in the published formats of datasets that have no generator.

For benchmarks and smoke runs only: the labels carry no signal. Sizes are small by default.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from seqssm.errors import check_int

from ..io import write_idx


def write_cifar_standin(out_dir: str | Path, per_batch: int = 1000, seed: int = 0) -> Path:
    """`out_dir/cifar-10-batches-py/{data_batch_1..5,test_batch}` with random images."""
    check_int("write_cifar_standin", "per_batch", per_batch)
    check_int("write_cifar_standin", "seed", seed, minimum=0)
    rng = np.random.default_rng(seed)
    root = Path(out_dir) / "cifar-10-batches-py"
    root.mkdir(parents=True, exist_ok=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        blob = {b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
                b"labels": rng.integers(0, 10, per_batch).tolist()}
        (root / name).write_bytes(pickle.dumps(blob))
    return Path(out_dir)


def write_mnist_standin(out_dir: str | Path, n_train: int = 6000, n_test: int = 1000, seed: int = 0) -> Path:
    """MNIST IDX files (gzipped) with random images."""
    check_int("write_mnist_standin", "n_train", n_train)
    check_int("write_mnist_standin", "n_test", n_test)
    check_int("write_mnist_standin", "seed", seed, minimum=0)
    rng = np.random.default_rng(seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        write_idx(out / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
        write_idx(out / f"{prefix}-labels-idx1-ubyte.gz", rng.integers(0, 10, n).astype(np.uint8))
    return out


def _text(rng: np.random.Generator, n_chars: int) -> str:
    words = ["the", "film", "was", "a", "plot", "actor", "great", "bad", "scene", "and", "of", "café"]
    out, size = [], 0
    while size < n_chars:
        w = words[rng.integers(len(words))]
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def write_imdb_standin(out_dir: str | Path, n: int = 2000, seed: int = 0) -> Path:
    """`train.parquet` / `test.parquet` (text, label) with random reviews of 200..6000 characters."""
    check_int("write_imdb_standin", "n", n)
    check_int("write_imdb_standin", "seed", seed, minimum=0)
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        texts = [_text(rng, int(rng.integers(200, 6000))) for _ in range(n)]
        pq.write_table(pa.table({"text": texts, "label": rng.integers(0, 2, n).tolist()}), out / f"{split}.parquet")
    return out


def write_aan_standin(out_dir: str | Path, n: int = 1000, seed: int = 0) -> Path:
    """`new_aan_pairs.{train,eval,test}.tsv` with random document pairs."""
    check_int("write_aan_standin", "n", n)
    check_int("write_aan_standin", "seed", seed, minimum=0)
    rng = np.random.default_rng(seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "eval", "test"):
        rows = [f"{rng.integers(2)}\tp{i}a\tp{i}b\t{_text(rng, int(rng.integers(1000, 9000)))}\t"
                f"{_text(rng, int(rng.integers(1000, 9000)))}\n" for i in range(n)]
        (out / f"new_aan_pairs.{split}.tsv").write_text("".join(rows))
    return out
