"""mamba_ssm `MambaLMHeadModel` folders (Mamba1 or Mamba2 mixers, hybrids with attention layers): config.json with d_model / n_layer / vocab_size /
ssm_cfg, and
pytorch_model.bin (read with weights_only=True) or safetensors. Read only: `seqssm convert --to hf` writes a
folder both libraries' users load."""

from __future__ import annotations

from pathlib import Path

from torch import nn

from seqssm.blocks.config import AttentionConfig
from seqssm.errors import PretrainedFormatError
from seqssm.models.config import SequenceModelConfig
from seqssm.models.formats.mamba_lm import integer, lm_config, mamba1_block, mamba2_block, map_lm_state_dict, refuse

NAME = "mamba_ssm"
TOP_KEYS = {
    "embedding.weight": "backbone.embedding.weight",
    "backbone.norm_f.weight": "backbone.norm_f.weight",
    "backbone.norm_f.bias": "backbone.norm_f.bias",
    "head.weight": "lm_head.weight",
}
# mamba_ssm's MambaConfig / MixerModel / Mamba (v1) defaults
DEFAULTS = {
    "d_intermediate": 0, "ssm_cfg": {}, "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": True,
    "residual_in_fp32": True, "fused_add_norm": True, "pad_vocab_size_multiple": 8, "tie_embeddings": True,
    "norm_epsilon": 1e-5,
}
MAMBA1_DEFAULTS = {"d_state": 16, "d_conv": 4, "expand": 2, "dt_rank": "auto", "conv_bias": True, "bias": False}
# Settings that only choose an initialisation or a kernel: a trained model computes the same without them.
MAMBA1_NO_EFFECT = {"dt_min", "dt_max", "dt_init", "dt_scale", "dt_init_floor", "use_fast_path", "layer"}
# mamba_ssm's Mamba2 defaults, and the settings seqssm's Mamba-2 block computes with only at these values
MAMBA2_DEFAULTS = {"d_state": 128, "d_conv": 4, "expand": 2, "headdim": 64, "ngroups": 1, "chunk_size": 256,
                   "conv_bias": True, "bias": False}
MAMBA2_FIXED = {"rmsnorm": True, "norm_before_gate": False, "D_has_hdim": False, "d_ssm": None,
                "activation": "silu", "learnable_init_states": False, "dt_limit": [0.0, float("inf")]}
MAMBA2_NO_EFFECT = {"dt_min", "dt_max", "dt_init_floor", "A_init_range", "use_mem_eff_path", "layer", "process_group",
                    "sequence_parallel"}
# mamba_ssm's MHA settings (attn_cfg) -> AttentionConfig fields; causal and the non-interleaved rotary are the only
# values seqssm's attention computes with
ATTENTION_NAMES = {"num_heads": "n_heads", "num_heads_kv": "n_kv_heads", "head_dim": "head_dim",
                   "rotary_emb_dim": "rotary_dim", "rotary_emb_base": "rotary_base", "qkv_proj_bias": "qkv_bias",
                   "out_proj_bias": "out_bias", "softmax_scale": "softmax_scale", "d_conv": "d_conv",
                   "mlp_dim": "mlp_dim"}
ATTENTION_FIXED = {"causal": True, "rotary_emb_interleaved": False}
NO_EFFECT = {"fused_add_norm", "initializer_cfg"}
REQUIRED = {"d_model", "n_layer", "vocab_size"}


def detect(raw: dict, path: Path) -> bool:
    """Whether config.json `raw` is a mamba_ssm MambaConfig."""
    return REQUIRED <= raw.keys()


def read_config(raw: dict, path: Path) -> SequenceModelConfig:
    """The SequenceModelConfig equivalent to a mamba_ssm MambaConfig dict (Mamba1 or Mamba2 mixers, attention layers
    at attn_layer_idx; no MLP layers)."""
    unknown = sorted(set(raw) - REQUIRED - DEFAULTS.keys() - NO_EFFECT)
    if unknown:
        refuse(path, unknown[0], raw[unknown[0]], "not a mamba_ssm MambaConfig setting seqssm knows")
    c = {**DEFAULTS, **raw}
    if c["d_intermediate"]:
        refuse(path, "d_intermediate", c["d_intermediate"], "MLP layers between the mixers")
    ssm = c["ssm_cfg"] or {}
    if not isinstance(ssm, dict):
        refuse(path, "ssm_cfg", ssm, "expected a JSON object of Mamba-1 or Mamba-2 settings")
    layer = ssm.get("layer", "Mamba1")
    if layer not in ("Mamba1", "Mamba2"):
        refuse(path, "ssm_cfg.layer", layer, "seqssm reads Mamba1 and Mamba2 mixers")
    for key in ("n_layer", "vocab_size", "pad_vocab_size_multiple"):
        integer(path, key, c[key])  # checked under the file's own names, before lm_config names them seqssm's way
    block = _mamba2_block(ssm, path, c) if layer == "Mamba2" else _mamba1_block(ssm, path, c)
    attn = _attention(c["attn_cfg"], path) if c["attn_layer_idx"] else None
    return lm_config(path, block, d_model=c["d_model"], n_layers=c["n_layer"], vocab_size=c["vocab_size"],
                     tie_embeddings=c["tie_embeddings"], pad_vocab_size_multiple=c["pad_vocab_size_multiple"],
                     attn_layer_idx=c["attn_layer_idx"], attn=attn)


