"""Reading the files of a model folder, whatever its format: JSON configs, safetensors (whole or sharded, checked
for truncation before use) and pytorch_model.bin (weights_only=True); and writing its weights. Errors name the file.

A model folder reads only its own files (`folder_file`): a shard named by an absolute path or through `..`, or a
link that leads out of the folder, is refused before anything is opened, so that a downloaded folder cannot make
seqssm read (or copy out) any other file of the machine. The links of a Hugging Face cache snapshot into its
repository's `blobs/` are that folder's own files.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path, PurePosixPath

import torch

from seqssm.errors import CheckpointError, PretrainedFormatError
from seqssm.models.resolve import missing_from
from seqssm.models.safe_load import load_torch_file

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_FILE = "pytorch_model.bin"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
CARD_FILE = "README.md"
# what a model folder of any format may hold (fetching by Hub id takes these files only)
MODEL_FILE_PATTERNS = (CONFIG_FILE, "*.safetensors", SAFETENSORS_INDEX, TORCH_FILE, *TOKENIZER_FILES, CARD_FILE)
WEIGHTS_FILES = (SAFETENSORS_INDEX, SAFETENSORS_FILE, TORCH_FILE)  # in the order `read_tensors` tries them
# the safetensors format: an 8-byte little-endian header length, then a JSON object of at most this many bytes
SAFETENSORS_MAX_HEADER = 100_000_000


def folder_file(folder: Path, name: object, named_in: Path | None = None) -> Path:
    """`folder / name` when that is a file of `folder`: a relative name without `..`, not reached through a link
    out of the folder (a Hugging Face cache snapshot's links into its repository's blobs/ are its own); else a
    PretrainedFormatError naming `named_in` (the file that gave the name) or the path. Nothing is opened."""
    folder = Path(folder)
    where = named_in or folder / str(name)
    parts = PurePosixPath(name).parts if isinstance(name, str) else ()
    if not parts or parts[0] == "/" or ".." in parts:
        raise PretrainedFormatError(f"{where}: names the file {name!r}, which is not a file of {folder}: a model "
                                    "folder reads only its own files. Name it by its file name inside the folder.")
    path = folder / name
    real, home = path.resolve(), folder.resolve()
    # huggingface_hub's cache: <repo>/snapshots/<commit>/<name> links to <repo>/blobs/<digest>
    roots = (home, home.parent.parent / "blobs") if home.parent.name == "snapshots" else (home,)
    if not any(real.is_relative_to(root) for root in roots):
        raise PretrainedFormatError(f"{where}: {path.name} links to {real}, which is not in {folder}: a model folder "
                                    "reads only its own files. Copy the file into the folder instead of linking it.")
    return path


def read_json(path: Path) -> dict:
    """A JSON object from `path`, with errors naming the file."""
    if not path.is_file():
        raise PretrainedFormatError(f"{path.parent}: {missing_from(path.parent, f'no {path.name}')}")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PretrainedFormatError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(data, dict):
        raise PretrainedFormatError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def check_safetensors_complete(path: Path) -> None:
    """Refuse a file that is not a safetensors file (its header is no JSON object of tensors with their dtype,
    shape and data_offsets), or that is truncated: then name the first tensor whose bytes run past its end."""
    size = path.stat().st_size
    again = "Write or fetch it again."
    with path.open("rb") as f:
        head = f.read(9)
        if len(head) < 9:
            raise PretrainedFormatError(f"{path}: truncated, or not a safetensors file: {size} bytes, fewer than a "
                                        f"safetensors header. {again}")
        (n,) = struct.unpack("<Q", head[:8])
        if n > SAFETENSORS_MAX_HEADER or 8 + n > size:
            if head[8:] != b"{":  # a safetensors header starts so: a cut-off file keeps that byte, other data not
                raise PretrainedFormatError(f"{path}: not a safetensors file (no JSON header after its first 8 "
                                            f"bytes). {again}")
            raise PretrainedFormatError(f"{path}: truncated inside its safetensors header ({size} bytes, the header "
                                        f"alone declares {8 + n}). {again}")
        f.seek(8)
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise PretrainedFormatError(f"{path}: not a safetensors file (header: {e}). {again}") from e
    if not isinstance(header, dict):
        raise PretrainedFormatError(f"{path}: not a safetensors file: its header is a JSON {type(header).__name__}, "
                                    f"not an object of tensors. {again}")
    for key, info in header.items():
        if key == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            raise PretrainedFormatError(f"{path}: not a safetensors file: its header gives tensor {key!r} no valid "
                                        f"'data_offsets' (got {info!r:.80}). {again}")
        if 8 + n + offsets[1] > size:
            raise PretrainedFormatError(f"{path}: truncated: tensor {key!r} ends at byte {8 + n + offsets[1]}, the "
                                        f"file has {size}. {again}")


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

    Tries model.safetensors.index.json (shards), model.safetensors, pytorch_model.bin, in that order; every shard
    the index names must be a file of the folder (`folder_file`), checked before any is opened.
    """
    folder = Path(folder)
    index = folder_file(folder, SAFETENSORS_INDEX)
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise PretrainedFormatError(f"{index}: no 'weight_map'")
        shards = {shard: folder_file(folder, shard, index) for shard in weight_map.values()}
        tensors, origin = {}, {}
        for shard, path in sorted(shards.items()):
            if not path.is_file():
                key = next(k for k, v in weight_map.items() if v == shard)
                missing = f"shard {shard} (holding {key!r}) is missing from {folder}"
                raise PretrainedFormatError(f"{index}: {missing_from(folder, missing)}")
            for key, value in read_safetensors(path).items():
                tensors[key], origin[key] = value, path
        for key, shard in weight_map.items():
            if key not in tensors:
                raise PretrainedFormatError(f"{shards[shard]}: no tensor {key!r}, which {index.name} places there")
        return tensors, origin
    for name, reader in ((SAFETENSORS_FILE, read_safetensors), (TORCH_FILE, read_torch_state)):
        path = folder_file(folder, name)
        if path.is_file():
            tensors = reader(path)
            return tensors, dict.fromkeys(tensors, path)
    missing = f"no weights: expected {', '.join(WEIGHTS_FILES)}"
    raise PretrainedFormatError(f"{folder}: {missing_from(folder, missing)}")


def write_safetensors(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str]) -> None:
    """Write `tensors` to the .safetensors file `path`, readable as far as the umask allows, like the other files of
    the folder (safetensors itself writes owner-only files, which a shared folder's other users cannot read)."""
    from safetensors.torch import save_file

    save_file(tensors, str(path), metadata=metadata)
    umask = os.umask(0o077)  # reading the umask sets it: meanwhile the strictest, so that no file gets more rights
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


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
