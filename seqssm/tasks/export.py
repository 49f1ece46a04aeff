"""Turn a training checkpoint into a seqssm model folder (`seqssm export CKPT OUT_DIR`)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ..models.hub import save_pretrained
from ..models.sequence_model import SequenceModel
from .base import SequenceTask
from .classification import Classification
from .mlm import MaskedLM
from .ntp import NextTokenPrediction

# Only these classes are ever built from a checkpoint's hyperparameters: a checkpoint names a task, it cannot
# make us import arbitrary code.
TASKS: dict[str, type[SequenceTask]] = {c.__name__: c for c in (Classification, NextTokenPrediction, MaskedLM)}


def task_from_checkpoint(path: str | Path) -> SequenceTask:
    """The task saved in a Lightning checkpoint, rebuilt from its hyperparameters with its trained weights."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    hparams = dict(ckpt.get("hyper_parameters") or {})
    class_path = hparams.pop("_class_path", None) or ckpt.get("seqssm_task", "")
    hparams.pop("_instantiator", None)
    task_cls = TASKS.get(class_path.rsplit(".", 1)[-1])
    if task_cls is None:
        raise ValueError(f"{path}: not a seqssm task checkpoint (task {class_path!r}; known: {sorted(TASKS)})")
    task = task_cls(**{**hparams, "init_from": None})  # the weights below replace whatever init_from gave
    task.load_state_dict(ckpt["state_dict"])
    task.model.provenance = ckpt.get("seqssm_provenance")  # so an exported folder keeps its lineage
    return task


def model_from_checkpoint(path: str | Path) -> nn.Module:
    """The trained network inside a Lightning checkpoint of a seqssm task."""
    return task_from_checkpoint(path).model


def model_from_path(path: str | Path, what: str) -> nn.Module:
    """The network in a seqssm / Hugging Face / mamba_ssm folder or a seqssm task checkpoint file; `what`
    names the argument in the error when `path` is neither."""
    path = Path(path)
    if path.is_dir():
        return SequenceModel.from_pretrained(path)
    if path.is_file():
        return model_from_checkpoint(path)
    raise FileNotFoundError(f"{what}: no checkpoint file or exported folder at {path}")


def export_checkpoint(ckpt_path: str | Path, out_dir: str | Path) -> Path:
    """Write the network of `ckpt_path` as `out_dir/config.json` + `out_dir/model.safetensors`."""
    return save_pretrained(model_from_checkpoint(ckpt_path), out_dir)
