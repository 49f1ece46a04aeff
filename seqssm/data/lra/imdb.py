"""IMDB sentiment at the character level (LRA "text"): local table files, aclImdb folders or the HF cache.

Two vocabularies: UTF-8 bytes (`tokens="bytes"`, 259 ids, known without data) or S4's characters
(`tokens="chars"`: the training split's characters seen at least 15 times, plus 3 specials; about 135 ids),
which the recipes of Ulbaek 2024 use: that thesis ran S4's IMDB loader, so its table 6 parameter counts hold
an embedding of that vocabulary.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from seqssm.errors import DataFormatError
from seqssm.files import atomic_write

from ..base import RaggedDataset, SeqDataModule
from ..cache import cache_key, cached_splits, source_stamp
from ..missing import missing
from ..io import read_text
from ..sources import download_command
from ..tokenizers import CharVocabulary
from .text import read_text_table

TOKENS = ("bytes", "chars")

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


def source_paths(files: list[Path]) -> list[Path]:
    """The files whose stamp identifies an IMDB split: table files, or an aclImdb split's review folders."""
    return [q for p in files for q in ([p / "neg", p / "pos"] if p.is_dir() else [p])]


class IMDBDataModule(SeqDataModule):
    """IMDB: inputs (B, L<=max_length) token ids (`<pad>`=0, `<eos>` last), 2 classes.

    tokens: "bytes" (default; vocab 259: UTF-8 bytes after 3 specials) or "chars" (S4's character vocabulary,
    `CharVocabulary`: built here from the training split's first max_length - 1 characters per review with
    `min_freq`, cached under cache_dir; so the data must be there when the module is made).
    Validation is the test split (as in S4). `max_length` 4096 by default; Ulbaek 2024's RoPE
    and bidirectional studies use 1024.
    """

    name = "imdb"

    def __init__(self, data_dir=None, batch_size: int = 32, num_workers: int = 0, max_length: int = 4096,
                 seed: int = 42, cache_dir=None, tokens: str = "bytes", min_freq: int = CharVocabulary.MIN_FREQ):
        super().__init__(data_dir, batch_size, num_workers, max_length, seed, cache_dir)
        if tokens not in TOKENS:
            raise ValueError(f"tokens must be one of {TOKENS}, got {tokens!r}")
        self.tokens, self.min_freq = tokens, min_freq
        if tokens == "bytes":
            self.use_byte_tokens(n_classes=2)
        else:
            self.tokenizer = self.char_vocabulary()
            self.vocab_size, self.pad_token_id = self.tokenizer.vocab_size, self.tokenizer.pad_token_id
            self.n_classes = 2

    def char_vocabulary(self) -> CharVocabulary:
        """S4's character vocabulary of this data's training split at this max_length and min_freq (read from the
        cache, or built from the reviews and cached; any change of the training files builds it afresh)."""
        train = source_paths(locate_imdb(self.data_dir)["train"])
        spec = {"max_length": self.max_length, "min_freq": self.min_freq, "sources": source_stamp(train)}
        path = self.cache_dir / f"imdb-chars-{cache_key(spec)}.json"
        if path.is_file():
            try:
                return CharVocabulary(json.loads(path.read_text(encoding="utf-8"))["characters"])
            except (ValueError, KeyError, TypeError):
                pass  # unreadable: build it again below
        texts, _ = read_imdb(locate_imdb(self.data_dir)["train"])
        vocab = CharVocabulary.build(texts, self.min_freq, self.max_length)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps({**spec, "characters": vocab.characters}, ensure_ascii=False))
        return vocab

    def build_splits(self):
        files = locate_imdb(self.data_dir)

        def build():
            out = {}
            for split, fs in files.items():
                texts, labels = read_imdb(fs)
                out[split] = ([self.tokenizer.encode(t, self.max_length) for t in texts], labels)
            return out

        tok = "bytes" if self.tokens == "bytes" else {"chars": self.tokenizer.characters}
        sources = [q for fs in files.values() for q in source_paths(fs)]
        data = cached_splits(self.cache_dir, "imdb", sources, {"max_length": self.max_length, "tok": tok}, build)
        return {"train": RaggedDataset(data["train"]), "val": RaggedDataset(data["test"]),
                "test": RaggedDataset(data["test"])}
