"""Shared base of the pixel-sequence datasets (CIFAR-10, Pathfinder, MNIST)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .base import SeqDataModule
from .collate import Normalize, PadCollate

MODES = ("numeric", "categorical")


class ImageDataModule(SeqDataModule):
    """Images as pixel sequences: categorical -> (B, L) ids in 0..255 (vocab 256);
    numeric -> (B, L, channels) float32, `(x/255 - mean) / std`.

    Every image has the same length, so no padding ever happens; `pad_token_id` is None
    (pixel 0 is a real value, and must not become an embedding's padding index).
    """

    def __init__(self, data_dir=None, batch_size: int = 32, num_workers: int = 0, max_length: int | None = None,
                 seed: int = 42, cache_dir=None, mode: str = "numeric", channels: int = 1,
                 mean: Sequence[float] = (0.0,), std: Sequence[float] = (1.0,), n_classes: int = 10):
        super().__init__(data_dir, batch_size, num_workers, max_length, seed, cache_dir)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode == "categorical" and channels != 1:
            raise ValueError("categorical mode needs one channel (grayscale): 256 tokens per pixel")
        self.mode = mode
        self.channels = channels
        self.mean, self.std = tuple(mean), tuple(std)
        self.n_classes = n_classes
        if mode == "numeric":
            self.d_input = channels
        else:
            self.vocab_size = 256

    @property
    def item_width(self) -> int | None:
        """Feature width of one item's pixels for RaggedDataset (None: flat token ids)."""
        return self.channels if self.mode == "numeric" else None

    def collate(self):
        if self.mode == "numeric":
            return PadCollate(pad_value=0.0, transform=Normalize(self.mean, self.std))
        return PadCollate(pad_value=0)


def to_gray(rgb: np.ndarray) -> np.ndarray:
    """uint8 (..., 3) RGB -> uint8 (...) grayscale, 0.2989 R + 0.5870 G + 0.1140 B rounded (as tf.image)."""
    g = rgb.astype(np.float32) @ np.array([0.2989, 0.5870, 0.1140], dtype=np.float32)
    return np.clip(np.rint(g), 0, 255).astype(np.uint8)
