"""Text through a pretrained folder's `tokenizer.json` (the `tokenizers` library): for `seqssm generate`
and for finetuning an imported language model on IMDB-format data with its own vocabulary."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from seqssm.data.lra.imdb import IMDBDataModule

TOKENIZER_FILE = "tokenizer.json"


class PretrainedTokenizer:
    """The `tokenizers.Tokenizer` saved in a model folder, with the `encode(text, max_length)` data modules use."""

    def __init__(self, folder: str | Path):
        from tokenizers import Tokenizer

        from .mamba import PretrainedFormatError

        self.path = Path(folder) / TOKENIZER_FILE
        if not self.path.is_file():
            raise PretrainedFormatError(f"{Path(folder)}: no {TOKENIZER_FILE}")
        self.tokenizer = Tokenizer.from_file(str(self.path))
        padding = self.tokenizer.padding
        self.pad_token_id = padding["pad_id"] if padding else 0

    def encode(self, text: str, max_length: int | None = None) -> np.ndarray:
        """int32 ids (n,) of `text`, the first max_length of them when given."""
        ids = self.tokenizer.encode(text).ids
        return np.asarray(ids[:max_length] if max_length is not None else ids, dtype=np.int32)

    def decode(self, ids) -> str:
        """Text of token ids."""
        return self.tokenizer.decode([int(i) for i in ids])


class TokenizedIMDBDataModule(IMDBDataModule):
    """IMDB-format data (any layout `IMDBDataModule` reads) tokenized with the `tokenizer.json` of the pretrained
    folder `pretrained`; vocab_size is that model's, so an imported language model's embedding fits."""

    def __init__(self, pretrained: str, data_dir=None, batch_size: int = 8, num_workers: int = 0,
                 max_length: int = 1024, seed: int = 42, cache_dir=None):
        from ..hub import CONFIG_FILE, read_config
        from .mamba import detect_format, read_foreign_config

        super().__init__(data_dir, batch_size, num_workers, max_length, seed, cache_dir)
        self.tokenizer = PretrainedTokenizer(pretrained)
        seqssm = detect_format(pretrained) == "seqssm"
        config = read_config(pretrained) if seqssm else read_foreign_config(pretrained)[1]
        if config.get("vocab_size") is None:
            raise ValueError(f"{Path(pretrained) / CONFIG_FILE}: the model reads no token ids (vocab_size is unset)")
        self.vocab_size = config["vocab_size"]
        if self.tokenizer.tokenizer.get_vocab_size() > self.vocab_size:
            raise ValueError(f"{self.tokenizer.path}: {self.tokenizer.tokenizer.get_vocab_size()} tokens, more "
                             f"than the model's vocab_size {self.vocab_size}")
        self.pad_token_id = self.tokenizer.pad_token_id
        # The parent caches its encoded splits by source and length only: keep each tokenizer's apart.
        digest = hashlib.sha256(self.tokenizer.path.read_bytes()).hexdigest()[:16]
        self.cache_dir = self.cache_dir / f"tokenizer-{digest}"
