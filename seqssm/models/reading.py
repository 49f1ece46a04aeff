"""Reading saved models, for any model class: resolve -> detect the format -> read config and tensors -> map names
-> build. It sits below `seqssm.models.sequence_model`: the class to build (and to take the expected keys and
shapes from) is passed in, so `SequenceModel.from_pretrained` calls `load_pretrained(source, cls)`.

    resolve      a local folder or file as given, else a Hub id (ORG/NAME[@REV]) from the Hugging Face cache,
                 fetched once (`seqssm.models.resolve`)
    detect       a folder's config.json picks its format adapter (`seqssm.models.formats`: seqssm, Hugging Face
                 Mamba, mamba_ssm); a file is a task checkpoint of `seqssm fit` (or, for `read_weights`, a bare
                 state dict or a .safetensors file)
    read         the adapter turns config.json into a `SequenceModelConfig`; the tensors come from safetensors
                 (checked for truncation) or torch.load(weights_only=True)
    map          the adapter renames the tensors to SequenceModel keys, every key and shape checked against
                 the model the config describes
    build        the model class built from the config, with the weights (`build`, `load_pretrained`)

Task checkpoints store the network's config under `CHECKPOINT_MODEL_CONFIG` (`SequenceModelConfig.to_dict()`, the
flat dict in earlier versions), so the model is rebuilt without the task or Lightning; checkpoints written before
that entry existed are rebuilt from the task's hyper-parameters (registry name, `model_overrides` and the
dimensions linked from the data), as the task built it (`seqssm.models.registry.model_config`, which needs no model
class). Nothing here unpickles code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from seqssm.errors import CheckpointError, MissingFileError, PretrainedFormatError
from seqssm.models import formats
from seqssm.models.config import SequenceModelConfig
from seqssm.models.formats.files import MODEL_FILE_PATTERNS, read_tensors
from seqssm.models.registry import model_config
from seqssm.models.resolve import resolve
from seqssm.models.safe_load import load_torch_file

# What a task checkpoint holds beside Lightning's own entries: the SequenceModel config, the model's lineage
# (provenance) and the task's class name. The task keeps its network in `self.model`, hence the key prefix.
CHECKPOINT_MODEL_CONFIG = "seqssm_model_config"
CHECKPOINT_PROVENANCE = "seqssm_provenance"
CHECKPOINT_TASK = "seqssm_task"
TASK_MODEL_PREFIX = "model."
# Checkpoints without CHECKPOINT_MODEL_CONFIG: which hyper-parameters each task passed to `build` to shape the
# output (a classifier's n_classes; the language-model tasks none). These record what those versions did.
LEGACY_TASK_OUTPUTS = {"Classification": ("n_classes",), "NextTokenPrediction": (), "MaskedLM": ()}


@dataclass
class Pretrained:
    """What a saved model holds once read: its config, its weights under SequenceModel keys, its lineage, the
    format it came in ("seqssm", "hf", "mamba_ssm" or "checkpoint") and the local path read."""

    config: SequenceModelConfig
    state: dict[str, torch.Tensor]
    provenance: dict | None
    format: str
    path: Path


# -- task checkpoints -----------------------------------------------------------------------------------------------
def read_checkpoint(path: str | Path, what: str = "checkpoint") -> dict:
    """The dict saved in a checkpoint file, read with weights_only=True (`load_torch_file`); `what` names the argument
    that gave `path` in the errors."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"{what}: no checkpoint file at {path}{' (a folder)' if path.is_dir() else ''}")
    ckpt = load_torch_file(path)
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"{what}: {path} holds a {type(ckpt).__name__}, not a checkpoint dict "
                              "(a Lightning .ckpt of `seqssm fit` or an exported folder is expected)")
    return ckpt


def checkpoint_state_dict(ckpt: dict, path: str | Path, what: str = "checkpoint") -> dict[str, torch.Tensor]:
    """The network's state dict in a task checkpoint (task keys unprefixed), or in a bare state-dict file."""
    state = ckpt.get("state_dict", ckpt)
    if not isinstance(state, dict):
        raise CheckpointError(f"{what}: {path} holds no state dict (a Lightning .ckpt or an exported folder is "
                              "expected)")
    if any(k.startswith(TASK_MODEL_PREFIX) for k in state):
        state = {k[len(TASK_MODEL_PREFIX):]: v for k, v in state.items() if k.startswith(TASK_MODEL_PREFIX)}
    return state


def weights_mismatch(model: dict, weights: dict, shown: int = 3) -> str | None:
    """What keeps `weights` (a state dict, or names -> shapes) from loading strictly into a module whose state dict
    is `model`, in one line: the tensors of another shape, those missing from the file, those the module lacks
    (`shown` of each named); None when they fit."""
    differ = [f"{k} is {shape_of(v)} in the file, {shape_of(model[k])} in the model" for k, v in weights.items()
              if k in model and shape_of(v) != shape_of(model[k])]
    parts = [f"{what} ({len(keys)}): {sep.join(keys[:shown])}{' ...' if len(keys) > shown else ''}"
             for what, keys, sep in (("tensors of another shape", differ, "; "),
                                     ("missing from the file", [k for k in model if k not in weights], ", "),
                                     ("not in the model", [k for k in weights if k not in model], ", ")) if keys]
    return "; ".join(parts) or None


def shape_of(value) -> list[int]:
    """The shape of a tensor, or of a shape given as such, as a list."""
    return list(getattr(value, "shape", value))


