"""Memory cores for the actor-critic: any causal layer or block stack of seqssm on (B, L, d_model).

`build_core(CoreConfig(...))` is the one builder of an agent's memory, PPO's core and each SAC history
encoder alike: it wraps a primitive in the residual block of van Gelooven 2025 thesis, 4.1 ("On the
Application of State Space Models to Partially Observable Markov Decision Processes": layer -> activation ->
dropout -> residual -> LayerNorm), or builds a stack of any block of `seqssm.blocks` (`make_stack`), or runs
the layers bare (block "none"). Layer "mlp" is the memoryless core: position-wise
Linear + activation layers with an empty state (the MLP baseline of POPGym: Morad et al. 2023, "POPGym:
Benchmarking Partially Observable Reinforcement Learning"; Lu et al. 2023, table 5). `load_core(path)` takes
the backbone of a supervised checkpoint or exported folder. States are (nested tuples of) tensors with the
batch first; the helpers below index, reset and reassemble them without knowing the layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from seqssm.blocks.common import FeatureDropout, WrapperBlock, make_norm
from seqssm.blocks.stack import BLOCKS, BlockStack, make_stack
from seqssm.layers.base import SequenceLayer, mask_outputs, promoted_call, where_state
from seqssm.layers.registry import LAYERS, build_layer
from seqssm.models.config import SequenceModelConfig
from seqssm.models.sequence_model import SequenceModel
from seqssm.optim import set_ssm_lr_scale

CORE_BLOCKS = ("residual", "none", *BLOCKS)  # this module's two, then every block of seqssm.blocks
RESIDUAL_ACTIVATIONS = ("gelu", "glu")
MEMORYLESS = "mlp"  # the core layer without memory (`FeedForward`)
# The activations of the agent's MLPs and of the memoryless core, by name.
ACTIVATIONS = {"leaky_relu": nn.LeakyReLU, "relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}


@dataclass
class CoreConfig:
    """A memory core: `n_layers` blocks of kind `block` around primitive `layer`, width d_model.

    layer: any name of `seqssm.layers.LAYERS` (s5 s6 s4d s4 mingru gru kalman vssm lssl ...), or "mlp": no
    memory (`FeedForward`; layer_kwargs {activation: ...}, default leaky_relu). d_state: the layer's state
    size (P for S5, d_hidden for (min)GRU); None keeps the layer's default. block "residual" (van Gelooven 2025
    thesis, fig. 4.1: activation "gelu" or "glu" (eq. 4.1); norm False drops its LayerNorm: x + act(layer(x)),
    as Lu et al.'s public code runs S5), "none": the layers alone, one after the other (a GRU core as Lu et
    al.'s code runs it; the MLP baseline), or any block of `seqssm.blocks.BLOCKS` ("mamba", "simple", "mamba2"),
    whose config states its SSP's default d_state. layer_kwargs go to the primitive (e.g. {blocks: 2} for S5,
    {dt_min: 0.001} ...); block_kwargs to the config of a `seqssm.blocks` block (`block_config`: e.g.
    {expand: 2}). final_norm: whether the stack ends in a norm (RMSNorm after residual blocks or bare layers; a
    `seqssm.blocks` block's own norm kind); None keeps the block's rule (Mamba stacks end in one, the others do
    not). ssm_lr_scale: the fraction of the learning rate the layers' SSM parameters train at (None: each
    layer's own, e.g. S5's 0.2; 1.0: one learning rate for all, as Lu et al. 2023, table 3). Defaults: Lu et al. 2023, table 3 (4 S5 layers of width 256); the CPU recipes
    under seqssm/recipes/rl/ are much smaller.
    """

    LIMITS: ClassVar[dict[str, str]] = {"d_model": ">= 1", "d_state": ">= 1", "n_layers": ">= 1", "dropout": "[0, 1)",
                                        "ssm_lr_scale": "> 0"}

    layer: str = "s5"
    d_model: int = 256
    d_state: int | None = None
    n_layers: int = 4
    block: str = "residual"
    activation: str = "gelu"
    norm: bool = True
    dropout: float = 0.0
    ssm_lr_scale: float | None = None
    layer_kwargs: dict[str, Any] = field(default_factory=dict)
    final_norm: bool | None = None
    block_kwargs: dict[str, Any] = field(default_factory=dict)


class FeedForward(SequenceLayer):
    """The memoryless core layer: x (B, L, d_model) -> activation(Linear(x)) at each position on its own.

    Its state is the empty tuple: nothing is carried between steps, so resets change nothing. Two of them
    are the memory model of POPGym's MLP baseline (Morad et al. 2023: Linear + LeakyReLU, twice).
    """

    def __init__(self, d_model: int, activation: str = "leaky_relu"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose one of {tuple(ACTIVATIONS)}")
        self.d_model = d_model
        self.linear = nn.Linear(d_model, d_model)
        self.activation = ACTIVATIONS[activation]()

    def _scan(self, x, state, resets, mask):
        return mask_outputs(mask, self.activation(promoted_call(self.linear, x))), ()

    def _step(self, x_t, state):
        return self.activation(promoted_call(self.linear, x_t)), ()

    def initial_state(self, batch_size: int, device=None, dtype=None) -> tuple:
        """The empty tuple: a memoryless layer has no state."""
        return ()


class ResidualBlock(WrapperBlock):
    """Post-norm residual block (van Gelooven 2025 thesis, fig. 4.1): x (B, L, d) -> LN(x + dropout(act(layer(x)))).

    activation "gelu", or "glu": Linear(d, 2d) on GELU(y), halves (a, g) -> a * sigmoid(g) (van Gelooven
    2025 thesis, eq. 4.1, helpful on MemoryCorridor; the "full_glu" of Lu et al.'s code). norm=False drops
    the LayerNorm: x + dropout(act(layer(x))). State: the layer's.
    """

    def __init__(self, layer: nn.Module, d_model: int, activation: str = "gelu", dropout: float = 0.0,
                 norm: bool = True):
        super().__init__()
        if activation not in RESIDUAL_ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose one of {RESIDUAL_ACTIVATIONS}")
        self.layer, self.activation = layer, activation
        self.glu = nn.Linear(d_model, 2 * d_model) if activation == "glu" else None
        self.dropout = FeatureDropout(dropout)
        self.norm = nn.LayerNorm(d_model) if norm else nn.Identity()

    @property
    def inner(self) -> nn.Module:
        return self.layer

    def _finish(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        y = F.gelu(y)
        if self.glu is not None:
            y = F.glu(self.glu(y), dim=-1)
        return self.norm(x + self.dropout(y))


def core_layer(config: CoreConfig) -> nn.Module:
    """One primitive of the core: layer `config.layer` (or the memoryless `FeedForward`) of width d_model."""
    if config.layer == MEMORYLESS:
        return FeedForward(config.d_model, **config.layer_kwargs)
    return build_layer(config.layer, config.d_model, config.d_state, **config.layer_kwargs)


def build_core(config: CoreConfig) -> BlockStack:
    """The BlockStack that `config` describes: (B, L, d_model) -> (B, L, d_model) with scan/step."""
    if config.layer != MEMORYLESS and config.layer not in LAYERS:
        raise ValueError(f"unknown sequence layer {config.layer!r}; registered layers: {', '.join(LAYERS)}; "
                         f"or {MEMORYLESS!r}, the core without memory")
    if config.block not in CORE_BLOCKS:
        raise ValueError(f"unknown core block {config.block!r}; choose one of {CORE_BLOCKS}")
    if config.n_layers < 1:
        raise ValueError(f"core n_layers must be >= 1, got {config.n_layers}")
    if config.block in BLOCKS:
        if config.layer == MEMORYLESS:
            raise ValueError(f"the memoryless core layer {MEMORYLESS!r} runs in block 'residual' or 'none', "
                             f"not {config.block!r}")
        # d_state only when given: each block kind's config states its SSP's default size
        sizes = {} if config.d_state is None else {"d_state": config.d_state}
        changes = {"ssp": config.layer, "dropout": config.dropout, "ssp_kwargs": dict(config.layer_kwargs), **sizes,
                   **config.block_kwargs}
        core = make_stack(config.block, config.d_model, config.n_layers, final_norm=config.final_norm, **changes)
    else:
        if config.block_kwargs:
            raise ValueError(f"block_kwargs {config.block_kwargs} configure a block of seqssm.blocks "
                             f"({', '.join(BLOCKS)}), not block {config.block!r}")
        if config.block == "residual":
            layers = [ResidualBlock(core_layer(config), config.d_model, config.activation, config.dropout,
                                    config.norm) for _ in range(config.n_layers)]
        else:
            layers = [core_layer(config) for _ in range(config.n_layers)]
        core = BlockStack(layers, make_norm(config.d_model, rms=True) if config.final_norm else nn.Identity())
    if config.ssm_lr_scale is not None:
        set_ssm_lr_scale(core, config.ssm_lr_scale)
    return core


def load_core(path: str | Path) -> tuple[BlockStack, dict]:
    """The backbone (blocks + final norm) of a supervised SequenceModel and its model config.

    path: a Lightning checkpoint from `seqssm fit` (read with weights_only=True) or a folder written
    by `seqssm export`. The model's input embedding and head are dropped: the agent's encoder
    feeds the backbone and its actor and critic read it.
    """
    from seqssm.models.loading import model_from_path

    model = model_from_path(path, "core_init_from")
    if not isinstance(model, SequenceModel) or not model.causal:
        raise ValueError(f"core_init_from: {path} holds a bidirectional model; an agent's memory must be causal "
                         "(its output at t may not depend on observations after t)")
    return model.backbone, model.config.to_dict()


def core_config_of(model_config: dict) -> CoreConfig:
    """The CoreConfig that describes the backbone of the SequenceModel `model_config` describes (what `load_core`
    gives an agent): its blocks' kind and SSP, width, depth, dropout and SSP settings."""
    config = SequenceModelConfig.from_dict(model_config)
    ssp = config.block.ssp
    return CoreConfig(layer=ssp.layer, d_model=config.d_model, d_state=ssp.d_state, n_layers=config.n_layers,
                      block=config.block.kind, dropout=config.block.dropout, ssm_lr_scale=ssp.lr_scale,
                      layer_kwargs=dict(ssp.layer_kwargs))


def describe_core(config: CoreConfig) -> str:
    """A core in a few words: "layer s6, block mamba, 2 layers, d_model 64"."""
    layers = f"{config.n_layers} layer" + ("s" if config.n_layers != 1 else "")
    return f"layer {config.layer}, block {config.block}, {layers}, d_model {config.d_model}"


def core_from_model_config(config: dict) -> BlockStack:
    """A freshly initialised backbone of the SequenceModel that `config` describes (to load agent weights into)."""
    return SequenceModel.from_config(config).backbone


def core_width(core: nn.Module) -> int:
    """d_model of a core: its own `d_model`, or that of its first block."""
    if isinstance(core, SequenceModel):
        return core.config.d_model
    width = getattr(core, "d_model", None)
    if width is None and isinstance(core, BlockStack):
        first = core.layers[0]
        width = getattr(first, "d_model", None) or getattr(getattr(first, "layer", None), "d_model", None)
    if width is None:
        raise ValueError(f"cannot tell the width of core {type(core).__name__}; pass d_model= to ActorCritic")
    return int(width)


def reset_state(state, fresh, done: torch.Tensor):
    """Rows b of `state` with done[b] (B,) bool replaced by the same rows of `fresh` (an initial state)."""
    return where_state(done, fresh, state)
