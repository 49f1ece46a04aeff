"""Pieces shared by the blocks: the SSP factory, norms, feature-wise dropout, per-sequence flips."""

from __future__ import annotations

import torch
from torch import nn

from seqssm.blocks.config import BlockConfig, SSPConfig
from seqssm.blocks.ssp import RotarySSP
from seqssm.layers.base import SequenceLayer, check_sizes, mask_outputs
from seqssm.layers.registry import build_layer
from seqssm.optim import is_ssm, set_ssm_lr_scale, untag


def make_ssp(config: SSPConfig, d_model: int, **kwargs) -> nn.Module:
    """The sequence primitive (SSP) of a block over d_model channels, (B, L, d_model) -> (B, L, d_model): layer
    `config.layer` ("s4" DPLR, "s4d" diagonal, "s6" selective, ...) with its learning-rate scale, behind RoPE when
    `config.rope` is set, initialised as `config.init` says. kwargs: constructor arguments the block adds (the
    Mamba block's dt_rank for S6)."""
    layer = build_layer(config.layer, d_model, config.d_state, **config.layer_arguments(), **kwargs)
    if config.lr_scale is not None:
        set_ssm_lr_scale(layer, config.lr_scale)
    for name in config.plain_params:
        untag_ssm(layer, name)
    return layer if config.rope is None else RotarySSP(layer, **config.rope)


def untag_ssm(layer: nn.Module, name: str) -> None:
    """Train `layer`'s SSM parameter `name` as an ordinary weight (full lr, the run's weight decay): drop its tag."""
    tagged = {n: p for n, p in layer.named_parameters(recurse=False) if is_ssm(p)}
    if name not in tagged:
        raise ValueError(f"plain_params: {type(layer).__name__} has no SSM parameter {name!r}; its SSM parameters "
                         f"are {sorted(tagged)}")
    untag(tagged[name])


def checked_config(block: str, d_model: int, config: BlockConfig | None, cls: type[BlockConfig]) -> BlockConfig:
    """A block's `config` (None: `cls`'s defaults), refused unless it is a `cls`, with d_model checked; errors name
    `block`."""
    config = cls() if config is None else config
    if not isinstance(config, cls):
        raise TypeError(f"{block} takes a {cls.__name__}, got {type(config).__name__}")
    check_sizes(block, d_model=d_model)
    return config


def residual_stream(residual: torch.Tensor, in_fp32: bool) -> torch.Tensor:
    """residual, with in_fp32 (residual_in_fp32) in at least float32: a lower-precision model keeps its residual
    stream wide."""
    return residual.to(torch.promote_types(residual.dtype, torch.float32)) if in_fp32 else residual


def add_residual(residual: torch.Tensor, out: torch.Tensor, in_fp32: bool) -> torch.Tensor:
    """residual + out, the residual stream as `residual_stream` keeps it."""
    return residual_stream(residual, in_fp32) + out


def make_norm(d_model: int, rms: bool, eps: float = 1e-5) -> nn.Module:
    """RMSNorm (rms=True) or LayerNorm over the last dimension."""
    return nn.RMSNorm(d_model, eps=eps) if rms else nn.LayerNorm(d_model, eps=eps)


class FeatureDropout(nn.Module):
    """Dropout of whole features: x (B, L, D), the same features zeroed at every position (Ulbaek 2024 thesis,
    12.1.3)."""

    def __init__(self, p: float = 0.0):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = torch.empty(x.shape[0], *([1] * (x.ndim - 2)), x.shape[-1], device=x.device, dtype=x.dtype)
        return x * keep.bernoulli_(1.0 - self.p) / (1.0 - self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class WrapperBlock(SequenceLayer):
    """A causal block around one inner sequence layer: y = _finish(x, inner(x)) in forward, scan and step
    alike, x (B, L, d) -> (B, L, d); the state is the inner layer's. Subclasses give `inner` and `_finish`."""

    inner: nn.Module

    @property
    def d_model(self) -> int | None:
        return getattr(self.inner, "d_model", None)

    def _finish(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, d) -> (B, L, d); `lengths` is accepted for a uniform block interface (causal: unused)."""
        return self._finish(x, self.inner(x))

    def _scan(self, x, state, resets, mask):
        y, state = self.inner.scan(x, state, resets, mask)
        return mask_outputs(mask, self._finish(x, y)), state

    def _step(self, x_t, state):
        y, state = self.inner.step(x_t, state)
        return self._finish(x_t, y), state

    def initial_state(self, batch_size: int, device=None, dtype=None):
        return self.inner.initial_state(batch_size, device=device, dtype=dtype)


def flip_within_lengths(x: torch.Tensor, lengths: torch.Tensor | None, dim: int = 1) -> torch.Tensor:
    """Reverse each sequence of x (B, L, D) within its own length (B,); padding positions stay put.

    Its own inverse. With lengths None the whole tensor is flipped. `dim` is the time dimension
    (2 for channels-first (B, D, L)).
    """
    if lengths is None:
        return x.flip(dim)
    t = torch.arange(x.shape[dim], device=x.device)
    lengths = lengths.to(x.device)
    index = torch.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)  # (B, L)
    shape = [1] * x.ndim
    shape[0], shape[dim] = x.shape[0], x.shape[dim]
    return x.gather(dim, index.view(shape).expand_as(x))
