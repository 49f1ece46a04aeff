"""Mamba-1 language models of other libraries <-> SequenceModel.

Reads Hugging Face `MambaForCausalLM` folders (config.json with model_type "mamba", model.safetensors,
sharded or not) and mamba_ssm `MambaLMHeadModel` folders (config.json with d_model / n_layer /
ssm_cfg, pytorch_model.bin read with weights_only=True); writes Hugging Face folders. Every
setting of those configs maps onto a field of `SequenceModelConfig` or is refused by name; state dicts
map through the explicit key tables below.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import torch
from torch import nn

from seqssm.blocks.config import MambaBlockConfig, SSPConfig
from seqssm.errors import CheckpointError, PretrainedFormatError
from seqssm.models.config import SequenceModelConfig
from seqssm.models.safe_load import load_torch_file

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_FILE = "pytorch_model.bin"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
FORMATS = ("seqssm", "hf", "mamba_ssm")

# seqssm key under `backbone.layers.{i}.` -> key under `backbone.layers.{i}.` in both other libraries
LAYER_KEYS = {
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
# seqssm keys outside the layers -> each library's key
TOP_KEYS = {
    "hf": {
        "embedding.weight": "backbone.embeddings.weight",
        "backbone.norm_f.weight": "backbone.norm_f.weight",
        "head.weight": "lm_head.weight",
    },
    "mamba_ssm": {
        "embedding.weight": "backbone.embedding.weight",
        "backbone.norm_f.weight": "backbone.norm_f.weight",
        "backbone.norm_f.bias": "backbone.norm_f.bias",
        "head.weight": "lm_head.weight",
    },
}
LAYER_PREFIX = "backbone.layers."

# transformers' MambaConfig defaults: what transformers assumes for a key a config.json leaves out
HF_DEFAULTS = {
    "vocab_size": 50280, "hidden_size": 768, "state_size": 16, "num_hidden_layers": 32,
    "layer_norm_epsilon": 1e-5, "expand": 2, "conv_kernel": 4, "use_bias": False, "use_conv_bias": True,
    "hidden_act": "silu", "residual_in_fp32": True, "time_step_rank": "auto", "tie_word_embeddings": True,
}
# mamba_ssm's MambaConfig / MixerModel / Mamba (v1) defaults
MAMBA_SSM_DEFAULTS = {
    "d_intermediate": 0, "ssm_cfg": {}, "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": True,
    "residual_in_fp32": True, "fused_add_norm": True, "pad_vocab_size_multiple": 8, "tie_embeddings": True,
    "norm_epsilon": 1e-5,
}
MAMBA1_DEFAULTS = {"d_state": 16, "d_conv": 4, "expand": 2, "dt_rank": "auto", "conv_bias": True, "bias": False}
# Settings that only choose an initialisation or a kernel: a trained model computes the same without them.
MAMBA1_NO_EFFECT = {"dt_min", "dt_max", "dt_init", "dt_scale", "dt_init_floor", "use_fast_path", "layer"}
MAMBA_SSM_NO_EFFECT = {"fused_add_norm", "initializer_cfg"}


def _refuse(where, key: str, value, why: str):
    raise PretrainedFormatError(f"{where}: {key}={value!r} is not supported: {why}")


def read_json(path: Path) -> dict:
    """A JSON object from `path`, with errors naming the file."""
    if not path.is_file():
        raise PretrainedFormatError(f"{path.parent}: no {path.name}")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PretrainedFormatError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(data, dict):
        raise PretrainedFormatError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def detect_format(folder: str | Path) -> str:
    """"seqssm", "hf" or "mamba_ssm", by what the folder's config.json holds."""
    path = Path(folder) / CONFIG_FILE
    config = read_json(path)
    if config.get("format") == "seqssm":
        return "seqssm"
    if "model_type" in config:
        if config["model_type"] != "mamba":
            _refuse(path, "model_type", config["model_type"], "seqssm reads Hugging Face 'mamba' (Mamba-1) models")
        return "hf"
    if {"d_model", "n_layer", "vocab_size"} <= config.keys():
        return "mamba_ssm"
    raise PretrainedFormatError(f"{path}: neither a seqssm folder ('format'), a Hugging Face model ('model_type') "
                                "nor a mamba_ssm model ('d_model', 'n_layer', 'vocab_size')")


