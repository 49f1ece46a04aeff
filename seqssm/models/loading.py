"""Loading SequenceModels: the one loading path of `seqssm.models.reading` bound to SequenceModel, and what needs
the model or the task checkpoint whole (`read_weights` for `init_from`, `export_checkpoint` for `seqssm export`).

The path, each step once (`seqssm.models.reading`, below `SequenceModel`, which it is handed as `model_cls`):

    resolve      a local folder or file as given, else a Hub id (ORG/NAME[@REV]) from the Hugging Face cache,
                 fetched once (`seqssm.models.resolve`)
    detect       a folder's config.json picks its format adapter (`seqssm.models.formats`: seqssm, Hugging Face
                 Mamba, mamba_ssm); a file is a task checkpoint of `seqssm fit`, a bare state dict or a
                 .safetensors file
    read         the adapter turns config.json into a `SequenceModelConfig`; the tensors come from safetensors
                 (checked for truncation) or torch.load(weights_only=True)
    map          the adapter renames the tensors to SequenceModel keys, every key and shape checked against
                 the model the config describes
    build        SequenceModel(config) with the weights (`SequenceModel.from_pretrained`, `model_from_path`), or
                 the state dict alone (`read_weights`, for `init_from`, where the task builds its own network)

Task checkpoints store the network's config under `CHECKPOINT_MODEL_CONFIG`, so the model is rebuilt without the
task or Lightning; older checkpoints are rebuilt from the task's hyper-parameters (`reading.legacy_model_config`).
Nothing here unpickles code.
"""

from __future__ import annotations

from pathlib import Path

import torch

from seqssm.errors import CheckpointError
from seqssm.models import formats, reading
from seqssm.models.formats.files import MODEL_FILE_PATTERNS, read_safetensors
from seqssm.models.hub import check_target, save_pretrained
from seqssm.models.reading import (
    CHECKPOINT_MODEL_CONFIG, CHECKPOINT_PROVENANCE, CHECKPOINT_TASK, Pretrained, checkpoint_card,
    checkpoint_state_dict, read_checkpoint, read_folder, read_task_checkpoint,
)
from seqssm.models.resolve import resolve
from seqssm.models.sequence_model import SequenceModel

__all__ = ["CHECKPOINT_MODEL_CONFIG", "CHECKPOINT_PROVENANCE", "CHECKPOINT_TASK", "Pretrained", "build",
           "export_checkpoint", "model_from_path", "read_pretrained", "read_weights"]


def read_pretrained(source: str | Path, what: str = "path", revision: str | None = None,
                    cache_dir: str | Path | None = None) -> Pretrained:
    """A saved SequenceModel read (not built) from `source`: a model folder, a Hub id or a task checkpoint; `what`
    names the argument in errors."""
    return reading.read_pretrained(source, SequenceModel, what, revision, cache_dir)


def build(pretrained: Pretrained, dtype: torch.dtype | None = None) -> SequenceModel:
    """The SequenceModel of a read `Pretrained`, weights loaded strictly, in `dtype` when given."""
    return reading.build(pretrained, SequenceModel, dtype)


def model_from_path(path: str | Path, what: str = "path") -> SequenceModel:
    """The network in a folder, a Hub id or a task checkpoint; `what` names the argument in errors."""
    return reading.load_pretrained(path, SequenceModel, what=what)


def read_weights(source: str | Path, what: str = "init_from") -> tuple[dict[str, torch.Tensor], dict | None]:
    """(state dict, provenance or None) of a task checkpoint, a `.safetensors` file, a folder (seqssm, Hugging
    Face or mamba_ssm) or a Hub id; only the tensors are read, the network is not built."""
    path = resolve(source, MODEL_FILE_PATTERNS, what=what)
    if path.suffix == ".safetensors" and path.is_file():
        return read_safetensors(path), None
    if path.is_file():  # a bare state dict as well as a task checkpoint: no config needed
        ckpt = read_checkpoint(path, what)
        return checkpoint_state_dict(ckpt, path, what), ckpt.get(CHECKPOINT_PROVENANCE)
    pretrained = read_folder(path, SequenceModel)
    return pretrained.state, pretrained.provenance


def export_checkpoint(ckpt_path: str | Path, out_dir: str | Path, overwrite: bool = False) -> Path:
    """Write the network of task checkpoint `ckpt_path` as a model folder `out_dir` (config.json,
    model.safetensors, and a README.md model card with what the checkpoint knows: task, metrics, dataset); a
    non-empty `out_dir` is refused unless `overwrite` (and then only a model folder is replaced)."""
    if Path(ckpt_path).is_dir() and formats.not_a_model_folder(ckpt_path) is None:
        raise CheckpointError(f"checkpoint: {ckpt_path} is a model folder already, not a task checkpoint of `seqssm "
                              f"fit`: load it as it is, or rewrite it with `seqssm convert {ckpt_path} {out_dir} --to "
                              "seqssm` (or --to hf)")
    check_target(out_dir, overwrite)  # before reading a possibly large checkpoint
    ckpt = read_checkpoint(ckpt_path)
    model = build(read_task_checkpoint(Path(ckpt_path), "checkpoint", ckpt))
    return save_pretrained(model, out_dir, overwrite=overwrite, card=checkpoint_card(ckpt))
