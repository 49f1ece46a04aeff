"""AAN document retrieval (LRA): `new_aan_pairs.{train,eval,test}.tsv`, both documents in one sequence."""

from __future__ import annotations

import numpy as np

from ..base import RaggedDataset, SeqDataModule
from ..cache import cached_splits
from ..missing import missing
from ..io import parse_int_label, read_tsv
from ..sources import download_command

LAYOUT = """<data_dir>/                 (e.g. data/aan, or lra_release/tsv_data)
  new_aan_pairs.train.tsv     no header; columns label, id1, id2, text1, text2
  new_aan_pairs.eval.tsv
  new_aan_pairs.test.tsv"""
SPLIT_FILES = {"train": "new_aan_pairs.train.tsv", "val": "new_aan_pairs.eval.tsv", "test": "new_aan_pairs.test.tsv"}
TEXT_CUT = 10_000  # LRA cuts raw text to 10000 characters before encoding


def read_aan(path) -> list[tuple[int, str, str]]:
    """(label, text1, text2) rows of one AAN TSV."""
    return read_tsv(path, 5, parse=lambda f: (parse_int_label(f[0], 2), f[3], f[4]))


class AANDataModule(SeqDataModule):
    """AAN: inputs (B, L<=2*max_length) byte ids: doc1 + `<sep>`, doc2 + `<eos>`, each <= max_length; 2 classes."""

    name = "aan"

    def __init__(self, data_dir=None, batch_size: int = 32, num_workers: int = 0, max_length: int = 4000,
                 seed: int = 42, cache_dir=None):
        super().__init__(data_dir, batch_size, num_workers, max_length, seed, cache_dir)
        self.use_byte_tokens(n_classes=2)

    def encode_pair(self, text1: str, text2: str) -> np.ndarray:
        """ids (<= 2 * max_length,): each document cut to `max_length` tokens including its end token."""
        tok = self.tokenizer
        a = tok.encode(text1[:TEXT_CUT], self.max_length, end=tok.sep_token_id)
        b = tok.encode(text2[:TEXT_CUT], self.max_length, end=tok.eos_token_id)
        return np.concatenate([a, b])

    def build_splits(self):
        paths = {s: self.data_dir / f for s, f in SPLIT_FILES.items()}
        for p in paths.values():
            if not p.exists():
                raise missing(p, LAYOUT, download_command("aan", self.data_dir))

        def build():
            out = {}
            for split, path in paths.items():
                rows = read_aan(path)
                out[split] = ([self.encode_pair(t1, t2) for _, t1, t2 in rows], [y for y, _, _ in rows])
            return out

        spec = {"max_length": self.max_length, "tok": "bytes-pair"}
        data = cached_splits(self.cache_dir, "aan", paths.values(), spec, build)
        return {split: RaggedDataset(data[split]) for split in SPLIT_FILES}
