"""CIFAR-10 as pixel sequences (LRA "image"): `cifar-10-batches-py/` pickled batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from seqssm.errors import DataFormatError

from ..base import RaggedDataset, holdout_split
from ..cache import Ragged
from ..missing import missing
from ..images import ImageDataModule, to_gray
from ..io import check_labels, read_pickle, size_text
from ..sources import download_command

LAYOUT = """<data_dir>/                 (e.g. data/cifar10)
  cifar-10-batches-py/
    data_batch_1 ... data_batch_5   pickled dicts with b"data" (10000, 3072) uint8, b"labels"
    test_batch"""
RGB_MEAN, RGB_STD = (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261)
GRAY_MEAN, GRAY_STD = (122.6 / 255,), (61.0 / 255,)


def read_cifar_batch(path, fix: str = "delete it and unpack cifar-10-python.tar.gz again"
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, 1024, 3) uint8 row-major pixels, labels (N,) in 0..9) of one pickled batch; errors end in `fix`."""
    d = read_pickle(path, fix)
    if not isinstance(d, dict) or b"data" not in d or b"labels" not in d:
        found = sorted(d, key=repr)[:6] if isinstance(d, dict) else type(d).__name__
        raise DataFormatError(f"{path}: not a CIFAR-10 batch (expected a dict with b'data' and b'labels', found "
                              f"{found}); {fix}")
    data = d[b"data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        what = f"{data.dtype} array of shape {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DataFormatError(f"{path}: b'data' is a {what}, expected a uint8 array of shape (N, 3072); {fix}")
    size = Path(path).stat().st_size
    if data.nbytes > size:  # made by the pickle from a shape alone: no pixels of the file
        raise DataFormatError(f"{path}: b'data' holds {len(data)} images ({size_text(data.nbytes)}), more than the "
                              f"file's {size_text(size)} can hold: not the published file; {fix}")
    labels = check_labels(d[b"labels"], 10, path, item="image", fix=fix)
    if len(labels) != len(data):
        raise DataFormatError(f"{path}: {len(data)} images but {len(labels)} labels; {fix}")
    if not len(data):
        raise DataFormatError(f"{path}: the batch holds no images; {fix}")
    # stored channel-major (R plane, G plane, B plane); sequences want (pixel, channel)
    return data.reshape(-1, 3, 1024).transpose(0, 2, 1).copy(), labels


class CIFAR10DataModule(ImageDataModule):
    """CIFAR-10: numeric (B, 1024, 3) normalised RGB (or (B, 1024, 1) with `grayscale=True`),
    or categorical (B, 1024) grayscale ids 0..255; 10 classes; 10% of train held out (seed 42)."""

    name = "cifar10"

    def __init__(self, data_dir=None, batch_size: int = 32, num_workers: int = 0, max_length: int = 1024,
                 seed: int = 42, cache_dir=None, mode: str = "numeric", grayscale: bool = False,
                 val_fraction: float = 0.1):
        gray = grayscale or mode == "categorical"
        super().__init__(data_dir, batch_size, num_workers, max_length, seed, cache_dir, mode=mode,
                         channels=1 if gray else 3, mean=GRAY_MEAN if gray else RGB_MEAN,
                         std=GRAY_STD if gray else RGB_STD, n_classes=10)
        self.val_fraction = val_fraction

    def build_splits(self):
        root = self.data_dir / "cifar-10-batches-py"
        files = {"train": [root / f"data_batch_{i}" for i in range(1, 6)], "test": [root / "test_batch"]}
        for p in files["train"] + files["test"]:
            if not p.exists():
                raise missing(p, LAYOUT, download_command("cifar10", self.data_dir))
        # Reading five pickles takes ~1 s: no Arrow cache needed.
        fix = f"delete it and run:\n    {download_command('cifar10', self.data_dir)}"
        split_data = {}
        for split, paths in files.items():
            parts = [read_cifar_batch(p, fix) for p in paths]
            x = np.concatenate([a for a, _ in parts])
            y = np.concatenate([b for _, b in parts])
            x = to_gray(x) if self.channels == 1 else x.reshape(len(x), -1)
            split_data[split] = Ragged.from_array(x, y)
        train_idx, val_idx = holdout_split(len(split_data["train"]), self.val_fraction)
        d = self.item_width
        return {"train": RaggedDataset(split_data["train"], train_idx, d),
                "val": RaggedDataset(split_data["train"], val_idx, d),
                "test": RaggedDataset(split_data["test"], None, d)}
