"""IMDB sentiment, byte level (LRA "text"): local table files, aclImdb folders or the HF cache."""

from __future__ import annotations

import os
from pathlib import Path

from ..base import RaggedDataset, SeqDataModule
from ..cache import cached_splits
from ..errors import DataFormatError, missing
from ..io import read_text
from ..sources import download_command
from .text import read_text_table

LAYOUT = """<data_dir>/                 (e.g. data/imdb), any one of:
  train.parquet, test.parquet  (or .csv / .tsv) with columns `text`, `label` (0 neg, 1 pos)
  aclImdb/{train,test}/{neg,pos}/*.txt   (the Stanford release, aclImdb_v1.tar.gz)
or Hugging Face `datasets` "imdb" already in the local cache (~/.cache/huggingface)."""


def _hf_cache_files(split: str) -> list[Path]:
    """Parquet/Arrow files of the "imdb" dataset in the local Hugging Face caches (never downloads)."""
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    roots = [Path(os.environ["HF_DATASETS_CACHE"])] if "HF_DATASETS_CACHE" in os.environ else []
    roots += [home / "datasets", Path(os.environ.get("HF_HUB_CACHE", home / "hub"))]
    patterns = [
        f"datasets--stanfordnlp--imdb/snapshots/*/plain_text/{split}-*.parquet",
        f"datasets--imdb/snapshots/*/plain_text/{split}-*.parquet",
        f"stanfordnlp___imdb/plain_text/*/*/imdb-{split}*.arrow",
        f"imdb/plain_text/*/*/imdb-{split}*.arrow",
    ]
    for root in roots:
        for pat in patterns:
            found = sorted(root.glob(pat))
            if found:
                return found
    return []


def _acl_split(root: Path) -> tuple[list[str], list[int]]:
    texts, labels = [], []
    for label, sub in ((0, "neg"), (1, "pos")):
        for f in sorted((root / sub).glob("*.txt")):
            texts.append(read_text(f))
            labels.append(label)
    return texts, labels


def locate_imdb(data_dir: Path) -> dict[str, list[Path]]:
    """{"train": files, "test": files} of the first IMDB source found; raises with the layout if none."""
    for ext in (".parquet", ".csv", ".tsv"):
        files = {s: [data_dir / f"{s}{ext}"] for s in ("train", "test")}
        if all(p[0].exists() for p in files.values()):
            return files
    for acl in (data_dir / "aclImdb", data_dir):
        if (acl / "train" / "pos").is_dir() and (acl / "test" / "pos").is_dir():
            return {s: [acl / s] for s in ("train", "test")}
    hf = {s: _hf_cache_files(s) for s in ("train", "test")}
    if all(hf.values()):
        return hf
    raise missing(data_dir, LAYOUT, download_command("imdb", data_dir))


def read_imdb(files: list[Path]) -> tuple[list[str], list[int]]:
    """(texts, labels) of one split from table files or an aclImdb split folder."""
    texts, labels = [], []
    for f in files:
        t, y = _acl_split(f) if f.is_dir() else read_text_table(f)
        texts += t
        labels += y
    if not texts:
        raise DataFormatError(f"no IMDB reviews found in {files}")
    return texts, labels


class IMDBDataModule(SeqDataModule):
    """IMDB: inputs (B, L<=max_length) byte ids (vocab 259, `<pad>`=0, `<eos>` last), 2 classes.

    Validation is the test split (as in S4). `max_length` 4096 by default; the thesis's RoPE
    and bidirectional studies use 1024.
    """

    name = "imdb"

    def __init__(self, data_dir=None, batch_size: int = 32, num_workers: int = 0, max_length: int = 4096,
                 seed: int = 42, cache_dir=None):
        super().__init__(data_dir, batch_size, num_workers, max_length, seed, cache_dir)
        self.use_byte_tokens(n_classes=2)

    def build_splits(self):
        files = locate_imdb(self.data_dir)

        def build():
            out = {}
            for split, fs in files.items():
                texts, labels = read_imdb(fs)
                out[split] = ([self.tokenizer.encode(t, self.max_length) for t in texts], labels)
            return out

        # table files, or the review folders of the aclImdb splits
        sources = [q for fs in files.values() for p in fs for q in ([p / "neg", p / "pos"] if p.is_dir() else [p])]
        data = cached_splits(self.cache_dir, "imdb", sources, {"max_length": self.max_length, "tok": "bytes"}, build)
        return {"train": RaggedDataset(data["train"]), "val": RaggedDataset(data["test"]),
                "test": RaggedDataset(data["test"])}
