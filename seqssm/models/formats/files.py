"""Reading the files of a model folder, whatever its format: JSON configs, safetensors (whole or sharded, checked
for truncation before use) and pytorch_model.bin (weights_only=True). Errors name the file."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

from seqssm.errors import CheckpointError, PretrainedFormatError
from seqssm.models.safe_load import load_torch_file

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_FILE = "pytorch_model.bin"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
CARD_FILE = "README.md"
# what a model folder of any format may hold (fetching by Hub id takes these files only)
MODEL_FILE_PATTERNS = (CONFIG_FILE, "*.safetensors", SAFETENSORS_INDEX, TORCH_FILE, *TOKENIZER_FILES, CARD_FILE)


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


def check_safetensors_complete(path: Path) -> None:
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

    path = Path(path)
    if not path.is_file():
        raise PretrainedFormatError(f"{path.parent}: no {path.name}")
    check_safetensors_complete(path)
    try:
        return load_file(str(path))
    except SafetensorError as e:
        raise PretrainedFormatError(f"{path}: unreadable safetensors file ({e})") from e


def read_torch_state(path: Path) -> dict[str, torch.Tensor]:
    """The state dict (names -> tensors) that torch.save wrote to `path`, read with weights_only=True."""
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
    for name, reader in ((SAFETENSORS_FILE, read_safetensors), (TORCH_FILE, read_torch_state)):
        path = folder / name
        if path.is_file():
            tensors = reader(path)
            return tensors, dict.fromkeys(tensors, path)
    raise PretrainedFormatError(f"{folder}: no weights: expected {SAFETENSORS_FILE}, {SAFETENSORS_INDEX} or "
                                f"{TORCH_FILE}")


def weights_file(folder: Path, origin: dict[str, Path]) -> Path:
    """The file to name for a tensor that no file holds: the index of a sharded folder, else the one weights file."""
    index = folder / SAFETENSORS_INDEX
    return index if index.is_file() else next(iter(origin.values()), folder)


def take_tensors(own: dict[str, torch.Tensor], names: dict[str, str], tensors: dict[str, torch.Tensor],
                 origin: dict[str, Path], folder: Path, tied_head: str | None = None) -> dict[str, torch.Tensor]:
    """The state dict for a model whose state is `own` (shapes only needed) from a file's `tensors`, where
    `names` maps each model key to the key the file stores it under; every key and shape is checked, and errors
    name the file, the tensor and the shape config.json implies. `tied_head`: the model key of a head tied to the
    embedding, which the file may leave out (and must equal the embedding if it holds it)."""
    folder = Path(folder)
    state = {}
    for key, ext in names.items():
        if key == tied_head:
            continue
        if ext not in tensors:
            raise PretrainedFormatError(f"{weights_file(folder, origin)}: missing tensor {ext!r} (seqssm {key!r}), "
                                        f"which the model of {folder / CONFIG_FILE} has")
        value = tensors[ext]
        if value.shape != own[key].shape:
            raise PretrainedFormatError(
                f"{origin[ext]}: tensor {ext!r} has shape {list(value.shape)}, but {folder / CONFIG_FILE} describes "
                f"a model whose {key!r} is {list(own[key].shape)}: config.json and the weights disagree")
        state[key] = value
    if tied_head is not None:
        head, embedding = names[tied_head], names["embedding.weight"]
        if head in tensors and head != embedding and not torch.equal(tensors[head], state["embedding.weight"]):
            raise PretrainedFormatError(f"{origin[head]}: {head!r} differs from the embedding, but the config ties "
                                        "them; set the tie setting to false to load an untied head")
        state[tied_head] = state["embedding.weight"]
    extra = sorted(set(tensors) - set(names.values()))
    if extra:
        raise PretrainedFormatError(f"{origin[extra[0]]}: unexpected tensor {extra[0]!r} (no place in the model of "
                                    f"{folder / CONFIG_FILE}){f', and {len(extra) - 1} more' if len(extra) > 1 else ''}")
    return state
