"""What the Hugging Face and mamba_ssm adapters share: both hold a Mamba-1 or Mamba-2 language model under the
same per-layer tensor names (`LAYER_KEYS`; mamba_ssm's attention layers of hybrids too), and their settings map onto the same `SequenceModelConfig` (`lm_config`
around `mamba1_block` or `mamba2_block`)."""

from __future__ import annotations

from pathlib import Path

import torch

from seqssm.blocks.config import AttentionConfig, BlockConfig, Mamba2BlockConfig, MambaBlockConfig, SSPConfig
from seqssm.errors import ConfigError, PretrainedFormatError
from seqssm.models.config import SequenceModelConfig
from seqssm.models.formats.files import take_tensors

# block kind -> (seqssm key under `backbone.layers.{i}.` -> key under `backbone.layers.{i}.` in both other libraries)
MAMBA1_LAYER_KEYS = {
    "norm.weight": "norm.weight",
    "norm.bias": "norm.bias",  # LayerNorm (mamba_ssm with rms_norm false)
    "in_proj.weight": "mixer.in_proj.weight",
    "in_proj.bias": "mixer.in_proj.bias",
    "branches.0.conv1d.weight": "mixer.conv1d.weight",
    "branches.0.conv1d.bias": "mixer.conv1d.bias",
    "branches.0.ssp.x_proj.weight": "mixer.x_proj.weight",
    "branches.0.ssp.dt_proj.weight": "mixer.dt_proj.weight",
    "branches.0.ssp.dt_proj.bias": "mixer.dt_proj.bias",
    "branches.0.ssp.A_log": "mixer.A_log",
    "branches.0.ssp.D": "mixer.D",
    "out_proj.weight": "mixer.out_proj.weight",
    "out_proj.bias": "mixer.out_proj.bias",
}
MAMBA2_LAYER_KEYS = {
    "norm.weight": "norm.weight",
    "norm.bias": "norm.bias",
    "in_proj.weight": "mixer.in_proj.weight",
    "in_proj.bias": "mixer.in_proj.bias",
    "conv1d.weight": "mixer.conv1d.weight",
    "conv1d.bias": "mixer.conv1d.bias",
    "ssm.dt_bias": "mixer.dt_bias",
    "ssm.A_log": "mixer.A_log",
    "ssm.D": "mixer.D",
    "gated_norm.weight": "mixer.norm.weight",
    "out_proj.weight": "mixer.out_proj.weight",
    "out_proj.bias": "mixer.out_proj.bias",
}
# the attention layers of hybrid models (mamba_ssm's MHA; seqssm's AttentionBlock)
ATTENTION_LAYER_KEYS = {
    "norm.weight": "norm.weight",
    "norm.bias": "norm.bias",
    "in_proj.weight": "mixer.in_proj.weight",
    "in_proj.bias": "mixer.in_proj.bias",
    "conv1d.weight": "mixer.conv1d.weight",
    "conv1d.bias": "mixer.conv1d.bias",
    "out_proj.weight": "mixer.out_proj.weight",
    "out_proj.bias": "mixer.out_proj.bias",
}
LAYER_KEYS = {"mamba": MAMBA1_LAYER_KEYS, "mamba2": MAMBA2_LAYER_KEYS, "attention": ATTENTION_LAYER_KEYS}
LAYER_PREFIX = "backbone.layers."


def refuse(where, key: str, value, why: str):
    """Raise the PretrainedFormatError for a setting seqssm cannot hold."""
    raise PretrainedFormatError(f"{where}: {key}={value!r} is not supported: {why}")


