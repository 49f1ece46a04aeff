"""ListOps (LRA): `listops-1000/basic_{train,val,test}.tsv`, S4 tokenisation, 10 classes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..base import RaggedDataset, SeqDataModule
from ..cache import cached_splits
from ..missing import missing
from ..io import parse_int_label, read_tsv
from ..sources import download_command
from ..tokenizers import ListOpsTokenizer

LAYOUT = """<data_dir>/                (e.g. data/listops, or lra_release/listops-1000)
  basic_train.tsv           header `Source<TAB>Target`, one expression per row
  basic_val.tsv
  basic_test.tsv"""
SPLIT_FILES = {"train": "basic_train.tsv", "val": "basic_val.tsv", "test": "basic_test.tsv"}


def read_listops(path: str | Path, tokenizer: ListOpsTokenizer, max_length: int | None = None
                 ) -> list[tuple[np.ndarray, int]]:
    """(token ids, target) rows of one LRA ListOps TSV; a row that is not ListOps (a token outside the tokenizer's
    vocabulary, a label outside 0-9) raises DataFormatError naming the file, the line and the token."""
    return read_tsv(path, 2, header=("Source", "Target"),
                    parse=lambda f: (tokenizer.encode(f[0], max_length), parse_int_label(f[1], 10)))


class ListOpsDataModule(SeqDataModule):
    """ListOps: inputs (B, L<=2048) ids over a fixed vocab of 18 (`<pad>`=0), 10 classes.

    `generate=True` writes a generated dataset in LRA's layout into `data_dir` when its
    files are absent (sizes from `generate_sizes`, LRA's defaults 96000/2000/2000).
    """

    name = "listops"

    def __init__(self, data_dir=None, batch_size: int = 32, num_workers: int = 0, max_length: int = 2048,
                 seed: int = 42, cache_dir=None, generate: bool = False,
                 generate_sizes: tuple[int, int, int] = (96_000, 2_000, 2_000)):
        super().__init__(data_dir, batch_size, num_workers, max_length, seed, cache_dir)
        self.tokenizer = ListOpsTokenizer()
        self.generate = generate
        self.generate_sizes = tuple(generate_sizes)
        self.vocab_size = self.tokenizer.vocab_size
        self.n_classes = 10
        self.pad_token_id = self.tokenizer.pad_token_id

    def prepare_data(self) -> None:
        if self.generate and not all((self.data_dir / f).exists() for f in SPLIT_FILES.values()):
            from ..generators.listops import write_listops

            n_train, n_val, n_test = self.generate_sizes
            write_listops(self.data_dir, n_train, n_val, n_test, seed=self.seed)

    def build_splits(self):
        self.prepare_data()
        paths = {}
        for split, fname in SPLIT_FILES.items():
            paths[split] = self.data_dir / fname
            if not paths[split].exists():
                raise missing(paths[split], LAYOUT, download_command("listops", self.data_dir))

        def build():
            out = {}
            for split, path in paths.items():
                rows = read_listops(path, self.tokenizer, self.max_length)
                out[split] = ([ids for ids, _ in rows], [t for _, t in rows])
            return out

        # "strict": caches built before unknown tokens were refused hold them as <unk>; they are built afresh
        spec = {"max_length": self.max_length, "tok": "s4-listops-strict"}
        data = cached_splits(self.cache_dir, "listops", paths.values(), spec, build)
        return {split: RaggedDataset(data[split]) for split in SPLIT_FILES}
