"""Shared LightningDataModule base and the dataset that serves cached token arrays."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from seqssm.errors import ConfigError

from .cache import Ragged
from .collate import PadCollate
from .missing import path_problem
from .tokenizers import ByteTokenizer

SPLIT_SEED = 42  # S4's seed for held-out validation splits: keeps our splits equal to the published runs


class RaggedDataset(Dataset):
    """Items `(x, label)`: x (L_i,) ids, or (L_i, d) raw pixels when `d` is given."""

    def __init__(self, data: Ragged, indices: np.ndarray | None = None, d: int | None = None,
                 permutation: np.ndarray | None = None):
        self.data = data
        self.indices = np.arange(len(data)) if indices is None else np.asarray(indices)
        self.d = d
        self.permutation = permutation

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int):
        j = int(self.indices[i])
        x = self.data.seq(j)
        if self.d is not None:
            x = x.reshape(-1, self.d)
        if self.permutation is not None:
            x = x[self.permutation]
        return x, int(self.data.labels[j])


def holdout_split(n: int, fraction: float, seed: int = SPLIT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, held-out indices) as torch's `random_split(n, [n - k, k])` with `seed`."""
    if not 0 <= fraction < 1:
        raise ValueError(f"val_fraction must be in [0, 1), got {fraction!r}")
    k = int(round(n * fraction))
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).numpy()
    return perm[: n - k], perm[n - k :]


class SeqDataModule(L.LightningDataModule):
    """Base: common arguments, dataloaders and padding; subclasses fill `self.splits` in `setup`.

    Subclasses set in `__init__` the attributes models are built from: `vocab_size` (None if
    numeric), `d_input` (None if categorical), `n_classes`, `pad_token_id`, `mask_token_id`.
    """

    name: str = "dataset"

    def __init__(self, data_dir: str | Path | None = None, batch_size: int = 32, num_workers: int = 0,
                 max_length: int | None = None, seed: int = 42, cache_dir: str | Path | None = None):
        super().__init__()
        for name, value, least in (("batch_size", batch_size, 1), ("num_workers", num_workers, 0),
                                   ("max_length", max_length, 1)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        self.data_dir = Path(data_dir) if data_dir is not None else Path("data") / self.name
        problem = path_problem(self.data_dir, folder=True)
        if problem:
            raise ConfigError(f"{type(self).__name__}: data_dir = {str(self.data_dir)!r} cannot hold the dataset: "
                              f"{problem}; point data_dir at a folder (or a path where one can be made)")
        self.cache_dir = Path(cache_dir) if cache_dir is not None else self.data_dir / ".cache"
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.max_length = max_length
        self.seed = seed
        self.vocab_size: int | None = None
        self.d_input: int | None = None
        self.n_classes: int | None = None
        self.pad_token_id: int | None = None
        self.mask_token_id: int | None = None
        self.splits: dict[str, Dataset] = {}

    def use_byte_tokens(self, n_classes: int) -> None:
        """Byte-level text classes (IMDB, AAN): `self.tokenizer` a ByteTokenizer, with its vocabulary size
        and pad id, and `n_classes`."""
        self.tokenizer = ByteTokenizer()
        self.vocab_size, self.pad_token_id = self.tokenizer.vocab_size, self.tokenizer.pad_token_id
        self.n_classes = n_classes

    # -- what subclasses provide -------------------------------------------------------------
    def build_splits(self) -> dict[str, Dataset]:
        """Return {"train", "val", "test"} datasets of `(array, label)` items."""
        raise NotImplementedError

    def collate(self) -> Callable:
        """Padding collate for this dataset (token ids by default)."""
        return PadCollate(pad_value=self.pad_token_id or 0)

    # -- Lightning hooks ---------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        if not self.splits:
            self.splits = self.build_splits()

    def _loader(self, split: str, shuffle: bool, sampler=None) -> DataLoader:
        self.setup()
        return DataLoader(
            self.splits[split],
            batch_size=self.batch_size,
            shuffle=shuffle if sampler is None else None,
            sampler=sampler,
            num_workers=self.num_workers,
            collate_fn=self.collate(),
            persistent_workers=self.num_workers > 0,
            generator=torch.Generator().manual_seed(self.seed) if shuffle else None,
            drop_last=False,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
