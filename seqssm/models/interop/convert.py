"""Rewriting a pretrained model in another format (what `seqssm convert` does), and the settings that make
`seqssm fit` rebuild its network for finetuning.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from seqssm.models.config import SequenceModelConfig
from seqssm.models.formats.files import TOKENIZER_FILES, folder_file
from seqssm.models.hub import check_target, check_writable, staged_folder, write_pretrained

# SequenceModel settings that depend on the task (head, pooling, inputs) rather than the pretrained network
TASK_SETTINGS = ("vocab_size", "d_input", "n_classes", "pooling", "tie_embeddings")


def architecture_overrides(config: SequenceModelConfig) -> dict:
    """The `model_overrides` that make `seqssm fit` build the network of `config` (the task sets head and inputs)."""
    return {k: v for k, v in config.to_dict().items() if k not in TASK_SETTINGS}


def copy_tokenizer(src: str | Path, dst: str | Path) -> list[str]:
    """Copy the tokenizer files of folder `src` (its own files only: `folder_file`) into `dst`; returns the names
    copied."""
    copied = []
    for name in TOKENIZER_FILES if Path(src).is_dir() else ():
        path = folder_file(Path(src), name)
        if path.is_file():
            shutil.copyfile(path, Path(dst) / name)
            copied.append(name)
    return copied


def convert_folder(src: str | Path, dst: str | Path, to: str, overwrite: bool = False,
                   revision: str | None = None, cache_dir: str | Path | None = None):
    """Write the model of `src` (a seqssm, Hugging Face Mamba or mamba_ssm folder, a task checkpoint or a Hub id)
    to `dst` in format `to` ("hf" or "seqssm"), with its tokenizer files -> (the model, the tokenizer files
    copied). A non-empty `dst` is refused unless `overwrite`; everything is checked before anything is written."""
    from seqssm.models.loading import build, read_pretrained

    check_target(dst, overwrite)  # before reading SRC
    pretrained = read_pretrained(src, "SRC", revision, cache_dir)  # all of SRC is read before anything is written
    model = build(pretrained)
    check_writable(model, to)
    with staged_folder(dst, overwrite) as stage:
        write_pretrained(model, stage, to)
        copied = copy_tokenizer(pretrained.path, stage)
    return model, copied
