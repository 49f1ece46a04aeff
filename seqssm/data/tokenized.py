"""Text through a pretrained model folder's `tokenizer.json` (the `tokenizers` library): for `seqssm generate`
and for finetuning an imported language model on IMDB-format data with its own vocabulary.

A model folder is a seqssm, Hugging Face Mamba or mamba_ssm folder; only its `tokenizer.json` and the
`vocab_size` in its `config.json` are read here (the model itself is `seqssm.models`' business).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from seqssm.errors import DataFormatError, MissingExtraError

from .io import read_text
from .lra.imdb import IMDBDataModule

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "config.json"


class PretrainedTokenizer:
    """The `tokenizers.Tokenizer` saved in a model folder, with the `encode(text, max_length)` data modules use."""

    def __init__(self, folder: str | Path):
        self.path = Path(folder) / TOKENIZER_FILE
        if not self.path.is_file():
            raise DataFormatError(f"{Path(folder)}: no {TOKENIZER_FILE}; copy the model's tokenizer into the folder "
                                  "(`seqssm convert` copies it along)")
        try:
            from tokenizers import Tokenizer
        except ModuleNotFoundError:
            raise MissingExtraError(f"{self.path}: reading it needs the text extra (tokenizers is missing): "
                                    "pip install 'seqssm[text]'") from None
        try:
            self.tokenizer = Tokenizer.from_file(str(self.path))
        except Exception as e:  # the Rust library raises a bare Exception for every kind of bad file
            raise DataFormatError(f"{self.path}: not a tokenizers file ({' '.join(str(e).split())}); copy the "
                                  "model's own tokenizer.json into the folder") from None
        padding = self.tokenizer.padding
        self.pad_token_id = padding["pad_id"] if padding else 0

    def encode(self, text: str, max_length: int | None = None) -> np.ndarray:
        """int32 ids (n,) of `text`, the first max_length of them when given."""
        ids = self.tokenizer.encode(text).ids
        return np.asarray(ids[:max_length] if max_length is not None else ids, dtype=np.int32)

    def decode(self, ids) -> str:
        """Text of token ids."""
        return self.tokenizer.decode([int(i) for i in ids])


def pretrained_vocab_size(folder: str | Path) -> int:
    """The vocab_size of the model in a seqssm, Hugging Face Mamba or mamba_ssm folder, from its config.json."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise DataFormatError(f"{Path(folder)}: no {CONFIG_FILE}; `pretrained` must be a model folder "
                              "(seqssm, Hugging Face Mamba or mamba_ssm)")
    try:
        config = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise DataFormatError(f"{path}: not valid JSON ({e})") from None
    # a seqssm folder nests the model's arguments under "model"; the other two keep vocab_size at the top
    model = config.get("model") if isinstance(config, dict) and config.get("format") == "seqssm" else config
    vocab_size = model.get("vocab_size") if isinstance(model, dict) else None
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise DataFormatError(f"{path}: the model reads no token ids (vocab_size is {vocab_size!r})")
    return vocab_size


class TokenizedIMDBDataModule(IMDBDataModule):
    """IMDB-format data (any layout `IMDBDataModule` reads) tokenized with the `tokenizer.json` of the pretrained
    folder `pretrained`; vocab_size is that model's, so an imported language model's embedding fits."""

    def __init__(self, pretrained: str, data_dir=None, batch_size: int = 8, num_workers: int = 0,
                 max_length: int = 1024, seed: int = 42, cache_dir=None):
        super().__init__(data_dir, batch_size, num_workers, max_length, seed, cache_dir)
        self.tokenizer = PretrainedTokenizer(pretrained)
        self.vocab_size = pretrained_vocab_size(pretrained)
        if self.tokenizer.tokenizer.get_vocab_size() > self.vocab_size:
            raise DataFormatError(f"{self.tokenizer.path}: {self.tokenizer.tokenizer.get_vocab_size()} tokens, more "
                                  f"than the model's vocab_size {self.vocab_size}")
        self.pad_token_id = self.tokenizer.pad_token_id
        # The parent caches its encoded splits by source and length only: keep each tokenizer's apart.
        digest = hashlib.sha256(self.tokenizer.path.read_bytes()).hexdigest()[:16]
        self.cache_dir = self.cache_dir / f"tokenizer-{digest}"
