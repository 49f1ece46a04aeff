"""seqssm model folders: `config.json` (format marker, version, model config) + `model.safetensors`.

config.json holds `SequenceModelConfig.to_dict()` under "model" (format_version 2); folders of format_version 1
hold the flat config of earlier versions there, which loads too.

`save_pretrained(model, dir)` writes one; it refuses a non-empty `dir` unless `overwrite=True`, and then
replaces the folder's content whole: everything is written into a staging folder beside it, which takes
its place only once complete (a failure leaves `dir` as it was, and no old file stays beside the new).
`load_pretrained(dir, SequenceModel)` rebuilds the model
from its config and loads the weights (users call `SequenceModel.from_pretrained` /
`model.save_pretrained`; the class is passed in so that this module sits below it). Nothing here
unpickles anything.

A model made by surgery or `init_from` carries a `provenance` dict (its parents' paths and the
operation); `save_pretrained` writes it into config.json and `load_pretrained` restores it.
Task checkpoints and the dispatch between folders and checkpoints are `seqssm.models.loading`.

`load_pretrained` and `load_state_dict` also read Hugging Face Mamba and mamba_ssm folders, and
`save_pretrained(..., format="hf")` writes a Hugging Face one (see `seqssm.models.interop`).
"""

from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch
from torch import nn

from seqssm.errors import MissingFileError, NotASeqssmFolderError, OutputExistsError

FORMAT = "seqssm"
# 1: the model config as one flat dict; 2: nested (block, SSP), `SequenceModelConfig.to_dict`. Both are read.
FORMAT_VERSION = 2
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


def check_target(out_dir: str | Path, overwrite: bool = False) -> Path:
    """`out_dir` as a Path if a model folder may be written there: it is new or empty, or `overwrite` is set and
    it looks like a folder of files (no sub-folders, not the working directory or one above it)."""
    out_dir = Path(out_dir)
    if not out_dir.exists():
        return out_dir
    if not out_dir.is_dir():
        raise OutputExistsError(f"{out_dir} is a file, not a folder; nothing was written. Choose a folder path.")
    content = sorted(p.name for p in out_dir.iterdir())
    if not content:
        return out_dir
    if not overwrite:
        shown = ", ".join(content[:5]) + (f", ... ({len(content)} entries)" if len(content) > 5 else "")
        raise OutputExistsError(f"{out_dir} is not empty ({shown}); nothing was written. Choose a new or empty "
                                "folder, or pass --overwrite (overwrite=True) to replace its content.")
    if out_dir.resolve() in (Path.cwd(), *Path.cwd().parents):
        raise OutputExistsError(f"refusing to replace {out_dir}: it is the working directory or holds it")
    folders = [p.name for p in out_dir.iterdir() if p.is_dir()]
    if folders:
        raise OutputExistsError(f"refusing to replace {out_dir}: it holds folders ({', '.join(sorted(folders))}), "
                                "which a model folder never does; remove it yourself if that is intended")
    return out_dir


