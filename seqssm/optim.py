"""Optimizer groups from per-parameter tags.

SSM parameters (A, B, C, dt of S4/S4D, A of S6) train at a fraction of the learning rate, 0.1x by
default, without weight decay (Ulbaek 2024 thesis, 12.2.4). Layers tag such parameters with `tag_ssm`; a model's
SSP config may set another fraction (`seqssm.blocks.SSPConfig.lr_scale`), which `set_ssm_lr_scale`
writes into the tags; `param_groups` turns the tags into AdamW groups, so training code never matches
parameter names.
"""

from __future__ import annotations

from torch import nn

SSM_LR_SCALE = 0.1  # Ulbaek 2024 thesis, 12.2.4


def tag_param(param: nn.Parameter, lr_scale: float = 1.0, weight_decay: float = 0.0) -> nn.Parameter:
    """Mark `param` for a scaled learning rate and its own weight decay; returns it."""
    param._optim = {"lr_scale": float(lr_scale), "weight_decay": float(weight_decay)}
    return param


def tag_ssm(param: nn.Parameter, lr_scale: float = SSM_LR_SCALE) -> nn.Parameter:
    """Mark `param` as an SSM parameter: `lr_scale` x the learning rate, no weight decay; returns it."""
    tag_param(param, lr_scale, weight_decay=0.0)
    param._optim["ssm"] = True
    return param


def is_ssm(param: nn.Parameter) -> bool:
    """Whether `param` is tagged as an SSM parameter (by `tag_ssm`)."""
    return bool(getattr(param, "_optim", {}).get("ssm"))


def untag(param: nn.Parameter) -> None:
    """Drop `param`'s tag: it trains as an ordinary weight (full lr, the run's weight decay)."""
    if hasattr(param, "_optim"):
        del param._optim


def set_ssm_lr_scale(module: nn.Module, lr_scale: float) -> None:
    """Every SSM parameter of `module` (tagged by `tag_ssm`) trains at `lr_scale` x the learning rate."""
    if not lr_scale > 0:
        raise ValueError(f"an SSM learning-rate scale must be positive, got {lr_scale}")
    for p in module.parameters():
        if is_ssm(p):
            p._optim["lr_scale"] = float(lr_scale)


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
