"""Rewriting a pretrained folder in another format (what `seqssm convert` does), and the settings that make
`seqssm fit` rebuild its network for finetuning.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from seqssm.models.config import SequenceModelConfig
from seqssm.models.hub import check_target, check_writable, staged_folder, write_pretrained
from seqssm.models.interop.mamba import TOKENIZER_FILES

# SequenceModel settings that depend on the task (head, pooling, inputs) rather than the pretrained network
TASK_SETTINGS = ("vocab_size", "d_input", "n_classes", "pooling", "tie_embeddings")


def architecture_overrides(config: SequenceModelConfig) -> dict:
    """The `model_overrides` that make `seqssm fit` build the network of `config` (the task sets head and inputs)."""
    return {k: v for k, v in config.to_dict().items() if k not in TASK_SETTINGS}


def copy_tokenizer(src: str | Path, dst: str | Path) -> list[str]:
    """Copy the tokenizer files of folder `src` into `dst`; returns the names copied."""
    copied = []
    for name in TOKENIZER_FILES:
        if (Path(src) / name).is_file():
            shutil.copyfile(Path(src) / name, Path(dst) / name)
            copied.append(name)
    return copied


def convert_folder(src: str | Path, dst: str | Path, to: str, overwrite: bool = False):
    """Write the model of folder `src` (seqssm, Hugging Face Mamba or mamba_ssm) to `dst` in format `to` ("hf" or
    "seqssm"), with its tokenizer files -> (the model, the tokenizer files copied). A non-empty `dst` is refused
    unless `overwrite`; everything is checked before anything is written, and `dst` is replaced whole."""
    from seqssm.models.sequence_model import SequenceModel

    check_target(dst, overwrite)  # before reading SRC
    model = SequenceModel.from_pretrained(src)  # all of SRC is read before anything is written
    check_writable(model, to)
    with staged_folder(dst, overwrite) as stage:
        write_pretrained(model, stage, to)
        copied = copy_tokenizer(src, stage)
    return model, copied
