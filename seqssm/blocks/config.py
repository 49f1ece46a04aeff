"""Typed configs of the blocks and of the sequence primitive (SSP) inside each block.

    MambaBlockConfig(SSPConfig("s4d", d_state=16), bidirectional=True, dropout=0.1)
    SimpleBlockConfig(SSPConfig("s4", d_state=64, rope={}))
    block_config("mamba", ssp="s4d", d_state=16, bidirectional=True)     # the same, by flat names

Each field's default is stated once, here: Mamba blocks around S6 with N=16 and RMSNorm, Simple blocks
around S4D with N=64 and LayerNorm (Ulbaek 2024 thesis, tables 2, 3), no dropout. `block_config` also reads the flat
names of the one-level model config of earlier seqssm versions (`FLAT_SSP_NAMES`), which recipes'
`model_overrides`, old config.json files and old checkpoints use.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from seqssm.layers.base import check_sizes
from seqssm.layers.registry import layer_entry


SSP_INITS = ("default", "thesis")
# The initialisation of Ulbaek 2024 thesis, 12.2.4, as layer arguments: S4's A is its full DPLR form and S4D's the
# diagonal Λ (both LegS, B the LegS vector in that basis), C ~ N(0, 1), D = 1 by default already; what differs is Δ's
# distribution and S6's A.
THESIS_INIT: dict[str, dict[str, Any]] = {
    "s4": {"dt_distribution": "uniform"},
    "s4d": {"init": "legs", "dt_distribution": "uniform"},
    "s6": {"A_init": "legs"},
}


@dataclass(frozen=True)
class SSPConfig:
    """The sequence primitive of a block.

    layer: a name of `seqssm.layers.LAYERS` ("s6", "s4d", "s4", "s5", ...). d_state: its state size (None: the
    layer's own default). lr_scale: the fraction of the learning rate its SSM parameters train at (None: the
    layer's own, 0.1 for S4 / S4D / S6 / LSSL after Ulbaek 2024 thesis, 12.2.4, 0.2 for S5). rope: options of
    `RotarySSP` (base, trainable, normalize_len, targets) to put RoPE before the SSP ({} for the defaults), None for
    none. layer_kwargs: the layer's other constructor arguments (e.g. {"dt_min": 0.01}).
    init: "default", each layer's own initialisation (S4 / S4D: the S4 code's, Δ log-uniform in [0.001, 0.1];
    S6: mamba_ssm's, A_n = -(n + 1)), or "thesis" (Ulbaek 2024 thesis, 12.2.4) for S4, S4D and S6 (`THESIS_INIT`): Δ
    uniform in (0.001, 0.1) for S4 / S4D, S6's A = Re Λ of the LegS DPLR form (-1/2); B (LegS), C ~ N(0, 1) and D = 1
    as by default. S6's B, C and Δ come from its input projections either way (12.2.4 says so too).
    plain_params: names of the layer's SSM parameters to train as ordinary weights instead (the full learning
    rate and the run's weight decay), e.g. ["C"]: S4's published code tags only A, B and Δ, and trains C so.
    """

    layer: str = "s6"
    d_state: int | None = None
    lr_scale: float | None = None
    rope: dict[str, Any] | None = None
    layer_kwargs: dict[str, Any] = field(default_factory=dict)
    init: str = "default"
    plain_params: list[str] = field(default_factory=list)

    def __post_init__(self):
        layer_entry(self.layer)  # an unknown name fails here, listing the registered layers
        if self.init not in SSP_INITS:
            raise ValueError(f"SSPConfig.init must be one of {SSP_INITS}, got {self.init!r}")
        if self.init == "thesis" and self.layer not in THESIS_INIT:
            raise ValueError(f"init='thesis' (Ulbaek 2024 thesis, 12.2.4) is defined for the layers "
                             f"{sorted(THESIS_INIT)}, not {self.layer!r}; use init='default'")
        if self.lr_scale is not None and not self.lr_scale > 0:
            raise ValueError(f"SSPConfig.lr_scale must be positive (or None for the layer's own), got {self.lr_scale}")
        # JSON has no tuples: lists keep a config equal to itself after a round trip through config.json
        if self.rope is not None:
            object.__setattr__(self, "rope", {k: list(v) if isinstance(v, tuple) else v for k, v in self.rope.items()})
        object.__setattr__(self, "layer_kwargs", dict(self.layer_kwargs or {}))
        plain = (self.plain_params,) if isinstance(self.plain_params, str) else tuple(self.plain_params or ())
        if not all(isinstance(name, str) and name for name in plain):
            raise ValueError(f"SSPConfig.plain_params must be parameter names, got {self.plain_params!r}")
        object.__setattr__(self, "plain_params", list(plain))  # a list, as JSON gives it back
        self.layer_arguments()  # a layer_kwargs entry that contradicts `init` fails here

    def layer_arguments(self) -> dict[str, Any]:
        """The layer's constructor arguments besides d_model and d_state: layer_kwargs and those `init` implies."""
        implied = THESIS_INIT[self.layer] if self.init == "thesis" else {}
        clash = {k: v for k, v in self.layer_kwargs.items() if k in implied and implied[k] != v}
        if clash:
            raise ValueError(f"layer_kwargs {clash} contradict init={self.init!r}, which sets {implied}; drop them "
                             "or use init='default'")
        return {**implied, **self.layer_kwargs}


@dataclass(frozen=True)
class BlockConfig:
    """Fields every block has: its SSP, feature dropout, and its norm (RMSNorm or LayerNorm, with eps)."""

    kind: ClassVar[str]
    final_norm: ClassVar[bool]  # whether a stack of these blocks ends in a norm of its own

    ssp: SSPConfig = field(default_factory=SSPConfig)
    dropout: float = 0.0
    rms_norm: bool = True
    norm_eps: float = 1e-5

    def __post_init__(self):
        if not isinstance(self.ssp, SSPConfig):
            raise TypeError(f"{type(self).__name__}.ssp must be an SSPConfig, got {type(self.ssp).__name__}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if isinstance(self.norm_eps, bool) or not isinstance(self.norm_eps, (int, float)) or not self.norm_eps > 0:
            raise ValueError(f"norm_eps must be a number > 0, got {self.norm_eps!r}")

    def to_dict(self) -> dict[str, Any]:
        """{"kind": ..., every field, "ssp": {...}}: plain JSON-able values."""
        return {"kind": self.kind, **dataclasses.asdict(self)}


DROPOUT_POSITIONS = ("ssp_output", "ssp_input", "in_proj")  # the Mamba block's; see MambaBlockConfig


@dataclass(frozen=True)
class GatedBlockConfig(BlockConfig):
    """Fields of the pre-norm residual blocks of the Mamba family: width expand x d_model inside, a causal conv1d of
    width d_conv (with bias if conv_bias), in / out projections (with bias if proj_bias), and residual_in_fp32 to keep
    the residual sum in float32 when the model runs in lower precision. bidirectional: a second conv + SSP branch on
    each sequence reversed within its length, its output reversed back and added (MambaBi, Ulbaek 2024 thesis,
    fig. 16; non-causal); placebo: the same two branches without the flips (causal)."""

    final_norm: ClassVar[bool] = True  # pre-norm blocks leave the residual stream unnormalised

    expand: int = 2
    d_conv: int = 4
    conv_bias: bool = True
    proj_bias: bool = False
    residual_in_fp32: bool = False
    bidirectional: bool = False
    placebo: bool = False

    def __post_init__(self):
        super().__post_init__()
        check_sizes(type(self).__name__, expand=self.expand, d_conv=self.d_conv)
        if self.bidirectional and self.placebo:
            raise ValueError("choose at most one of bidirectional and placebo")


@dataclass(frozen=True)
class MambaBlockConfig(GatedBlockConfig):
    """The Mamba block (Ulbaek 2024 thesis, 12.1, fig. 9): width expand x d_model inside, a causal conv1d of width
    d_conv (with bias if conv_bias) before the SSP, in / out projections (with bias if proj_bias). dt_rank: S6's Δ
    rank, "auto" = ceil(d_model / 16) as in mamba_ssm. bidirectional / placebo: two conv1d + SSP branches
    (`GatedBlockConfig`).

    dropout_position: where the block's feature dropout acts (`DROPOUT_POSITIONS`). "ssp_output" (default): on
    the SSP's output, before the gate, as the Simple block does. "ssp_input": on the in_proj half that enters the
    conv1d + SSP, the place of Ulbaek 2024 thesis, 12.1.4 ("as close to the SSP as possible" while compatible with the
    fused Mamba-s6 kernel, which takes in_proj's output and runs conv1d, SSP, gate and out_proj in one call); the
    thesis's recipes use it. "in_proj": on all of in_proj's output, the gate half too (the thesis authors'
    public code)."""

    kind: ClassVar[str] = "mamba"

    ssp: SSPConfig = field(default_factory=lambda: SSPConfig("s6", d_state=16))
    dt_rank: int | str = "auto"
    dropout_position: str = "ssp_output"

    def __post_init__(self):
        super().__post_init__()
        if self.dropout_position not in DROPOUT_POSITIONS:
            raise ValueError(f"dropout_position must be one of {DROPOUT_POSITIONS}, got {self.dropout_position!r}")
        if self.dt_rank != "auto" and not (isinstance(self.dt_rank, int) and self.dt_rank > 0):
            raise ValueError(f"dt_rank must be 'auto' or a positive integer, got {self.dt_rank!r}")


@dataclass(frozen=True)
class SimpleBlockConfig(BlockConfig):
    """The Simple block of the S4 / S4D papers (Ulbaek 2024 thesis, 12.1, fig. 9): post-norm, GELU, GLU."""

    kind: ClassVar[str] = "simple"
    final_norm: ClassVar[bool] = False  # each block ends in its own (post) norm

    ssp: SSPConfig = field(default_factory=lambda: SSPConfig("s4d", d_state=64))
    rms_norm: bool = False


@dataclass(frozen=True)
class Mamba2BlockConfig(GatedBlockConfig):
    """The Mamba-2 block (Dao & Gu 2024, 7.1), mamba_ssm's `Mamba2` defaults: the conv runs over x, B and C, and the
    SSP is the SSD layer (its head_dim, n_groups and chunk_size are layer_kwargs of the SSP); bidirectional / placebo
    give it a second conv1d + SSD branch over the same in_proj outputs (`GatedBlockConfig`). dropout_position: where
    the feature dropout acts, "ssp_output" (default: on the SSD's output, before the gated norm) or "ssp_input" (on
    the x that enters the SSD after the conv, the place Ulbaek 2024 thesis, 12.1.4, gives the Mamba block's)."""

    kind: ClassVar[str] = "mamba2"

    ssp: SSPConfig = field(default_factory=lambda: SSPConfig("ssd", d_state=128))
    dropout_position: str = "ssp_output"

    def __post_init__(self):
        super().__post_init__()
        if self.dropout_position not in DROPOUT_POSITIONS[:2]:
            raise ValueError(f"the Mamba-2 block's dropout_position is one of {DROPOUT_POSITIONS[:2]}, got "
                             f"{self.dropout_position!r}")
        if self.ssp.layer != "ssd":
            raise ValueError(f"the Mamba-2 block runs the SSD layer (its B, C and Δ come from the block's in_proj), "
                             f"not {self.ssp.layer!r}; use a Mamba block for other layers")
        if self.ssp.rope is not None:
            raise ValueError("the Mamba-2 block takes no RoPE before its SSD: drop rope (or -rope from the name)")


@dataclass(frozen=True)
class AttentionConfig:
    """The attention layers of a hybrid stack (mamba_ssm's `attn_cfg` of its `MHA`): n_heads query heads of head_dim
    channels (None: d_model / n_heads), n_kv_heads key / value heads (None: n_heads; fewer: grouped-query attention),
    rotary embeddings on the first rotary_dim channels of each query and key head (0: none; base rotary_base, the two
    halves rotated against each other as flash_attn's non-interleaved form does), biases of the qkv and out
    projections, softmax_scale (None: 1 / sqrt(head_dim)), d_conv the width of a causal depthwise conv over q, k and v
    (0: none), mlp_dim channels of a gated MLP (up * SiLU(gate), from the same projection as q, k, v) whose mlp_dim / 2
    outputs join the attention's before out_proj (0: none)."""

    n_heads: int
    n_kv_heads: int | None = None
    head_dim: int | None = None
    rotary_dim: int = 0
    rotary_base: float = 10000.0
    qkv_bias: bool = True
    out_bias: bool = True
    softmax_scale: float | None = None
    d_conv: int = 0
    mlp_dim: int = 0

    def __post_init__(self):
        check_sizes("AttentionConfig", n_heads=self.n_heads, n_kv_heads=self.n_kv_heads, head_dim=self.head_dim)
        check_sizes("AttentionConfig", minimum=0, rotary_dim=self.rotary_dim, d_conv=self.d_conv, mlp_dim=self.mlp_dim)
        if self.n_kv_heads is not None and self.n_heads % self.n_kv_heads:
            raise ValueError(f"AttentionConfig: n_heads {self.n_heads} must be a multiple of n_kv_heads "
                             f"{self.n_kv_heads} (each key / value head serves a group of query heads)")
        if self.rotary_dim % 2 or (self.head_dim is not None and self.rotary_dim > self.head_dim):
            raise ValueError(f"AttentionConfig: rotary_dim must be even and at most head_dim, got {self.rotary_dim}")
        if self.mlp_dim % 2:
            raise ValueError(f"AttentionConfig: mlp_dim splits into up and gate halves: give an even number, got "
                             f"{self.mlp_dim}")
        if not self.rotary_base > 0 or (self.softmax_scale is not None and not self.softmax_scale > 0):
            raise ValueError(f"AttentionConfig: rotary_base and softmax_scale must be positive, got "
                             f"{self.rotary_base} and {self.softmax_scale}")

    @classmethod
    def from_dict(cls, data: "AttentionConfig | dict[str, Any]") -> "AttentionConfig":
        """The config of a dict of its fields (a config passes through); unknown names are refused."""
        if isinstance(data, AttentionConfig):
            return data
        if not isinstance(data, dict):
            raise TypeError(f"attn must be an AttentionConfig or a dict of its fields, got {type(data).__name__}")
        unknown = sorted(set(data) - _field_names(cls))
        if unknown:
            raise ValueError(f"unknown attention setting(s) {unknown}; AttentionConfig has {sorted(_field_names(cls))}")
        return cls(**data)


BLOCK_CONFIGS: dict[str, type[BlockConfig]] = {c.kind: c for c in (MambaBlockConfig, SimpleBlockConfig,
                                                                   Mamba2BlockConfig)}
# flat name of the one-level config of earlier versions -> SSPConfig field (block fields kept their names)
FLAT_SSP_NAMES = {"ssp": "layer", "d_state": "d_state", "ssp_lr_scale": "lr_scale", "rope": "rope",
                  "ssp_kwargs": "layer_kwargs", "ssp_init": "init", "ssp_plain_params": "plain_params"}


def _field_names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def ssp_config(base: SSPConfig, changes: SSPConfig | dict[str, Any] | str) -> SSPConfig:
    """`base` with `changes`: a whole SSPConfig, a dict of its fields, or a layer name."""
    if isinstance(changes, SSPConfig):
        return changes
    if isinstance(changes, str):
        changes = {"layer": changes}
    unknown = sorted(set(changes) - _field_names(SSPConfig))
    if unknown:
        raise ValueError(f"unknown SSP setting(s) {unknown}; SSPConfig has {sorted(_field_names(SSPConfig))}")
    return dataclasses.replace(base, **changes)


def block_config(block: str | BlockConfig = "mamba", **changes: Any) -> BlockConfig:
    """A block config: `block` (a kind's defaults, or a config) with `changes` made.

    changes: fields of the block config ("kind" switches to that kind's defaults first; "ssp" may be an
    SSPConfig, a dict of its fields or a layer name) or the flat SSP names of `FLAT_SSP_NAMES`. So
    `block_config(**config.to_dict())` gives `config` back.
    """
    kind = changes.pop("kind", block.kind if isinstance(block, BlockConfig) else block)
    if kind not in BLOCK_CONFIGS:
        raise ValueError(f"unknown block {kind!r}; choose one of {tuple(BLOCK_CONFIGS)}")
    if not isinstance(block, BlockConfig) or block.kind != kind:
        block = BLOCK_CONFIGS[kind]()
    ssp = changes.pop("ssp", None)
    ssp_changes = {FLAT_SSP_NAMES[k]: changes.pop(k) for k in list(changes) if k in FLAT_SSP_NAMES}
    new_ssp = block.ssp if ssp is None else ssp_config(block.ssp, ssp)
    unknown = sorted(set(changes) - _field_names(type(block)))
    if unknown:
        others = [k for k, c in BLOCK_CONFIGS.items() if c is not type(block) and set(unknown) <= _field_names(c)]
        hint = f" (settings of {others[0]} blocks)" if others else ""
        raise ValueError(f"{kind} blocks have no setting(s) {unknown}{hint}; they have "
                         f"{sorted(_field_names(type(block)) | set(FLAT_SSP_NAMES))}")
    return dataclasses.replace(block, ssp=dataclasses.replace(new_ssp, **ssp_changes), **changes)