def _attention(cfg, path: Path) -> AttentionConfig:
    """The AttentionConfig of the attn_cfg `cfg` of a hybrid model's attention layers (mamba_ssm's MHA)."""
    if not isinstance(cfg, dict) or "num_heads" not in cfg:
        refuse(path, "attn_cfg", cfg, "a hybrid model's attn_cfg is a JSON object with at least num_heads")
    unknown = sorted(set(cfg) - ATTENTION_NAMES.keys() - ATTENTION_FIXED.keys())
    if unknown:
        refuse(path, f"attn_cfg.{unknown[0]}", cfg[unknown[0]], "not an attention setting seqssm knows")
    for key, value in ATTENTION_FIXED.items():
        if cfg.get(key, value) != value:
            refuse(path, f"attn_cfg.{key}", cfg[key], f"seqssm's attention layers compute with {key}={value!r} only")
    settings = {ATTENTION_NAMES[k]: v for k, v in cfg.items() if k in ATTENTION_NAMES}
    # MHA rounds its MLP width up to a multiple of 256 (its in_proj holds that many channels)
    settings["mlp_dim"] = -(-int(settings.get("mlp_dim", 0)) // 256) * 256
    try:
        return AttentionConfig(**settings)
    except (TypeError, ValueError) as err:
        raise PretrainedFormatError(f"{path}: attn_cfg {cfg}: {err}") from err


def _mamba1_block(ssm: dict, path: Path, c: dict):
    """The block of the Mamba1 mixers of ssm_cfg `ssm` (the model's settings `c`)."""
    unknown = sorted(set(ssm) - MAMBA1_DEFAULTS.keys() - MAMBA1_NO_EFFECT)
    if unknown:
        refuse(path, f"ssm_cfg.{unknown[0]}", ssm[unknown[0]], "not a Mamba-1 setting seqssm knows")
    s = {**MAMBA1_DEFAULTS, **ssm}
    for key in ("d_state", "d_conv", "expand"):
        integer(path, f"ssm_cfg.{key}", s[key])
    return mamba1_block(path, d_state=s["d_state"], expand=s["expand"], d_conv=s["d_conv"], conv_bias=s["conv_bias"],
                        proj_bias=s["bias"], dt_rank=s["dt_rank"], rms_norm=c["rms_norm"], norm_eps=c["norm_epsilon"],
                        residual_in_fp32=c["residual_in_fp32"])


def _mamba2_block(ssm: dict, path: Path, c: dict):
    """The block of the Mamba2 mixers of ssm_cfg `ssm` (the model's settings `c`)."""
    unknown = sorted(set(ssm) - MAMBA2_DEFAULTS.keys() - MAMBA2_FIXED.keys() - MAMBA2_NO_EFFECT)
    if unknown:
        refuse(path, f"ssm_cfg.{unknown[0]}", ssm[unknown[0]], "not a Mamba-2 setting seqssm knows")
    for key, value in MAMBA2_FIXED.items():
        given = ssm.get(key, value)
        if (list(given) if isinstance(given, (list, tuple)) else given) != value:
            refuse(path, f"ssm_cfg.{key}", given, f"seqssm's Mamba-2 block computes with {key}={value!r} only")
    if not c["rms_norm"]:
        refuse(path, "rms_norm", c["rms_norm"], "seqssm's Mamba-2 block normalises with RMSNorm")
    s = {**MAMBA2_DEFAULTS, **ssm}
    return mamba2_block(path, d_state=s["d_state"], head_dim=s["headdim"], n_groups=s["ngroups"],
                        chunk_size=s["chunk_size"], expand=s["expand"], d_conv=s["d_conv"], conv_bias=s["conv_bias"],
                        proj_bias=s["bias"], norm_eps=c["norm_epsilon"], residual_in_fp32=c["residual_in_fp32"])


def map_state_dict(own: dict, config: SequenceModelConfig, tensors: dict, origin: dict, folder: Path):
    """mamba_ssm-keyed tensors -> the SequenceModel state dict."""
    return map_lm_state_dict(own, config, tensors, origin, folder, TOP_KEYS)


def check_writable(config: SequenceModelConfig) -> None:
    """seqssm writes no mamba_ssm folders: always refused, naming the formats it writes."""
    raise PretrainedFormatError("seqssm does not write mamba_ssm folders; write format 'hf' (which mamba_ssm "
                                "users convert) or 'seqssm'")


def write(model: nn.Module, folder: Path) -> None:
    """Refused (`check_writable`)."""
    check_writable(model.config)
