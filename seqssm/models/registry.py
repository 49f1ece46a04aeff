"""Named models of the Ulbaek 2024 thesis: `model_config("mamba-s6-bi", vocab_size=256, n_classes=2)`, the config
that `seqssm.models.build` builds the SequenceModel of. Configs only, so that reading an old task checkpoint
(`seqssm.models.reading`) can rebuild its config below SequenceModel.

A name is <block>-<layer>[-variant ...]: a block of `seqssm.blocks.BLOCKS` around a layer of
`seqssm.layers.LAYERS`. Ulbaek 2024's base names are simple-s4, simple-s4d, mamba-s4, mamba-s4d,
mamba-s6 (BASE_NAMES); any other registered layer builds the same way, and mamba2-ssd is the Mamba-2 block
(Dao & Gu 2024) around its SSD layer. Variant suffixes, combinable as
one of {-bi, -placebo, -sm} plus -rope: -bi bidirectional (fig. 16), -placebo the same parameters
without the flips, -sm speed matched (wider; Mamba blocks only), -rope RoPE before every SSP (not Mamba-2) (defaults: base 10000,
fixed θ, no normalisation, all inputs of the SSP; change them with rope={...}).
Defaults follow Ulbaek 2024 thesis, tables 2, 3 and 6: 6 layers, dropout 0.1; Mamba d=116, N=16; Simple d=170, N=64
(the block configs' own defaults give N; see `seqssm.blocks.config`).
"""

from __future__ import annotations

from seqssm.blocks.config import block_config
from seqssm.blocks.stack import BLOCKS
from seqssm.layers.registry import LAYERS
from seqssm.models.config import SequenceModelConfig

BASE_NAMES = ("simple-s4", "simple-s4d", "mamba-s4", "mamba-s4d", "mamba-s6")  # Ulbaek 2024's models
VARIANTS = ("bi", "placebo", "sm", "rope")

# Table 2; Mamba-2 has no thesis width: 128 makes d_inner 256, four of the SSD's 64-channel heads
BASE_WIDTH = {"mamba": 116, "simple": 170, "mamba2": 128}
# Table 6 (placebo shares the bidirectional width). Table 6 has no Mamba-s4 entries; S4 with N=16
# holds 4N+2 = 66 parameters per channel, as many as S6 at d=116, so its parameter-matched
# bidirectional width is S6's. Speed matching was measured, not derived: none is given for S4.
VARIANT_WIDTH = {
    ("s4d", "bi"): 108, ("s6", "bi"): 107, ("s4", "bi"): 107,
    ("s4d", "sm"): 140, ("s6", "sm"): 170,
}

# Trainable parameter counts the Ulbaek 2024 thesis reports, to check ours against (scripts/param_table.py).
# Table 3: Cifar10-numerical (d_input 3, 10 classes), whole model and inside the SSPs.
THESIS_TABLE3 = {
    "mamba-s6": (587_000, 95_000), "mamba-s4d": (564_000, 72_000), "mamba-s4": (587_000, 95_000),
    "simple-s4d": (551_000, 200_000), "simple-s4": (616_000, 266_000),
}
# Table 6: IMDB (token ids, 2 classes), embedding and classifier included. The Ulbaek 2024 thesis read IMDB with S4's
# loader, whose character vocabulary (`seqssm.data.CharVocabulary`) S4's dataset config sizes at 135 for min_freq 15:
# the embedding these counts hold (the exact size is the data's: the Ulbaek 2024 thesis recipes build it from the
# training split).
THESIS_TABLE6_VOCAB_SIZE = 135
THESIS_TABLE6 = {
    "mamba-s4d": 575_000, "mamba-s4d-bi": 576_000, "mamba-s4d-sm": 816_000,
    "mamba-s6": 598_000, "mamba-s6-bi": 597_000, "mamba-s6-sm": 1_200_000,
}


def parse_name(name: str) -> tuple[str, str, tuple[str, ...]]:
    """"mamba-s6-bi-rope" -> ("mamba", "s6", ("bi", "rope"))."""
    parts = name.lower().split("-")
    block, ssp, variants = parts[0], (parts[1] if len(parts) > 1 else ""), tuple(parts[2:])
    if block not in BLOCKS or ssp not in LAYERS:
        raise ValueError(f"unknown model {name!r}; names are <block>-<layer> plus suffixes from {VARIANTS}, with "
                         f"block one of {', '.join(BLOCKS)} and layer one of {', '.join(LAYERS)}")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or len(set(variants)) != len(variants):
        raise ValueError(f"bad variant suffixes {variants} in {name!r}; each at most once, from {VARIANTS}")
    if len({"bi", "placebo", "sm"} & set(variants)) > 1:
        raise ValueError(f"{name!r}: -bi, -placebo and -sm exclude each other")
    return block, ssp, variants


def model_config(name: str, *, vocab_size=None, d_input=None, n_classes=None, **overrides) -> SequenceModelConfig:
    """The SequenceModelConfig that `build(name, ...)` uses; overrides as `SequenceModelConfig.replace` takes them."""
    block, ssp, variants = parse_name(name)
    width = BASE_WIDTH[block]
    shape = next((v for v in variants if v in ("bi", "placebo", "sm")), None)
    variant = {}
    if shape is not None:
        if block not in ("mamba", "mamba2") or (block, shape) == ("mamba2", "sm"):
            raise ValueError(f"{name!r}: -{shape} is a Mamba-block variant (Ulbaek 2024 thesis, 15.2); Mamba-2 blocks "
                             "take -bi and -placebo")
        key = (ssp, "bi" if shape == "placebo" else shape)
        # Mamba-2 has no thesis widths: its two-branch forms keep the base width (the second conv and SSD add 2% of
        # the parameters at d_model 128)
        if block == "mamba" and key not in VARIANT_WIDTH and "d_model" not in overrides:
            raise ValueError(f"{name!r}: the Ulbaek 2024 thesis gives no {shape} width for Mamba-{ssp}; "
                             "pass d_model=...")
        width = VARIANT_WIDTH.get(key, width)
        variant = {"bidirectional": shape == "bi", "placebo": shape == "placebo"}
    config = SequenceModelConfig(
        d_model=width, n_layers=6, vocab_size=vocab_size, d_input=d_input, n_classes=n_classes,
        pooling="mean" if n_classes is not None else None,
        block=block_config(block, ssp=ssp, dropout=0.1, rope={} if "rope" in variants else None, **variant),
    )
    return config.replace(**overrides)

