"""Hugging Face transformers `MambaForCausalLM` folders: config.json with model_type "mamba", model.safetensors
(sharded or not). Every setting maps onto a field of `SequenceModelConfig` or is refused by name."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from torch import nn

from seqssm.blocks.config import MambaBlockConfig
from seqssm.models.config import SequenceModelConfig
from seqssm.models.formats.files import CONFIG_FILE, SAFETENSORS_FILE, write_safetensors
from seqssm.models.formats.mamba_lm import external_keys, integer, lm_config, map_lm_state_dict, refuse

NAME = "hf"
TOP_KEYS = {
    "embedding.weight": "backbone.embeddings.weight",
    "backbone.norm_f.weight": "backbone.norm_f.weight",
    "head.weight": "lm_head.weight",
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
    if raw["model_type"] != "mamba":
        refuse(path, "model_type", raw["model_type"], "seqssm reads Hugging Face 'mamba' (Mamba-1) models")
    return True


def read_config(raw: dict, path: Path) -> SequenceModelConfig:
    """The SequenceModelConfig equivalent to a transformers MambaConfig dict."""
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
    return lm_config(
        path, d_model=c["hidden_size"], n_layers=c["num_hidden_layers"], vocab_size=c["vocab_size"],
        d_state=c["state_size"], expand=expand, d_conv=c["conv_kernel"], conv_bias=c["use_conv_bias"],
        proj_bias=c["use_bias"], dt_rank=c["time_step_rank"], rms_norm=True, norm_eps=c["layer_norm_epsilon"],
        residual_in_fp32=c["residual_in_fp32"], tie_embeddings=c["tie_word_embeddings"], pad_vocab_size_multiple=1,
    )


def map_state_dict(own: dict, config: SequenceModelConfig, tensors: dict, origin: dict, folder: Path):
    """transformers-keyed tensors -> the SequenceModel state dict."""
    return map_lm_state_dict(own, config, tensors, origin, folder, TOP_KEYS)


def hf_config(config: SequenceModelConfig) -> dict:
    """The transformers MambaConfig dict of a SequenceModel config; refuses what MambaForCausalLM cannot hold."""
    where = "save_pretrained(format='hf')"
    block, ssp = config.block, config.block.ssp
    if not isinstance(block, MambaBlockConfig):
        refuse(where, "block", block.kind, "Hugging Face Mamba holds Mamba blocks only")
    refusals = [
        ("ssp", ssp.layer, ssp.layer != "s6", "Hugging Face Mamba holds S6 cores only, not S4/S4D"),
        ("bidirectional", block.bidirectional, block.bidirectional, "Hugging Face Mamba is causal"),
        ("placebo", block.placebo, block.placebo, "Hugging Face Mamba has one conv/SSM branch per block"),
        ("rope", ssp.rope, ssp.rope is not None, "Hugging Face Mamba has no rotary embeddings"),
        ("n_classes", config.n_classes, config.n_classes is not None,
         "MambaForCausalLM has a language-model head, not a classifier"),
        ("pooling", config.pooling, config.pooling is not None,
         "MambaForCausalLM has a language-model head, not a pooled one"),
        ("d_input", config.d_input, config.d_input is not None, "MambaForCausalLM reads token ids"),
        ("rms_norm", block.rms_norm, not block.rms_norm, "Hugging Face Mamba normalises with RMSNorm"),
    ]
    for key, value, bad, why in refusals:
        if bad:
            refuse(where, key, value, why)
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
    """Write `model` into `folder` as files that transformers.MambaForCausalLM.from_pretrained loads."""
    config = hf_config(model.config)
    own = model.state_dict()
    names = external_keys(own, TOP_KEYS)
    dtype: torch.dtype = own["embedding.weight"].dtype
    config["dtype"] = str(dtype).removeprefix("torch.")
    tensors = {names[k]: v.detach().cpu().contiguous().clone() for k, v in own.items()
               if not (k == "head.weight" and model.config.tie_embeddings)}  # transformers re-ties the head
    (Path(folder) / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    write_safetensors(tensors, Path(folder) / SAFETENSORS_FILE, {"format": "pt"})  # transformers checks "pt"
