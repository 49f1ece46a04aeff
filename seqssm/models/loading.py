"""Any saved model into a SequenceModel: a folder (seqssm, Hugging Face Mamba, mamba_ssm) or a task checkpoint.

`model_from_path` rebuilds the network with its weights; `read_weights` gives only the state dict (for
`init_from`, where the task builds its own network). Task checkpoints (the `.ckpt` files of `seqssm fit`)
store the network's config under `CHECKPOINT_MODEL_CONFIG` (`SequenceModelConfig.to_dict()`, the flat dict
in earlier versions), so the model is rebuilt without the task or Lightning; checkpoints written before that entry existed are rebuilt from the task's hyper-parameters
(registry name, `model_overrides` and the dimensions linked from the data), as the task built it.

Nothing here unpickles code: checkpoints are read with `torch.load(weights_only=True)`, folders and
`.safetensors` files with safetensors.
"""

from __future__ import annotations

from pathlib import Path

import torch

from seqssm.errors import CheckpointError, MissingFileError
from seqssm.models.config import SequenceModelConfig
from seqssm.models.hub import check_target, load_state_dict, read_provenance, save_pretrained
from seqssm.models.interop import read_safetensors
from seqssm.models.registry import model_config
from seqssm.models.safe_load import load_torch_file
from seqssm.models.sequence_model import SequenceModel

# What a task checkpoint holds beside Lightning's own entries: the SequenceModel config, the model's lineage
# (provenance) and the task's class name. The task keeps its network in `self.model`, hence the key prefix.
CHECKPOINT_MODEL_CONFIG = "seqssm_model_config"
CHECKPOINT_PROVENANCE = "seqssm_provenance"
CHECKPOINT_TASK = "seqssm_task"
TASK_MODEL_PREFIX = "model."
# Checkpoints without CHECKPOINT_MODEL_CONFIG: which hyper-parameters each task passed to `build` to shape the
# output (a classifier's n_classes; the language-model tasks none). These record what those versions did.
LEGACY_TASK_OUTPUTS = {"Classification": ("n_classes",), "NextTokenPrediction": (), "MaskedLM": ()}


def read_checkpoint(path: str | Path, what: str = "checkpoint") -> dict:
    """The dict saved in a checkpoint file, read with weights_only=True (`load_torch_file`); `what` names the argument
    that gave `path` in the errors."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"{what}: no checkpoint file or exported folder at {path}")
    ckpt = load_torch_file(path)
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"{what}: {path} holds a {type(ckpt).__name__}, not a checkpoint dict "
                         "(a Lightning .ckpt of `seqssm fit` or an exported folder is expected)")
    return ckpt


def checkpoint_state_dict(ckpt: dict, path: str | Path, what: str = "checkpoint") -> dict[str, torch.Tensor]:
    """The network's state dict in a task checkpoint (task keys unprefixed), or in a bare state-dict file."""
    state = ckpt.get("state_dict", ckpt)
    if not isinstance(state, dict):
        raise CheckpointError(f"{what}: {path} holds no state dict (a Lightning .ckpt or an exported folder is expected)")
    if any(k.startswith(TASK_MODEL_PREFIX) for k in state):
        state = {k[len(TASK_MODEL_PREFIX):]: v for k, v in state.items() if k.startswith(TASK_MODEL_PREFIX)}
    return state


def legacy_model_config(ckpt: dict, path: str | Path) -> SequenceModelConfig:
    """The model config of a task checkpoint that stores none, from its hyper-parameters."""
    hparams = ckpt.get("hyper_parameters") or {}
    task = (hparams.get("_class_path") or ckpt.get(CHECKPOINT_TASK) or "").rsplit(".", 1)[-1]
    if task not in LEGACY_TASK_OUTPUTS or "model" not in hparams:
        raise CheckpointError(f"{path}: not a seqssm task checkpoint: it stores no {CHECKPOINT_MODEL_CONFIG!r} and its "
                         f"hyper-parameters name no seqssm task (got {task!r}; known: {sorted(LEGACY_TASK_OUTPUTS)})")
    outputs = {"n_classes": None} | {k: hparams.get(k) for k in LEGACY_TASK_OUTPUTS[task]}
    return model_config(hparams["model"], vocab_size=hparams.get("vocab_size"), d_input=hparams.get("d_input"),
                        **outputs, **(hparams.get("model_overrides") or {}))


def model_from_checkpoint(path: str | Path, what: str = "checkpoint") -> SequenceModel:
    """The trained network in a task checkpoint of `seqssm fit`, with its provenance."""
    ckpt = read_checkpoint(path, what)
    config = ckpt.get(CHECKPOINT_MODEL_CONFIG) or legacy_model_config(ckpt, path)
    model = SequenceModel.from_config(config)
    model.load_state_dict(checkpoint_state_dict(ckpt, path, what))
    model.provenance = ckpt.get(CHECKPOINT_PROVENANCE)
    return model


def model_from_path(path: str | Path, what: str = "path") -> SequenceModel:
    """The network in a seqssm / Hugging Face / mamba_ssm folder or a task checkpoint file; `what` names the
    argument in the error when `path` is neither."""
    path = Path(path)
    if path.is_dir():
        return SequenceModel.from_pretrained(path)
    return model_from_checkpoint(path, what)


def read_weights(path: str | Path, what: str = "init_from") -> tuple[dict[str, torch.Tensor], dict | None]:
    """(state dict, provenance or None) of a task checkpoint, a `.safetensors` file or a folder (seqssm, Hugging
    Face or mamba_ssm); only the tensors are read, the network is not built."""
    path = Path(path)
    if path.is_dir():
        return load_state_dict(path, SequenceModel), read_provenance(path)
    if path.suffix == ".safetensors" and path.is_file():
        return read_safetensors(path), None
    ckpt = read_checkpoint(path, what)
    return checkpoint_state_dict(ckpt, path, what), ckpt.get(CHECKPOINT_PROVENANCE)


def export_checkpoint(ckpt_path: str | Path, out_dir: str | Path, overwrite: bool = False) -> Path:
    """Write the network of task checkpoint `ckpt_path` as `out_dir/config.json` + `out_dir/model.safetensors`;
    a non-empty `out_dir` is refused unless `overwrite` (then its content is replaced whole)."""
    check_target(out_dir, overwrite)  # before reading a possibly large checkpoint
    return save_pretrained(model_from_checkpoint(ckpt_path), out_dir, overwrite=overwrite)
