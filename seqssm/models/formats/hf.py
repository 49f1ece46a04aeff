"""Hugging Face transformers `MambaForCausalLM` and `Mamba2ForCausalLM` folders: config.json with model_type "mamba"
or "mamba2", model.safetensors (sharded or not). Every setting maps onto a field of `SequenceModelConfig` or is
refused by name."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from torch import nn

from seqssm.blocks.config import Mamba2BlockConfig, MambaBlockConfig
from seqssm.layers.registry import build_layer
from seqssm.models.config import SequenceModelConfig
from seqssm.models.formats.files import CONFIG_FILE, SAFETENSORS_FILE, write_safetensors
from seqssm.models.formats.mamba_lm import (
    external_keys, integer, lm_config, mamba1_block, mamba2_block, map_lm_state_dict, refuse
)

NAME = "hf"
TOP_KEYS = {
    "embedding.weight": "backbone.embeddings.weight",
    "backbone.norm_f.weight": "backbone.norm_f.weight",
    "head.weight": "lm_head.weight",
}
# transformers' Mamba2Config defaults
MAMBA2_DEFAULTS = {
    "vocab_size": 32768, "hidden_size": 4096, "state_size": 128, "num_hidden_layers": 64, "num_heads": 128,
    "head_dim": 64, "n_groups": 8, "chunk_size": 256, "layer_norm_epsilon": 1e-5, "expand": 2, "conv_kernel": 4,
    "use_bias": False, "use_conv_bias": True, "hidden_act": "silu", "residual_in_fp32": True, "rms_norm": True,
    "time_step_limit": [0.0, math.inf], "tie_word_embeddings": False,
}
# transformers' MambaConfig defaults: what transformers assumes for a key a config.json leaves out
DEFAULTS = {
    "vocab_size": 50280, "hidden_size": 768, "state_size": 16, "num_hidden_layers": 32,
    "layer_norm_epsilon": 1e-5, "expand": 2, "conv_kernel": 4, "use_bias": False, "use_conv_bias": True,
    "hidden_act": "silu", "residual_in_fp32": True, "time_step_rank": "auto", "tie_word_embeddings": True,
}


def detect(raw: dict, path: Path) -> bool:
    """Whether config.json `raw` (at `path`) is a transformers config; one of another model type is refused."""
    if "model_type" not in raw:
        return False
    if raw["model_type"] not in ("mamba", "mamba2"):
        refuse(path, "model_type", raw["model_type"], "seqssm reads Hugging Face 'mamba' and 'mamba2' models")
    return True


def read_config(raw: dict, path: Path) -> SequenceModelConfig:
    """The SequenceModelConfig equivalent to a transformers MambaConfig or Mamba2Config dict."""
    if raw["model_type"] == "mamba2":
        return _read_mamba2(raw, path)
    c = {**DEFAULTS, **raw}
    if c["hidden_act"] != "silu":
        refuse(path, "hidden_act", c["hidden_act"], "the Mamba block gates with SiLU")
    for key in ("hidden_size", "num_hidden_layers", "vocab_size", "state_size", "conv_kernel"):
        integer(path, key, c[key])  # checked under the file's own names, before lm_config names them seqssm's way
    expand = integer(path, "expand", c["expand"])
    inner = c.get("intermediate_size")
    if inner is not None and inner != expand * c["hidden_size"]:
        refuse(path, "intermediate_size", inner, f"seqssm's inner width is expand * hidden_size = "
               f"{expand * c['hidden_size']}")
    block = mamba1_block(path, d_state=c["state_size"], expand=expand, d_conv=c["conv_kernel"],
                         conv_bias=c["use_conv_bias"], proj_bias=c["use_bias"], dt_rank=c["time_step_rank"],
                         rms_norm=True, norm_eps=c["layer_norm_epsilon"], residual_in_fp32=c["residual_in_fp32"])
    return lm_config(path, block, d_model=c["hidden_size"], n_layers=c["num_hidden_layers"],
                     vocab_size=c["vocab_size"], tie_embeddings=c["tie_word_embeddings"], pad_vocab_size_multiple=1)


def _json_float(value):
    """A number of a transformers config.json: it writes infinities as {"__float__": "Infinity"}."""
    if isinstance(value, dict) and set(value) == {"__float__"}:
        return float(value["__float__"])
    return value


def _read_mamba2(raw: dict, path: Path) -> SequenceModelConfig:
    """The SequenceModelConfig equivalent to a transformers Mamba2Config dict."""
    c = {**MAMBA2_DEFAULTS, **raw}
    if c["hidden_act"] != "silu":
        refuse(path, "hidden_act", c["hidden_act"], "the Mamba-2 block gates with SiLU")
    if not c["rms_norm"]:
        refuse(path, "rms_norm", c["rms_norm"], "the Mamba-2 block normalises its gate with RMSNorm")
    if [_json_float(v) for v in c["time_step_limit"]] != [0.0, math.inf]:
        refuse(path, "time_step_limit", c["time_step_limit"], "seqssm's SSD does not clamp Δ")
    for key in ("hidden_size", "num_hidden_layers", "vocab_size", "state_size", "conv_kernel", "num_heads"):
        integer(path, key, c[key])
    expand = integer(path, "expand", c["expand"])
    if c["num_heads"] * c["head_dim"] != expand * c["hidden_size"]:
        refuse(path, "num_heads", c["num_heads"], f"num_heads * head_dim must be expand * hidden_size = "
               f"{expand * c['hidden_size']}")
    block = mamba2_block(path, d_state=c["state_size"], head_dim=c["head_dim"], n_groups=c["n_groups"],
                         chunk_size=c["chunk_size"], expand=expand, d_conv=c["conv_kernel"],
                         conv_bias=c["use_conv_bias"], proj_bias=c["use_bias"], norm_eps=c["layer_norm_epsilon"],
                         residual_in_fp32=c["residual_in_fp32"])
    return lm_config(path, block, d_model=c["hidden_size"], n_layers=c["num_hidden_layers"],
                     vocab_size=c["vocab_size"], tie_embeddings=c["tie_word_embeddings"], pad_vocab_size_multiple=1)


def map_state_dict(own: dict, config: SequenceModelConfig, tensors: dict, origin: dict, folder: Path):
    """transformers-keyed tensors -> the SequenceModel state dict."""
    return map_lm_state_dict(own, config, tensors, origin, folder, TOP_KEYS)


def _common_refusals(where, config: SequenceModelConfig) -> None:
    """Refuse what neither MambaForCausalLM nor Mamba2ForCausalLM holds: a classifier, continuous inputs, attention
    layers, two branches per block."""
    for key, why in [("bidirectional", "Hugging Face's Mamba models are causal"),
                     ("placebo", "Hugging Face's Mamba models have one conv / SSM branch per block")]:
        if getattr(config.block, key):
            refuse(where, key, True, why)
    if config.attn_layer_idx:
        refuse(where, "attn_layer_idx", config.attn_layer_idx, "Hugging Face's Mamba models hold no attention layers; "
               "save a hybrid in format 'seqssm'")
    for key, value, why in [("n_classes", config.n_classes, "a language-model head, not a classifier"),
                            ("pooling", config.pooling, "a language-model head, not a pooled one"),
                            ("d_input", config.d_input, "token ids as inputs")]:
        if value is not None:
            refuse(where, key, value, f"Hugging Face's Mamba models have {why}")


def _mamba2_config(where, config: SequenceModelConfig) -> dict:
    """The transformers Mamba2Config dict of a SequenceModel config of Mamba-2 blocks."""
    block, ssm = config.block, config.block.ssp
    if not block.rms_norm:
        refuse(where, "rms_norm", block.rms_norm, "Hugging Face Mamba-2 normalises with RMSNorm")
    _common_refusals(where, config)
    unknown = sorted(set(ssm.layer_kwargs) - {"head_dim", "n_groups", "chunk_size"})
    if unknown:
        refuse(where, f"ssp.layer_kwargs.{unknown[0]}", ssm.layer_kwargs[unknown[0]],
               "Mamba2Config has no such setting")
    # the layer itself states the defaults of what layer_kwargs leaves out
    layer = build_layer("ssd", block.expand * config.d_model, ssm.d_state, project=False, **ssm.layer_kwargs)
    multiple = config.pad_vocab_size_multiple
    return {
        "architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2",
        "vocab_size": math.ceil(config.vocab_size / multiple) * multiple,
        "hidden_size": config.d_model, "num_hidden_layers": config.n_layers, "state_size": layer.d_state,
        "num_heads": layer.heads, "head_dim": layer.head_dim, "n_groups": layer.n_groups,
        "chunk_size": layer.chunk_size, "expand": block.expand, "conv_kernel": block.d_conv,
        "use_bias": block.proj_bias, "use_conv_bias": block.conv_bias, "hidden_act": "silu", "rms_norm": True,
        "layer_norm_epsilon": block.norm_eps, "residual_in_fp32": block.residual_in_fp32,
        "tie_word_embeddings": config.tie_embeddings,
    }


def hf_config(config: SequenceModelConfig) -> dict:
    """The transformers MambaConfig / Mamba2Config dict of a SequenceModel config; refuses what MambaForCausalLM /
    Mamba2ForCausalLM cannot hold."""
    where = "save_pretrained(format='hf')"
    block, ssp = config.block, config.block.ssp
    if isinstance(block, Mamba2BlockConfig):
        return _mamba2_config(where, config)
    if not isinstance(block, MambaBlockConfig):
        refuse(where, "block", block.kind, "Hugging Face Mamba holds Mamba and Mamba-2 blocks only")
    refusals = [
        ("ssp", ssp.layer, ssp.layer != "s6", "Hugging Face Mamba holds S6 cores only, not S4/S4D"),
        ("rope", ssp.rope, ssp.rope is not None, "Hugging Face Mamba has no rotary embeddings"),
        ("rms_norm", block.rms_norm, not block.rms_norm, "Hugging Face Mamba normalises with RMSNorm"),
    ]
    for key, value, bad, why in refusals:
        if bad:
            refuse(where, key, value, why)
    _common_refusals(where, config)
    d_model, multiple = config.d_model, config.pad_vocab_size_multiple
    dt_rank = math.ceil(d_model / 16) if block.dt_rank == "auto" else block.dt_rank
    return {
        "architectures": ["MambaForCausalLM"], "model_type": "mamba",
        # transformers has no vocabulary padding: its vocab_size is the padded embedding size
        "vocab_size": math.ceil(config.vocab_size / multiple) * multiple,
        "hidden_size": d_model, "num_hidden_layers": config.n_layers, "state_size": ssp.d_state,
        "expand": block.expand, "intermediate_size": block.expand * d_model, "conv_kernel": block.d_conv,
        "use_bias": block.proj_bias, "use_conv_bias": block.conv_bias, "hidden_act": "silu",
        "time_step_rank": dt_rank, "layer_norm_epsilon": block.norm_eps,
        "residual_in_fp32": block.residual_in_fp32, "tie_word_embeddings": config.tie_embeddings,
    }


def check_writable(config: SequenceModelConfig) -> None:
    """Raise PretrainedFormatError for what a Hugging Face Mamba cannot hold."""
    hf_config(config)


def write(model: nn.Module, folder: Path) -> None:
    """Write `model` into `folder` as files that transformers' MambaForCausalLM (Mamba2ForCausalLM for Mamba-2
    blocks).from_pretrained loads."""
    config = hf_config(model.config)
    own = model.state_dict()
    names = external_keys(own, TOP_KEYS, model.config)
    dtype: torch.dtype = own["embedding.weight"].dtype
    config["dtype"] = str(dtype).removeprefix("torch.")
    tensors = {names[k]: v.detach().cpu().contiguous().clone() for k, v in own.items()
               if not (k == "head.weight" and model.config.tie_embeddings)}  # transformers re-ties the head
    (Path(folder) / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    write_safetensors(tensors, Path(folder) / SAFETENSORS_FILE, {"format": "pt"})  # transformers checks "pt"
