"""Sequential (and permuted) MNIST from IDX files: 784-long pixel sequences, 10 classes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from seqssm.errors import DataFormatError

from .base import RaggedDataset, holdout_split
from .cache import Ragged
from .missing import missing
from .images import ImageDataModule
from .io import check_labels, read_idx
from .sources import download_command

LAYOUT = """<data_dir>/                 (e.g. data/mnist; files may end in .gz)
  train-images-idx3-ubyte  train-labels-idx1-ubyte
  t10k-images-idx3-ubyte   t10k-labels-idx1-ubyte"""
FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
         "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


def bitreversal_permutation(n: int) -> np.ndarray:
    """S4's permutation of range(n): bit-reversed order of range(2**ceil(log2 n)), entries >= n dropped."""
    bits = max(1, int(np.ceil(np.log2(n))))
    idx = np.arange(1 << bits)
    rev = np.zeros_like(idx)
    for b in range(bits):
        rev |= ((idx >> b) & 1) << (bits - 1 - b)
    return rev[rev < n]


def _find(data_dir: Path, name: str) -> Path:
    for cand in (data_dir / name, data_dir / f"{name}.gz"):
        if cand.exists():
            return cand
    raise missing(data_dir / name, LAYOUT, download_command("mnist", data_dir))


def read_mnist(data_dir: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, 784) uint8, labels (N,) in 0..9) of "train" or "test"."""
    img_path, lab_path = (_find(data_dir, name) for name in FILES[split])
    images, labels = read_idx(img_path), read_idx(lab_path)
    fix = f"delete the damaged file and run:\n    {download_command('mnist', data_dir)}"
    if images.dtype != np.uint8 or images.ndim != 3:
        raise DataFormatError(f"{img_path}: holds {images.dtype.str.replace('|', '')} values of shape {images.shape}, "
                              f"expected unsigned bytes of shape (N, rows, columns); {fix}")
    if not len(images):
        raise DataFormatError(f"{img_path}: holds no images; {fix}")
    if labels.ndim != 1 or len(images) != len(labels):
        raise DataFormatError(f"{img_path} holds {len(images)} images but {lab_path} holds labels of shape "
                              f"{labels.shape}, expected ({len(images)},); {fix}")
    return images.reshape(len(images), -1), check_labels(labels, 10, lab_path, item="image", fix=fix)


class SMNISTDataModule(ImageDataModule):
    """sMNIST: (B, 784, 1) pixels in [0, 1] (numeric) or (B, 784) ids 0..255 (categorical); 10 classes.

    `permuted=True` applies a fixed permutation to every sequence: S4's bit-reversal by
    default (`permutation="bitreversal"`), or `"random"` drawn with `permutation_seed`.
    10% of train is held out for validation (seed 42).
    """

    name = "mnist"

    def __init__(self, data_dir=None, batch_size: int = 32, num_workers: int = 0, max_length: int = 784,
                 seed: int = 42, cache_dir=None, permuted: bool = False, mode: str = "numeric",
                 permutation: str = "bitreversal", permutation_seed: int = 0, val_fraction: float = 0.1):
        super().__init__(data_dir, batch_size, num_workers, max_length, seed, cache_dir, mode=mode, channels=1,
                         n_classes=10)
        if permutation not in ("bitreversal", "random"):
            raise ValueError(f"permutation must be 'bitreversal' or 'random', got {permutation!r}")
        self.permuted = permuted
        if not permuted:
            self.permutation = None
        elif permutation == "bitreversal":
            self.permutation = bitreversal_permutation(784)
        else:
            self.permutation = np.random.default_rng(permutation_seed).permutation(784)
        self.val_fraction = val_fraction

    def build_splits(self):
        data = {s: Ragged.from_array(*read_mnist(self.data_dir, s)) for s in FILES}
        train_idx, val_idx = holdout_split(len(data["train"]), self.val_fraction)
        d, perm = self.item_width, self.permutation
        return {"train": RaggedDataset(data["train"], train_idx, d, perm),
                "val": RaggedDataset(data["train"], val_idx, d, perm),
                "test": RaggedDataset(data["test"], None, d, perm)}
