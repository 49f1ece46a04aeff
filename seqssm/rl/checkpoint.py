"""Agent checkpoint files: plain dicts of configs and weights, written atomically, read with weights_only=True."""

from __future__ import annotations

from pathlib import Path

import torch


def write_checkpoint(path: str | Path, payload: dict) -> Path:
    """Save `payload` (must carry a "format" key) to `path` via a temporary file, so no half-written file remains."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(payload, tmp)
    tmp.replace(path)
    return path


def read_checkpoint(path: str | Path, fmt: str, hint: str) -> dict:
    """Load a checkpoint dict written with format `fmt`; anything else raises naming the file and `hint`."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(ckpt, dict) or ckpt.get("format") != fmt:
        raise ValueError(f"{path}: not a {hint}")
    return ckpt
