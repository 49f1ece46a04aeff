"""Pathfinder / Path-X (LRA): `pathfinder{res}/<level>/imgs/` PNGs listed by `metadata/*.npy`."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from seqssm.errors import DataFormatError

from ..base import RaggedDataset, SPLIT_SEED
from ..cache import cached_splits
from ..missing import missing
from ..images import ImageDataModule
from ..io import read_text
from ..png import read_png
from ..sources import download_command

LEVELS = ("curv_baseline", "curv_contour_length_9", "curv_contour_length_14")
LAYOUT = """<data_dir>/                 (e.g. data/pathfinder, or the LRA release's lra_release/)
  pathfinder{res}/{level}/
    metadata/0.npy, 1.npy, ...  text rows: `imgs/<k> sample_<i>.png <i> <label> ...`
    imgs/<k>/sample_<i>.png     {res}x{res} grayscale PNGs"""


def read_metadata(level_dir: Path) -> list[tuple[Path, int]]:
    """(image path, label) of every metadata row, files in the integer order of their names."""
    meta = level_dir / "metadata"
    numbered = lambda p: (not p.stem.isdigit(), int(p.stem) if p.stem.isdigit() else p.stem)  # noqa: E731
    files = sorted(meta.glob("*.npy"), key=numbered)
    rows = []
    for f in files:
        for lineno, line in enumerate(read_text(f).splitlines(), start=1):
            fields = line.split()
            if not fields:
                continue
            try:
                if len(fields) < 4:
                    raise ValueError(f"{len(fields)} fields, need at least 4")
                label = int(fields[3])
                if label not in (0, 1):
                    raise ValueError(f"label {label} is not 0 or 1")
            except ValueError as e:
                raise DataFormatError(f"{f}:{lineno}: malformed metadata row ({e}): {line[:80]!r}") from None
            rows.append((level_dir / fields[0] / fields[1], label))
    if not rows:
        raise DataFormatError(f"{meta}: {len(files)} metadata file(s) *.npy but no rows in them; the dataset is "
                              "incomplete: unpack or generate it again")
    return rows


def read_pathfinder(level_dir: Path, res: int) -> tuple[list[np.ndarray], list[int]]:
    """(flattened uint8 images (res*res,), labels); unreadable images are skipped with a counted warning."""
    images, labels, bad = [], [], []
    for path, label in tqdm(read_metadata(level_dir), desc=f"reading {level_dir.name}", leave=False):
        try:
            img = read_png(path)
        except (OSError, DataFormatError) as e:
            bad.append(str(e))  # names the file
            continue
        if img.shape != (res, res):
            raise DataFormatError(f"{path}: image is {img.shape}, expected ({res}, {res}); wrong `resolution`?")
        images.append(img.reshape(-1))
        labels.append(label)
    if not images:
        raise DataFormatError(f"{level_dir}: no readable images (all {len(bad)} listed in metadata/ failed, e.g. "
                              f"{bad[0] if bad else None}); unpack or generate the dataset again")
    if bad:
        warnings.warn(f"Pathfinder: skipped {len(bad)} unreadable image(s), e.g. {bad[0]}", stacklevel=2)
    return images, labels


class PathfinderDataModule(ImageDataModule):
    """Pathfinder: (B, res*res) ids 0..255 (categorical) or (B, res*res, 1) in [0, 1] (numeric); 2 classes.

    `resolution=128` is Path-X. Split 80/10/10 at random with seed 42 (S4). `generate=True`
    writes `generate_size` generated images in the same layout when the folder is absent.
    """

    name = "pathfinder"

    def __init__(self, data_dir=None, batch_size: int = 32, num_workers: int = 0, max_length: int | None = None,
                 seed: int = 42, cache_dir=None, resolution: int = 32, mode: str = "categorical",
                 level: str = "curv_contour_length_14", generate: bool = False, generate_size: int = 10_000):
        super().__init__(data_dir, batch_size, num_workers, max_length, seed, cache_dir, mode=mode, channels=1,
                         n_classes=2)
        if level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
        self.resolution = resolution
        self.level = level
        self.generate = generate
        self.generate_size = generate_size

    @property
    def level_dir(self) -> Path:
        return self.data_dir / f"pathfinder{self.resolution}" / self.level

    def prepare_data(self) -> None:
        if self.generate and not (self.level_dir / "metadata").is_dir():
            from ..generators.pathfinder import write_pathfinder

            write_pathfinder(self.data_dir, self.generate_size, seed=self.seed, res=self.resolution, level=self.level)

    def build_splits(self):
        self.prepare_data()
        if not (self.level_dir / "metadata").is_dir():
            raise missing(self.level_dir / "metadata", LAYOUT.format(res=self.resolution, level=self.level),
                          download_command("pathfinder", self.data_dir, f" --resolution {self.resolution}"))
        # every metadata file and every image: an image restored (or removed) after a build builds afresh
        sources = [p for p in (self.level_dir / "metadata", self.level_dir / "imgs") if p.exists()]
        data = cached_splits(self.cache_dir, f"pathfinder{self.resolution}", sources,
                             {"res": self.resolution, "level": self.level},
                             lambda: {"all": read_pathfinder(self.level_dir, self.resolution)})["all"]
        n = len(data)
        n_val = n_test = int(0.1 * n)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(SPLIT_SEED)).numpy()
        n_train = n - n_val - n_test
        d = self.item_width
        return {"train": RaggedDataset(data, perm[:n_train], d),
                "val": RaggedDataset(data, perm[n_train : n_train + n_val], d),
                "test": RaggedDataset(data, perm[n_train + n_val :], d)}
