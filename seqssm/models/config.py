"""`SequenceModelConfig`: everything that shapes a SequenceModel, as one typed object.

    config = SequenceModelConfig(d_model=116, n_layers=6, block=MambaBlockConfig(SSPConfig("s6", d_state=16)),
                                 vocab_size=256, n_classes=2)
    config.replace(d_model=64, dropout=0.0)         # a changed copy; block / SSP fields by their flat names too
    SequenceModelConfig.from_dict(config.to_dict())  # JSON round trip (config.json, task checkpoints)

`to_dict` writes the nested form {"d_model", ..., "block": {"kind", ..., "ssp": {...}}}; `from_dict` reads it and
the flat one-level dict that seqssm wrote before the config was typed (`block` a kind name, `ssp` a layer name,
d_state, expand, ... beside d_model), so old folders and checkpoints load.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from seqssm.blocks.config import AttentionConfig, BlockConfig, MambaBlockConfig, SimpleBlockConfig, block_config
from seqssm.blocks.stack import hybrid_layers

POOLINGS = ("mean", "last", "cls", None)


@dataclass(frozen=True)
class SequenceModelConfig:
    """A SequenceModel: embedding of token ids (vocab_size) or numbers (d_input) to d_model, n_layers blocks
    (`block`, holding its SSP's config), then pooling ("mean", "last", "cls" or None) and a head of n_classes
    outputs, or with neither a language-model head over the vocabulary (tied to the embedding if
    tie_embeddings). The embedding has vocab_size rounded up to a multiple of pad_vocab_size_multiple rows.
    attn_layer_idx: the depths (0-based) that hold attention layers of settings `attn` (an AttentionConfig) instead
    of `block`: a hybrid stack, as mamba_ssm's MambaConfig names them."""

    d_model: int
    n_layers: int = 6
    block: BlockConfig = field(default_factory=MambaBlockConfig)
    vocab_size: int | None = None
    d_input: int | None = None
    n_classes: int | None = None
    pooling: str | None = "mean"
    tie_embeddings: bool = False
    pad_vocab_size_multiple: int = 1
    attn_layer_idx: list[int] = field(default_factory=list)
    attn: AttentionConfig | None = None

    def __post_init__(self):
        if not isinstance(self.block, BlockConfig):
            raise TypeError(f"SequenceModelConfig.block must be a block config (MambaBlockConfig, SimpleBlockConfig), "
                            f"got {type(self.block).__name__}; SequenceModelConfig.from_dict reads dicts")
        if self.attn is not None:  # a dict (config.json, a recipe) becomes the typed config
            object.__setattr__(self, "attn", AttentionConfig.from_dict(self.attn))
        if self.pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {self.pooling!r}; choose one of {POOLINGS}")
        for name in ("d_model", "n_layers", "pad_vocab_size_multiple"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        # a list, as JSON gives it back, so that a config equals itself after a round trip through config.json
        object.__setattr__(self, "attn_layer_idx", hybrid_layers(self.block, self.n_layers, self.attn_layer_idx,
                                                                 self.attn))

    @property
    def is_lm(self) -> bool:
        """A language model: no pooling and no n_classes, so the head predicts tokens."""
        return self.pooling is None and self.n_classes is None

    def replace(self, **changes: Any) -> "SequenceModelConfig":
        """A copy with `changes`: fields of this config ("block" a config, a dict of its fields, or a kind name for
        that kind's defaults), or fields of the block and of its SSP by name (dropout=0.0, d_state=8, ssp="s4d",
        rope={}, ...: `seqssm.blocks.block_config`); attn as a dict changes only the settings it names."""
        own = {f.name for f in dataclasses.fields(self)} - {"block"}
        top = {k: changes.pop(k) for k in list(changes) if k in own}
        if isinstance(top.get("attn"), dict) and self.attn is not None:  # a dict changes the attention's settings
            top["attn"] = AttentionConfig.from_dict({**dataclasses.asdict(self.attn), **top["attn"]})
        block = changes.pop("block", self.block)
        if isinstance(block, dict):
            block = block_config(self.block, **block)
        elif isinstance(block, str) and block == self.block.kind:
            block = self.block
        return dataclasses.replace(self, block=block_config(block, **changes), **top)

    def to_dict(self) -> dict[str, Any]:
        """The nested JSON-able form: {"d_model", ..., "block": {"kind", ..., "ssp": {...}}}."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["block"] = self.block.to_dict()
        if self.attn is None:  # files of models without attention stay readable by versions before hybrids
            del out["attn"], out["attn_layer_idx"]
        else:
            out["attn"] = dataclasses.asdict(self.attn)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SequenceModelConfig":
        """The config of a dict that `to_dict` wrote, or of the flat dict of seqssm versions before the typed config."""
        data = dict(data)
        if "d_model" not in data:
            raise ValueError(f"a model config needs d_model; got the keys {sorted(data)}")
        block = data.pop("block", {})
        if not isinstance(block, dict):  # the flat form: block / SSP fields beside the model's own
            block = _flat_block_fields(block, data)
        own = {f.name for f in dataclasses.fields(cls)} - {"block"}
        unknown = sorted(set(data) - own)
        if unknown:
            raise ValueError(f"unknown model config entries {unknown}; a SequenceModelConfig has {sorted(own)} and "
                             "`block`")
        return cls(block=block_config(**block), **data)


def _flat_block_fields(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """Pop the block and SSP entries out of a flat config dict `data` of kind `kind` (dropping the Mamba-only
    entries that the flat form stored, unused, for Simple blocks too); returns them with the kind."""
    own = {f.name for f in dataclasses.fields(SequenceModelConfig)}
    fields = {k: data.pop(k) for k in list(data) if k not in own}
    if kind == SimpleBlockConfig.kind:
        mamba_only = {f.name for f in dataclasses.fields(MambaBlockConfig)} - {
            f.name for f in dataclasses.fields(SimpleBlockConfig)}
        fields = {k: v for k, v in fields.items() if k not in mamba_only}
    return {"kind": kind, **fields}
