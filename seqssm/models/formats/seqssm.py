"""seqssm model folders: config.json {"format": "seqssm", "format_version", "seqssm_version", "model",
"provenance"} + model.safetensors under the SequenceModel's own keys.

`model` holds `SequenceModelConfig.to_dict()` (format_version 2); folders of format_version 1 hold the flat config of
earlier versions there, which loads too. A model made by surgery or `init_from` carries a `provenance` dict, kept
in config.json.
"""

from __future__ import annotations

import json
from pathlib import Path

from torch import nn

from seqssm.errors import PretrainedFormatError
from seqssm.models.config import SequenceModelConfig
from seqssm.models.formats.files import CONFIG_FILE, SAFETENSORS_FILE, take_tensors, write_safetensors

NAME = "seqssm"
# 1: the model config as one flat dict; 2: nested (block, SSP), `SequenceModelConfig.to_dict`. Both are read.
FORMAT_VERSION = 2
KEYS = {"format", "format_version", "seqssm_version", "model", "provenance"}


def detect(raw: dict, path: Path) -> bool:
    """Whether config.json `raw` carries the seqssm format marker."""
    return raw.get("format") == NAME


def read_config(raw: dict, path: Path) -> SequenceModelConfig:
    """The model config in a seqssm config.json `raw` (read from `path`), every entry checked; a wrong one raises
    PretrainedFormatError naming the file, the key and what is expected there."""
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise PretrainedFormatError(f"{path}: unknown key {unknown[0]!r}; a seqssm config.json holds {sorted(KEYS)}")
    version = raw.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version:
        raise PretrainedFormatError(f"{path}: format_version is {version!r}, expected an integer from 1 to "
                                    f"{FORMAT_VERSION}")
    if version > FORMAT_VERSION:
        raise PretrainedFormatError(f"{path}: format_version {version} is newer than this seqssm reads "
                                    f"({FORMAT_VERSION}); upgrade seqssm")
    model = raw.get("model")
    if not isinstance(model, dict):
        raise PretrainedFormatError(f"{path}: 'model' is {'missing' if model is None else repr(model)}, expected "
                                    "the model config as a JSON object (SequenceModelConfig.to_dict())")
    provenance = raw.get("provenance")
    if provenance is not None and not isinstance(provenance, dict):
        raise PretrainedFormatError(f"{path}: 'provenance' is {provenance!r}, expected a JSON object or no entry")
    try:
        return SequenceModelConfig.from_dict(model)
    except (TypeError, ValueError) as e:  # the config names the entry and the values it takes
        raise PretrainedFormatError(f"{path}: 'model': {e}") from e


def provenance(raw: dict) -> dict | None:
    """The lineage (`seqssm.models.hub.provenance_record`) that config.json `raw` records, or None."""
    return raw.get("provenance")


def map_state_dict(own: dict, config: SequenceModelConfig, tensors: dict, origin: dict, folder: Path):
    """The file holds the model's own keys: checked against the model that config.json describes."""
    return take_tensors(own, {k: k for k in own}, tensors, origin, folder)


def check_writable(config: SequenceModelConfig) -> None:
    """Every SequenceModel config fits a seqssm folder."""


def write(model: nn.Module, folder: Path) -> None:
    """Write config.json and model.safetensors of `model` into `folder`."""
    from seqssm import __version__

    meta = {"format": NAME, "format_version": FORMAT_VERSION, "seqssm_version": __version__,
            "model": model.config.to_dict()}
    if model.provenance:
        meta["provenance"] = model.provenance
    (Path(folder) / CONFIG_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    # safetensors refuses shared or non-contiguous storage; clone so tied weights save as plain copies
    state = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
    write_safetensors(state, Path(folder) / SAFETENSORS_FILE, {"format": NAME})