def _integer(where, key: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 1:
        _refuse(where, key, value, "seqssm's Mamba block needs a positive integer here")
    return int(value)


def _lm_config(where, *, d_model, n_layers, vocab_size, d_state, expand, d_conv, conv_bias, proj_bias, dt_rank,
               rms_norm, norm_eps, residual_in_fp32, tie_embeddings, pad_vocab_size_multiple) -> SequenceModelConfig:
    """The config of a plain Mamba-S6 language model, integer settings checked."""
    if dt_rank != "auto":
        dt_rank = _integer(where, "dt_rank", dt_rank)
    block = MambaBlockConfig(
        SSPConfig("s6", d_state=_integer(where, "d_state", d_state)), expand=_integer(where, "expand", expand),
        d_conv=_integer(where, "d_conv", d_conv), conv_bias=bool(conv_bias), proj_bias=bool(proj_bias),
        dt_rank=dt_rank, dropout=0.0, rms_norm=bool(rms_norm), norm_eps=float(norm_eps),
        residual_in_fp32=bool(residual_in_fp32),
    )
    return SequenceModelConfig(
        d_model=_integer(where, "d_model", d_model), n_layers=_integer(where, "n_layers", n_layers), block=block,
        vocab_size=_integer(where, "vocab_size", vocab_size), n_classes=None, pooling=None,
        tie_embeddings=bool(tie_embeddings),
        pad_vocab_size_multiple=_integer(where, "pad_vocab_size_multiple", pad_vocab_size_multiple),
    )


def config_from_hf(hf: dict, where="config.json") -> SequenceModelConfig:
    """The SequenceModelConfig equivalent to a transformers MambaConfig dict."""
    c = {**HF_DEFAULTS, **hf}
    if c["hidden_act"] != "silu":
        _refuse(where, "hidden_act", c["hidden_act"], "the Mamba block gates with SiLU")
    expand = _integer(where, "expand", c["expand"])
    inner = c.get("intermediate_size")
    if inner is not None and inner != expand * c["hidden_size"]:
        _refuse(where, "intermediate_size", inner, f"seqssm's inner width is expand * hidden_size = "
                f"{expand * c['hidden_size']}")
    return _lm_config(
        where, d_model=c["hidden_size"], n_layers=c["num_hidden_layers"], vocab_size=c["vocab_size"],
        d_state=c["state_size"], expand=expand, d_conv=c["conv_kernel"], conv_bias=c["use_conv_bias"],
        proj_bias=c["use_bias"], dt_rank=c["time_step_rank"], rms_norm=True, norm_eps=c["layer_norm_epsilon"],
        residual_in_fp32=c["residual_in_fp32"], tie_embeddings=c["tie_word_embeddings"], pad_vocab_size_multiple=1,
    )


def config_from_mamba_ssm(ms: dict, where="config.json") -> SequenceModelConfig:
    """The SequenceModelConfig equivalent to a mamba_ssm MambaConfig dict (Mamba-1 mixers only)."""
    known = {"d_model", "n_layer", "vocab_size"} | MAMBA_SSM_DEFAULTS.keys() | MAMBA_SSM_NO_EFFECT
    unknown = sorted(set(ms) - known)
    if unknown:
        _refuse(where, unknown[0], ms[unknown[0]], "not a mamba_ssm MambaConfig setting seqssm knows")
    c = {**MAMBA_SSM_DEFAULTS, **ms}
    if c["d_intermediate"]:
        _refuse(where, "d_intermediate", c["d_intermediate"], "MLP layers between the mixers")
    if c["attn_layer_idx"]:
        _refuse(where, "attn_layer_idx", c["attn_layer_idx"], "attention layers (hybrid models)")
    ssm = c["ssm_cfg"] or {}
    if ssm.get("layer", "Mamba1") != "Mamba1":
        _refuse(where, "ssm_cfg.layer", ssm["layer"], "seqssm reads Mamba-1 mixers only")
    unknown = sorted(set(ssm) - MAMBA1_DEFAULTS.keys() - MAMBA1_NO_EFFECT)
    if unknown:
        _refuse(where, f"ssm_cfg.{unknown[0]}", ssm[unknown[0]], "not a Mamba-1 setting seqssm knows")
    s = {**MAMBA1_DEFAULTS, **ssm}
    return _lm_config(
        where, d_model=c["d_model"], n_layers=c["n_layer"], vocab_size=c["vocab_size"], d_state=s["d_state"],
        expand=s["expand"], d_conv=s["d_conv"], conv_bias=s["conv_bias"], proj_bias=s["bias"], dt_rank=s["dt_rank"],
        rms_norm=c["rms_norm"], norm_eps=c["norm_epsilon"], residual_in_fp32=c["residual_in_fp32"],
        tie_embeddings=c["tie_embeddings"], pad_vocab_size_multiple=c["pad_vocab_size_multiple"],
    )


def read_foreign_config(folder: str | Path) -> tuple[str, SequenceModelConfig]:
    """(format, model config) of a Hugging Face or mamba_ssm folder."""
    path = Path(folder) / CONFIG_FILE
    fmt = detect_format(folder)
    if fmt == "seqssm":
        raise PretrainedFormatError(f"{path}: a seqssm folder; read it with seqssm.models.hub")
    raw = read_json(path)
    return fmt, (config_from_hf(raw, path) if fmt == "hf" else config_from_mamba_ssm(raw, path))


def external_keys(seqssm_keys, fmt: str) -> dict[str, str]:
    """seqssm state-dict key -> the key `fmt` ("hf" or "mamba_ssm") stores the same tensor under."""
    out = {}
    for key in seqssm_keys:
        if key.startswith(LAYER_PREFIX):
            index, rest = key[len(LAYER_PREFIX):].split(".", 1)
            out[key] = f"{LAYER_PREFIX}{index}.{LAYER_KEYS[rest]}"
        else:
            out[key] = TOP_KEYS[fmt][key]
    return out


def _check_safetensors_complete(path: Path) -> None:
    """Name the first tensor whose bytes run past the end of a (truncated) safetensors file."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise PretrainedFormatError(f"{path}: truncated: shorter than a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if 8 + n > size:
            raise PretrainedFormatError(f"{path}: truncated inside its safetensors header")
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise PretrainedFormatError(f"{path}: not a safetensors file (header: {e})") from e
    for key, info in header.items():
        if key != "__metadata__" and 8 + n + info["data_offsets"][1] > size:
            raise PretrainedFormatError(f"{path}: truncated: tensor {key!r} ends at byte "
                                        f"{8 + n + info['data_offsets'][1]}, the file has {size}")


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a .safetensors file; a missing, truncated or unreadable file raises PretrainedFormatError."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise PretrainedFormatError(f"{path.parent}: no {path.name}")
    _check_safetensors_complete(path)
    try:
        return load_file(str(path))
    except SafetensorError as e:
        raise PretrainedFormatError(f"{path}: unreadable safetensors file ({e})") from e


def _read_torch(path: Path) -> dict[str, torch.Tensor]:
    try:
        state = load_torch_file(path)
    except CheckpointError as e:
        raise PretrainedFormatError(str(e)) from e
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise PretrainedFormatError(f"{path}: expected a state dict (names -> tensors)")
    return state


def read_tensors(folder: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Path]]:
    """All tensors of a folder's weights, and the file each came from.

    Tries model.safetensors.index.json (shards), model.safetensors, pytorch_model.bin, in that order.
    """
    folder = Path(folder)
    index = folder / SAFETENSORS_INDEX
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise PretrainedFormatError(f"{index}: no 'weight_map'")
        tensors, origin = {}, {}
        for shard in sorted(set(weight_map.values())):
            path = folder / shard
            if not path.is_file():
                key = next(k for k, v in weight_map.items() if v == shard)
                raise PretrainedFormatError(f"{index}: shard {shard} (holding {key!r}) is missing from {folder}")
            for key, value in read_safetensors(path).items():
                tensors[key], origin[key] = value, path
        for key, shard in weight_map.items():
            if key not in tensors:
                raise PretrainedFormatError(f"{folder / shard}: no tensor {key!r}, which {index.name} places there")
        return tensors, origin
    for name, reader in ((SAFETENSORS_FILE, read_safetensors), (TORCH_FILE, _read_torch)):
        path = folder / name
        if path.is_file():
            tensors = reader(path)
            return tensors, dict.fromkeys(tensors, path)
    raise PretrainedFormatError(f"{folder}: no weights: expected {SAFETENSORS_FILE}, {SAFETENSORS_INDEX} or "
                                f"{TORCH_FILE}")


def map_state_dict(model: nn.Module, tensors: dict, origin: dict, fmt: str, folder) -> dict[str, torch.Tensor]:
    """`fmt`-keyed tensors -> a state dict for `model`, every key and shape checked (errors name file and key)."""
    own = model.state_dict()
    names = external_keys(own, fmt)
    tied = model.config.tie_embeddings
    # a tensor no file holds is reported against the index of a sharded folder, else the one weights file
    index = Path(folder) / SAFETENSORS_INDEX
    default_file = index if index.is_file() else next(iter(origin.values()), Path(folder))
    state = {}
    for key, ext in names.items():
        if tied and key == "head.weight":
            continue  # the head is the embedding
        if ext not in tensors:
            raise PretrainedFormatError(f"{default_file}: missing tensor {ext!r} (seqssm {key!r})")
        value = tensors[ext]
        if value.shape != own[key].shape:
            raise PretrainedFormatError(f"{origin[ext]}: tensor {ext!r} has shape {list(value.shape)}, the config "
                                        f"gives {list(own[key].shape)}")
        state[key] = value
    if tied:
        head = names["head.weight"]
        if head in tensors and not torch.equal(tensors[head], state["embedding.weight"]):
            raise PretrainedFormatError(f"{origin[head]}: {head!r} differs from the embedding, but the config ties "
                                        "them; set the tie setting to false to load an untied head")
        state["head.weight"] = state["embedding.weight"]
    extra = sorted(set(tensors) - set(names.values()))
    if extra:
        raise PretrainedFormatError(f"{origin[extra[0]]}: unexpected tensor {extra[0]!r} (no place in a model with "
                                    f"this config){f', and {len(extra) - 1} more' if len(extra) > 1 else ''}")
    return state


def read_state_dict(folder: str | Path, model_cls: type[nn.Module]) -> dict[str, torch.Tensor]:
    """The weights of a Hugging Face or mamba_ssm folder, under the keys of `model_cls` (SequenceModel)."""
    fmt, config = read_foreign_config(folder)
    with torch.device("meta"):
        template = model_cls(config)  # keys and shapes only
    return map_state_dict(template, *read_tensors(folder), fmt, folder)


def load_model(folder: str | Path, model_cls: type[nn.Module], dtype: torch.dtype | None = None) -> nn.Module:
    """The `model_cls` (SequenceModel) equivalent to a Hugging Face or mamba_ssm folder, weights loaded."""
    fmt, config = read_foreign_config(folder)
    tensors, origin = read_tensors(folder)
    model = model_cls(config)
    if dtype is not None:
        model.to(dtype)  # before loading, so float64 weights keep their precision
    model.load_state_dict(map_state_dict(model, tensors, origin, fmt, folder))
    return model


def hf_config(config: SequenceModelConfig) -> dict:
    """The transformers MambaConfig dict of a SequenceModel config; refuses what MambaForCausalLM cannot hold."""
    where = "save_pretrained(format='hf')"
    block, ssp = config.block, config.block.ssp
    if not isinstance(block, MambaBlockConfig):
        _refuse(where, "block", block.kind, "Hugging Face Mamba holds Mamba blocks only")
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
            _refuse(where, key, value, why)
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


def save_hf(model: nn.Module, out_dir: str | Path) -> Path:
    """Write `model` as a folder that transformers.MambaForCausalLM.from_pretrained loads."""
    from safetensors.torch import save_file

    config = hf_config(model.config)
    own = model.state_dict()
    names = external_keys(own, "hf")
    dtype = own["embedding.weight"].dtype
    config["dtype"] = str(dtype).removeprefix("torch.")
    tensors = {names[k]: v.detach().cpu().contiguous().clone() for k, v in own.items()
               if not (k == "head.weight" and model.config.tie_embeddings)}  # transformers re-ties the head
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file(tensors, str(out_dir / SAFETENSORS_FILE), metadata={"format": "pt"})  # transformers checks "pt"
    return out_dir
