"""Padding collate shared by every DataModule: items -> {"inputs", "lengths"[, "labels"]}."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch


class PadCollate:
    """Right-pad items (L_i,) or (L_i, d) to (B, L_max[, d]) with `pad_value`.

    Each item is `(array, label)` with label an int or None. `transform`, if given, maps
    the padded numpy batch (B, L[, d]) to a float tensor (e.g. pixel normalisation); the
    padding positions are reset to `pad_value` afterwards so they never carry a signal.
    """

    def __init__(self, pad_value: float = 0, transform: Callable[[np.ndarray], torch.Tensor] | None = None):
        self.pad_value = pad_value
        self.transform = transform

    def __call__(self, items: Sequence[tuple[np.ndarray, int | None]]) -> dict[str, torch.Tensor]:
        arrays = [a for a, _ in items]
        lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
        max_len = int(lengths.max())
        first = arrays[0]
        out = np.empty((len(arrays), max_len) + first.shape[1:], dtype=first.dtype)
        full = lengths == max_len
        if full.all():
            np.stack(arrays, out=out)
        else:
            out.fill(0 if self.transform is not None else self.pad_value)
            for row, a in zip(out, arrays):
                row[: len(a)] = a
        if self.transform is not None:
            inputs = self.transform(out)
            if not full.all():
                mask = torch.arange(max_len)[None, :] >= torch.from_numpy(lengths)[:, None]
                inputs[mask] = self.pad_value
        else:
            # int64 because embedding layers and loss functions want LongTensor ids.
            inputs = torch.from_numpy(out.astype(np.int64, copy=False))
        batch = {"inputs": inputs, "lengths": torch.from_numpy(lengths)}
        if items[0][1] is not None:
            batch["labels"] = torch.tensor([y for _, y in items], dtype=torch.long)
        return batch


class Normalize:
    """uint8 pixels (B, L, d) -> float32 ((x / 255) - mean) / std per channel."""

    def __init__(self, mean: Sequence[float] = (0.0,), std: Sequence[float] = (1.0,)):
        # x * scale + shift == (x / 255 - mean) / std, in one fused numpy pass
        std = np.asarray(std, dtype=np.float32)
        self.scale = 1.0 / (255.0 * std)
        self.shift = -np.asarray(mean, dtype=np.float32) / std

    def __call__(self, x: np.ndarray) -> torch.Tensor:
        # numpy, not torch: small elementwise ops in a loader should not contend for intra-op threads
        out = x.astype(np.float32)
        out *= self.scale
        out += self.shift
        return torch.from_numpy(out)