def integer(where, key: str, value) -> int:
    """`value` as an int, refused unless it is a positive whole number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 1:
        refuse(where, key, value, "seqssm's Mamba block needs a positive integer here")
    return int(value)


def mamba1_block(where, *, d_state, expand, d_conv, conv_bias, proj_bias, dt_rank, rms_norm, norm_eps,
                 residual_in_fp32) -> MambaBlockConfig:
    """The block of a Mamba-1 language model, integer settings checked."""
    if dt_rank != "auto":
        dt_rank = integer(where, "dt_rank", dt_rank)
    return MambaBlockConfig(
        SSPConfig("s6", d_state=integer(where, "d_state", d_state)), expand=integer(where, "expand", expand),
        d_conv=integer(where, "d_conv", d_conv), conv_bias=bool(conv_bias), proj_bias=bool(proj_bias),
        dt_rank=dt_rank, dropout=0.0, rms_norm=bool(rms_norm), norm_eps=float(norm_eps),
        residual_in_fp32=bool(residual_in_fp32),
    )


def mamba2_block(where, *, d_state, head_dim, n_groups, chunk_size, expand, d_conv, conv_bias, proj_bias, norm_eps,
                 residual_in_fp32) -> Mamba2BlockConfig:
    """The block of a Mamba-2 language model, integer settings checked."""
    ssd = {"head_dim": integer(where, "head_dim", head_dim), "n_groups": integer(where, "n_groups", n_groups),
           "chunk_size": integer(where, "chunk_size", chunk_size)}
    return Mamba2BlockConfig(
        SSPConfig("ssd", d_state=integer(where, "d_state", d_state), layer_kwargs=ssd),
        expand=integer(where, "expand", expand), d_conv=integer(where, "d_conv", d_conv), conv_bias=bool(conv_bias),
        proj_bias=bool(proj_bias), dropout=0.0, rms_norm=True, norm_eps=float(norm_eps),
        residual_in_fp32=bool(residual_in_fp32),
    )


def lm_config(where, block: BlockConfig, *, d_model, n_layers, vocab_size, tie_embeddings,
              pad_vocab_size_multiple, attn_layer_idx=(), attn: AttentionConfig | None = None) -> SequenceModelConfig:
    """The config of a language model of `block`s (attention layers of `attn` at attn_layer_idx), integer settings
    checked."""
    try:
        return SequenceModelConfig(
            d_model=integer(where, "d_model", d_model), n_layers=integer(where, "n_layers", n_layers), block=block,
            vocab_size=integer(where, "vocab_size", vocab_size), n_classes=None, pooling=None,
            tie_embeddings=bool(tie_embeddings),
            pad_vocab_size_multiple=integer(where, "pad_vocab_size_multiple", pad_vocab_size_multiple),
            attn_layer_idx=list(attn_layer_idx), attn=attn,
        )
    except ConfigError as err:  # e.g. attn_layer_idx past the last layer
        raise PretrainedFormatError(f"{where}: {err}") from err


def external_keys(seqssm_keys, top_keys: dict[str, str], config: SequenceModelConfig) -> dict[str, str]:
    """seqssm state-dict key -> the key a library with the outer names `top_keys` stores the same tensor under, for
    a model of `config` (Mamba or Mamba-2 blocks, attention layers at its attn_layer_idx)."""
    out = {}
    for key in seqssm_keys:
        if key.startswith(LAYER_PREFIX):
            index, rest = key[len(LAYER_PREFIX):].split(".", 1)
            kind = "attention" if int(index) in config.attn_layer_idx else config.block.kind
            out[key] = f"{LAYER_PREFIX}{index}.{LAYER_KEYS[kind][rest]}"
        else:
            out[key] = top_keys[key]
    return out


def map_lm_state_dict(own: dict[str, torch.Tensor], config: SequenceModelConfig, tensors: dict, origin: dict,
                      folder: Path, top_keys: dict[str, str]) -> dict[str, torch.Tensor]:
    """A library's Mamba or Mamba-2 tensors -> the state dict of a SequenceModel whose state is `own` (see `take_tensors`)."""
    return take_tensors(own, external_keys(own, top_keys, config), tensors, origin, folder,
                        tied_head="head.weight" if config.tie_embeddings else None)
