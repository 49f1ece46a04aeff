"""Optimizer groups from per-parameter tags.

SSM parameters (A, B, C, dt of S4/S4D, A of S6) train at 0.1x learning rate without weight
decay (thesis 12.2.4). Layers tag such parameters with `tag_param`; `param_groups` turns the
tags into AdamW groups, so training code never matches parameter names.
"""

from __future__ import annotations

from torch import nn

SSM_OPTIM = {"lr_scale": 0.1, "weight_decay": 0.0}


def tag_param(param: nn.Parameter, lr_scale: float = 0.1, weight_decay: float = 0.0) -> nn.Parameter:
    """Mark `param` for a scaled learning rate and its own weight decay; returns it."""
    param._optim = {"lr_scale": float(lr_scale), "weight_decay": float(weight_decay)}
    return param


def param_groups(model: nn.Module, lr: float, weight_decay: float = 0.01) -> list[dict]:
    """AdamW parameter groups: untagged parameters at (lr, weight_decay); tagged ones per their tag.

    Biases and norm weights (1-d parameters) get no weight decay, as is standard.
    """
    groups: dict[tuple[float, float], list[nn.Parameter]] = {}
    seen: set[int] = set()
    for p in model.parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        tag = getattr(p, "_optim", None)
        if tag is not None:
            key = (lr * tag.get("lr_scale", 1.0), tag.get("weight_decay", weight_decay))
        elif p.ndim <= 1:
            key = (lr, 0.0)
        else:
            key = (lr, weight_decay)
        groups.setdefault(key, []).append(p)
    return [{"params": ps, "lr": g_lr, "weight_decay": g_wd} for (g_lr, g_wd), ps in groups.items()]
