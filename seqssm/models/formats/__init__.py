"""One adapter per model-folder layout, so that reading or writing a new format is one module here.

Each adapter module has NAME and
    detect(raw, path) -> bool                      is config.json `raw` (read from `path`) of this format?
    read_config(raw, path) -> SequenceModelConfig  its settings, each checked (errors name file and key)
    map_state_dict(own, config, tensors, origin, folder) -> state dict under SequenceModel keys, shapes checked
    check_writable(config); write(model, folder)   refuse before anything is written; write the files
and may have provenance(raw) -> dict | None. The loading pipeline (`seqssm.models.reading`) and saving
(`seqssm.models.hub`) use only these; the files themselves are read by `formats.files`.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from seqssm.errors import PretrainedFormatError
from seqssm.models.formats import hf, mamba_ssm, seqssm
from seqssm.models.formats.files import CONFIG_FILE, WEIGHTS_FILES, folder_file, read_json

# in the order they are tried: seqssm's marker first, then transformers' model_type, then mamba_ssm's keys
ADAPTERS: dict[str, ModuleType] = {m.NAME: m for m in (seqssm, hf, mamba_ssm)}
FORMATS = tuple(ADAPTERS)
WRITABLE = ("seqssm", "hf")


def detect(folder: str | Path) -> tuple[ModuleType, dict, Path]:
    """(adapter, config.json dict, its path) of a model folder."""
    path = folder_file(Path(folder), CONFIG_FILE)
    raw = read_json(path)
    for adapter in ADAPTERS.values():
        if adapter.detect(raw, path):
            return adapter, raw, path
    raise PretrainedFormatError(f"{path}: neither a seqssm folder ('format'), a Hugging Face model ('model_type') "
                                "nor a mamba_ssm model ('d_model', 'n_layer', 'vocab_size')")


def writer(format: str) -> ModuleType:
    """The adapter that writes `format` ("seqssm" or "hf")."""
    if format not in WRITABLE:
        raise ValueError(f"unknown format {format!r}; choose one of {WRITABLE}")
    return ADAPTERS[format]


def not_a_model_folder(folder: str | Path) -> str | None:
    """Why the existing folder `folder` is no model folder ("no config.json", "its config.json names no ... model",
    "no weights ..."), or None when it is one: only a model folder may be replaced."""
    folder = Path(folder)
    if not (folder / CONFIG_FILE).is_file():
        return f"no {CONFIG_FILE}"
    try:
        raw = read_json(folder / CONFIG_FILE)
    except PretrainedFormatError:
        return f"its {CONFIG_FILE} is no JSON object"
    # the keys each adapter detects by; a Hugging Face config of any model type is a model folder
    if not (seqssm.detect(raw, folder) or "model_type" in raw or mamba_ssm.detect(raw, folder)):
        return f"its {CONFIG_FILE} names no seqssm, Hugging Face or mamba_ssm model"
    if not any((folder / name).is_file() for name in WEIGHTS_FILES):
        return f"no weights ({', '.join(WEIGHTS_FILES)})"
    return None
