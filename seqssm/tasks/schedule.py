"""Learning-rate rules of Ulbaek 2024 thesis: warmup then cosine decay to a floor (12.2.4); peak lr scaled by
length (16.3)."""

from __future__ import annotations

import math


def warmup_cosine(step: int, total_steps: int, warmup_steps: int = 0, min_ratio: float = 0.1) -> float:
    """Multiplier of the peak learning rate at optimizer step `step` (0-based).

    Rises linearly over `warmup_steps` to 1, then follows a half cosine from 1 at the end of
    warmup to `min_ratio` at `total_steps`, and stays at `min_ratio` after it.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    decay_steps = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def length_scaled_lr(lr: float, reference_length: int, length: int) -> float:
    """Ulbaek 2024's length rule (16.3): peak lr `lr * reference_length / length` for training length `length`."""
    if length <= 0 or reference_length <= 0:
        raise ValueError(f"lengths must be positive, got reference_length={reference_length}, length={length}")
    return lr * reference_length / length