@contextmanager
def staged_folder(out_dir: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """An empty folder beside `out_dir` to write into; when the block ends without error it takes the place of
    `out_dir` (whose old content goes only then), else it is removed and `out_dir` is left as it was."""
    out_dir = check_target(out_dir, overwrite)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir()
    try:
        yield stage
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
            os.replace(out_dir, old)
            os.replace(stage, out_dir)
            shutil.rmtree(old)
        else:
            os.replace(stage, out_dir)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def save_pretrained(model: nn.Module, out_dir: str | Path, format: str = FORMAT, overwrite: bool = False) -> Path:
    """Write `model.config` and its weights to the new or empty folder `out_dir` (with `overwrite`, replace the
    content of a non-empty one) as a seqssm folder, or with format="hf" as a folder transformers'
    MambaForCausalLM loads; returns the folder."""
    check_writable(model, format)
    with staged_folder(out_dir, overwrite) as stage:
        write_pretrained(model, stage, format)
    return Path(out_dir)


def check_writable(model: nn.Module, format: str) -> None:
    """Raise unless `model` can be saved in `format` (before anything is written)."""
    if not callable(getattr(getattr(model, "config", None), "to_dict", None)):
        raise TypeError(f"{type(model).__name__} has no typed `config`; only seqssm SequenceModels can be saved")
    if format not in (FORMAT, "hf"):
        raise ValueError(f"unknown format {format!r}; choose {FORMAT!r} or 'hf'")
    if format == "hf":
        from .interop.mamba import hf_config

        hf_config(model.config)  # raises PretrainedFormatError for what a Hugging Face Mamba cannot hold


def write_pretrained(model: nn.Module, folder: str | Path, format: str = FORMAT) -> None:
    """Write the files of `model` in `format` into the existing folder `folder` (`save_pretrained` stages it)."""
    from safetensors.torch import save_file

    from .. import __version__

    check_writable(model, format)
    if format == "hf":
        from .interop.mamba import save_hf

        save_hf(model, folder)
        return
    folder = Path(folder)
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "seqssm_version": __version__,
            "model": model.config.to_dict()}
    if model.provenance:
        meta["provenance"] = model.provenance
    (folder / CONFIG_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    # safetensors refuses shared or non-contiguous storage; clone so tied weights save as plain copies
    state = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
    save_file(state, str(folder / WEIGHTS_FILE), metadata={"format": FORMAT})


def check_folder(folder: str | Path) -> None:
    """Raise unless `folder` is an existing folder: MissingFileError when nothing is there, NotASeqssmFolderError for
    a file."""
    folder = Path(folder)
    if folder.is_file():
        raise NotASeqssmFolderError(f"{folder} is a file, not a model folder; a checkpoint of `seqssm fit` becomes one "
                                    f"with `seqssm export {folder} DIR`")
    if not folder.exists():
        raise MissingFileError(f"{folder} not found: no such model folder (config.json and weights of seqssm, Hugging "
                               "Face Mamba or mamba_ssm; `seqssm export CKPT DIR` makes one from a checkpoint)")


def read_config(folder: str | Path) -> dict:
    """The model config dict stored in a seqssm folder (flat in format_version 1, nested from 2; the model's
    `from_config` reads both), after checking the format marker and version."""
    folder = Path(folder)
    path = folder / CONFIG_FILE
    if not path.is_file():
        raise NotASeqssmFolderError(f"{folder}: no {CONFIG_FILE}; export one with `seqssm export CKPT {folder}`")
    meta = json.loads(path.read_text())
    if meta.get("format") != FORMAT:
        raise NotASeqssmFolderError(f"{path}: format is {meta.get('format')!r}, expected {FORMAT!r}")
    if meta.get("format_version", 0) > FORMAT_VERSION:
        raise NotASeqssmFolderError(f"{path}: format_version {meta['format_version']} is newer than this seqssm "
                                    f"reads ({FORMAT_VERSION}); upgrade seqssm")
    return meta["model"]


def load_state_dict(folder: str | Path, model_cls: type[nn.Module]) -> dict[str, torch.Tensor]:
    """The weights of a seqssm folder, read with safetensors; of a Hugging Face or mamba_ssm Mamba folder,
    renamed to the keys of `model_cls` (SequenceModel: passed in, so that this module stays below it)."""
    from .interop.mamba import detect_format, read_safetensors, read_state_dict

    if (Path(folder) / CONFIG_FILE).is_file() and detect_format(folder) != FORMAT:
        return read_state_dict(folder, model_cls)
    read_config(folder)  # fail on a foreign folder before reading its tensors
    path = Path(folder) / WEIGHTS_FILE
    if not path.is_file():
        raise NotASeqssmFolderError(f"{Path(folder)}: no {WEIGHTS_FILE}")
    return read_safetensors(path)


def load_pretrained(folder: str | Path, model_cls: type[nn.Module], dtype: torch.dtype | None = None) -> nn.Module:
    """Rebuild the `model_cls` (SequenceModel) saved in `folder` (seqssm, Hugging Face Mamba or mamba_ssm) and
    load its weights (strictly), in `dtype` when given. Users call `SequenceModel.from_pretrained`."""
    from .interop.mamba import detect_format, load_model

    check_folder(folder)
    if (Path(folder) / CONFIG_FILE).is_file() and detect_format(folder) != FORMAT:
        return load_model(folder, model_cls, dtype)
    model = model_cls.from_config(read_config(folder))
    if dtype is not None:
        model.to(dtype)  # before loading, so float64 weights keep their precision
    model.load_state_dict(load_state_dict(folder, model_cls))
    model.provenance = read_provenance(folder)
    return model


def read_provenance(folder: str | Path) -> dict | None:
    """The lineage (`provenance_record`) a seqssm folder's config.json records; None when it records none and
    for Hugging Face / mamba_ssm folders."""
    path = Path(folder) / CONFIG_FILE
    meta = json.loads(path.read_text()) if path.is_file() else {}
    return meta.get("provenance") if meta.get("format") == FORMAT else None


def provenance_record(operation: str, **parents: tuple[str | Path | None, dict | None]) -> dict:
    """{"operation", "parents": [{"role", "path", "provenance"}]} for a model made by `operation` from
    parents given as role=(path or None, that parent's own provenance), so lineage nests back to the roots."""
    return {"operation": operation, "parents": [
        {"role": role, "path": None if path is None else str(path), "provenance": parent}
        for role, (path, parent) in parents.items()]}