def legacy_model_config(ckpt: dict, path: str | Path) -> SequenceModelConfig:
    """The model config of a task checkpoint that stores none, from its hyper-parameters."""
    hparams = ckpt.get("hyper_parameters") or {}
    task = (hparams.get("_class_path") or ckpt.get(CHECKPOINT_TASK) or "").rsplit(".", 1)[-1]
    if task not in LEGACY_TASK_OUTPUTS or "model" not in hparams:
        raise CheckpointError(f"{path}: not a seqssm task checkpoint: it stores no {CHECKPOINT_MODEL_CONFIG!r} and "
                              f"its hyper-parameters name no seqssm task (got {task!r}; known: "
                              f"{sorted(LEGACY_TASK_OUTPUTS)})")
    outputs = {"n_classes": None} | {k: hparams.get(k) for k in LEGACY_TASK_OUTPUTS[task]}
    return model_config(hparams["model"], vocab_size=hparams.get("vocab_size"), d_input=hparams.get("d_input"),
                        **outputs, **(hparams.get("model_overrides") or {}))


def read_task_checkpoint(path: Path, what: str, ckpt: dict | None = None) -> Pretrained:
    """A task checkpoint of `seqssm fit` read (`ckpt`: its dict when already loaded): its network's config,
    weights and provenance."""
    ckpt = read_checkpoint(path, what) if ckpt is None else ckpt
    config = ckpt.get(CHECKPOINT_MODEL_CONFIG) or legacy_model_config(ckpt, path)
    if not isinstance(config, SequenceModelConfig):
        try:
            config = SequenceModelConfig.from_dict(config)
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"{path}: {CHECKPOINT_MODEL_CONFIG}: {e}") from e
    return Pretrained(config, checkpoint_state_dict(ckpt, path, what), ckpt.get(CHECKPOINT_PROVENANCE),
                      "checkpoint", path)


def checkpoint_card(ckpt: dict) -> dict:
    """What a task checkpoint knows for a model card (`seqssm.models.hub.model_card`'s arguments): the task, the
    dataset (when the data module saved its hyper-parameters), the best monitored metric of each checkpoint
    callback, and the task's hyper-parameters."""
    hparams = {k: v for k, v in (ckpt.get("hyper_parameters") or {}).items() if not k.startswith("_")}
    task = ckpt.get(CHECKPOINT_TASK) or (ckpt.get("hyper_parameters") or {}).get("_class_path", "").rsplit(".", 1)[-1]
    data = (ckpt.get("datamodule_hyper_parameters") or {}).get("_class_path", "").rsplit(".", 1)[-1]
    metrics = {state["monitor"]: float(state["best_model_score"]) for state in (ckpt.get("callbacks") or {}).values()
               if isinstance(state, dict) and state.get("monitor") and state.get("best_model_score") is not None}
    return {"task": task or None, "datasets": [data.removesuffix("DataModule").lower()] if data else [],
            "metrics": metrics, "hyperparameters": hparams}


# -- folders --------------------------------------------------------------------------------------------------------
def template_state(config: SequenceModelConfig, path: Path, model_cls: type[nn.Module]) -> dict[str, torch.Tensor]:
    """The state dict (shapes only, on the meta device) of the `model_cls` that `config` describes; a config that
    makes no model (read from `path`) raises PretrainedFormatError naming the file."""
    try:
        try:
            with torch.device("meta"):  # shapes without memory: a 2.8B model's template costs nothing
                return model_cls(config).state_dict()
        except (RuntimeError, NotImplementedError):  # an initialisation that reads values (S4's .item())
            return model_cls(config).state_dict()
    except (TypeError, ValueError) as e:
        raise PretrainedFormatError(f"{path}: 'model' describes no model: {e}") from e


def read_folder(folder: Path, model_cls: type[nn.Module]) -> Pretrained:
    """A model folder of any known format read: detect, read config and tensors, map them to the keys of the
    `model_cls` the config describes."""
    adapter, raw, config_path = formats.detect(folder)
    try:
        config = adapter.read_config(raw, config_path)
    except PretrainedFormatError:
        raise
    except (TypeError, ValueError) as e:  # a value of the wrong type deep in a config (a float that reads "x")
        raise PretrainedFormatError(f"{config_path}: {e}") from e
    own = template_state(config, config_path, model_cls)
    tensors, origin = read_tensors(folder)
    state = adapter.map_state_dict(own, config, tensors, origin, folder)
    provenance = getattr(adapter, "provenance", lambda raw: None)(raw)
    return Pretrained(config, state, provenance, adapter.NAME, folder)


def read_pretrained(source: str | Path, model_cls: type[nn.Module], what: str = "path", revision: str | None = None,
                    cache_dir: str | Path | None = None) -> Pretrained:
    """A saved model read (not built) from `source`: a model folder (its tensors checked against `model_cls`), a
    Hub id or a task checkpoint; `what` names the argument in errors."""
    path = resolve(source, MODEL_FILE_PATTERNS, revision=revision, cache_dir=cache_dir, what=what)
    if path.is_dir():
        return read_folder(path, model_cls)
    return read_task_checkpoint(path, what)


def build(pretrained: Pretrained, model_cls: type[nn.Module], dtype: torch.dtype | None = None) -> nn.Module:
    """The `model_cls` of a read `Pretrained`, weights loaded strictly, in `dtype` when given."""
    model = model_cls(pretrained.config)
    if dtype is not None:
        model.to(dtype)  # before loading, so float64 weights keep their precision
    model.load_state_dict(pretrained.state)
    model.provenance = pretrained.provenance
    return model


def load_pretrained(source: str | Path, model_cls: type[nn.Module], dtype: torch.dtype | None = None,
                    revision: str | None = None, cache_dir: str | Path | None = None, what: str = "path") -> nn.Module:
    """The `model_cls` network in a seqssm / Hugging Face / mamba_ssm folder, a Hub id or a task checkpoint, built
    with its weights (users call `SequenceModel.from_pretrained`)."""
    return build(read_pretrained(source, model_cls, what, revision, cache_dir), model_cls, dtype)
