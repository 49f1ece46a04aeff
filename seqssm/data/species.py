"""HyenaDNA's species classification data: random windows of per-chromosome FASTA genomes.

Layout: `data_dir/{species}/chr{C}.fna` (or `.fa`; a `.gz` is unzipped beside it once).
Each item: pick a species uniformly, one of its split's chromosomes uniformly, a start
uniformly, and read a window of `max_length` bases. Two window rules:

- `sampling="hyenadna"` (default, comparable with HyenaDNA): start in [0, len - L], slice
  `[start, min(start + L, len - L))`, left-padded with N to L (HyenaDNA's code, including
  its truncation near the chromosome end).
- `sampling="thesis"`: start in [0, len), slice `[start, start + L)`; a window running past
  the end is right-padded with N (`end_token="N"`), or cut short and padded with [PAD]
  through the batch `lengths` (`end_token="pad"`).
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from pathlib import Path
from typing import Sequence

import numpy as np
from torch.utils.data import Dataset, Sampler

from seqssm.errors import DataFormatError

from .base import SeqDataModule
from .collate import PadCollate
from .missing import missing
from .extract import gunzip_file
from .io import not_utf8
from .sources import download_command
from .species_splits import _STD_TEST, _STD_VALID, DEFAULT_SPECIES, SPECIES_SPLITS
from .tokenizers import DNATokenizer

TASKS = ("classification", "ntp", "mlm")
SAMPLINGS = ("hyenadna", "thesis")
SUBSETS = ("all", "pretrain", "finetune")
FINETUNE_CHOICES = ("smallest", "first")
_SPLIT_NAMES = {"train": "train", "val": "valid", "test": "test"}


def find_chromosome(species_dir: Path, chrom: str, fix: str = "download it again") -> Path | None:
    """Path of `chr{chrom}.fna|.fa`, unzipping a `.gz` beside it if that is all there is (a truncated or corrupt
    one raises CorruptFileError ending in `fix`)."""
    for ext in (".fna", ".fa"):
        if (species_dir / f"chr{chrom}{ext}").exists():
            return species_dir / f"chr{chrom}{ext}"
    for ext in (".fna", ".fa"):
        gz = species_dir / f"chr{chrom}{ext}.gz"
        if gz.exists():
            out = species_dir / f"chr{chrom}{ext}"
            gunzip_file(gz, out, fix)
            return out
    return None


class Chromosome:
    """First FASTA record of one file, opened lazily with pyfaidx once per process."""

    def __init__(self, path: Path, species: str, name: str, fix: str = "download it again"):
        self.path, self.species, self.name = Path(path), species, name
        self._fasta, self._pid, self._key = None, None, None
        self.length = len(self._open(fix))
        if self.length == 0:
            raise DataFormatError(f"{self.path}: no bases (its first record `>{self._key}` is empty): the file is "
                                  f"truncated or not a genome; {fix}")

    def _open(self, fix: str):
        try:
            from pyfaidx import FastaIndexingError
        except ImportError:
            raise ImportError("reading FASTA genomes needs pyfaidx: pip install 'seqssm[dna]'") from None
        if self.path.stat().st_size == 0:
            raise DataFormatError(f"{self.path}: empty file (0 bytes); {fix}")
        try:
            return self._record()
        except UnicodeDecodeError:
            raise not_utf8(self.path) from None
        except (FastaIndexingError, RuntimeError) as e:
            # pyfaidx raises RuntimeError (asking for a bug report) for blank lines it cannot place
            reason = " ".join(str(e).split()) if isinstance(e, FastaIndexingError) else "blank lines inside a record"
            raise DataFormatError(
                f"{self.path}: cannot index this FASTA file ({reason}). A FASTA file starts with a "
                "'>' header line, and every sequence line of a record but the last has the same length: re-wrap it "
                f"(e.g. `seqkit seq -w 80 in.fna > out.fna`) or {fix}") from None
        except (ValueError, IndexError, KeyError, StopIteration) as e:  # pyfaidx trusts a .fai newer than the FASTA
            raise DataFormatError(f"{self.path}: its index {self.path}.fai is unreadable or empty ({e!r}); delete "
                                  f"{self.path}.fai so that it is rebuilt") from None

    def _record(self):
        # Reopen after a fork: worker processes must not share one file offset.
        if self._fasta is None or self._pid != os.getpid():
            from pyfaidx import Fasta

            self._fasta = Fasta(str(self.path), as_raw=True, sequence_always_upper=True)
            self._key = next(iter(self._fasta.keys()))
            self._pid = os.getpid()
        return self._fasta[self._key]

    def read(self, start: int, end: int) -> str:
        """Bases [start, end) as an upper-case string."""
        return self._record()[start:end] if end > start else ""

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_fasta"] = None
        return state


class Region:
    """The first `length` bases of a chromosome (all of it unless limited)."""

    def __init__(self, chrom: Chromosome, length: int | None = None):
        self.chrom = chrom
        self.length = chrom.length if length is None else min(length, chrom.length)


def window_bounds(rng: np.random.Generator, n: int, L: int, sampling: str) -> tuple[int, int]:
    """(start, end) of the bases to read from a region of `n` bases for a window of `L`."""
    if sampling == "hyenadna":
        right = n - L
        if right <= 0:  # a region of exactly one window: take it all (HyenaDNA's slice would be empty)
            return 0, n
        start = int(rng.integers(0, right + 1))
        return start, min(start + L, right)
    start = int(rng.integers(0, n))
    return start, min(start + L, n)


class SpeciesDataset(Dataset):
    """Random windows: item `key` -> (ids (L,) or (n<=L,) uint8, species index or None).

    Items are a pure function of (seed, split, key), so validation is the same every epoch,
    and training sees new windows each epoch through `EpochKeySampler`.
    """

    def __init__(self, regions: list[list[Region]], max_length: int, size: int, seed: int, split: str,
                 sampling: str = "hyenadna", end_token: str = "N", reverse: bool = False, labelled: bool = True):
        self.regions, self.L, self.size, self.seed = regions, max_length, size, seed
        self.split_id = list(_SPLIT_NAMES).index(split)
        self.sampling, self.end_token, self.reverse, self.labelled = sampling, end_token, reverse, labelled
        self.tokenizer = DNATokenizer()
        self.replaced: Counter = Counter()  # non-ACGTN characters turned into N, per (species, chr)

    def __len__(self) -> int:
        return self.size

    def sample(self, key: int) -> tuple[int, Region, int, int]:
        """(species index, region, start, end) drawn for `key`."""
        rng = np.random.default_rng([self.seed, self.split_id, key])
        s = int(rng.integers(len(self.regions)))
        region = self.regions[s][int(rng.integers(len(self.regions[s])))]
        start, end = window_bounds(rng, region.length, self.L, self.sampling)
        return s, region, start, end

    def __getitem__(self, key: int):
        s, region, start, end = self.sample(int(key))
        ids, n_bad = self.tokenizer.encode(region.chrom.read(start, end))
        if n_bad:
            where = (region.chrom.species, region.chrom.name)
            if not self.replaced[where]:
                warnings.warn(f"{region.chrom.path}: {n_bad} non-ACGTN character(s) in window [{start}, {end}) "
                              "replaced by N; later replacements are counted in SpeciesDataset.replaced", stacklevel=2)
            self.replaced[where] += n_bad
        short = self.L - len(ids)
        if short > 0 and not (self.sampling == "thesis" and self.end_token == "pad"):
            pad = np.full(short, self.tokenizer.n_token_id, dtype=np.uint8)
            # HyenaDNA left-pads (rjust); Ulbaek 2024's rule pads past the end, on the right
            ids = np.concatenate([pad, ids] if self.sampling == "hyenadna" else [ids, pad])
        if self.reverse:
            ids = ids[::-1].copy()
        return ids, (s if self.labelled else None)


class EpochKeySampler(Sampler):
    """Keys epoch*n .. epoch*n + n-1, so each training epoch draws fresh windows (Lightning calls set_epoch)."""

    def __init__(self, n: int):
        self.n, self.epoch = n, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        return iter(range(self.epoch * self.n, (self.epoch + 1) * self.n))

    def __len__(self) -> int:
        return self.n


class SpeciesDataModule(SeqDataModule):
    """Species windows: inputs (B, max_length) ids over HyenaDNA's vocab of 12 ([PAD]=4, [MASK]=3).

    `task="classification"` adds labels (species index, `n_classes = len(species)`); "ntp" and
    "mlm" yield inputs only. `train_subset` picks the training chromosomes: "all" (HyenaDNA),
    or Ulbaek 2024's limited-finetune split (16.5-16.6): "finetune" = the first `finetune_bases`
    of one training chromosome per species, "pretrain" = every other training chromosome of every
    species. Which chromosome (`finetune_chromosomes`): "smallest" (default) the shortest training
    chromosome of each species, by length in the data (ties: the first in the split), as the Ulbaek 2024 thesis
    authors' code chose them; "first" the split's first training chromosome ("2"); or a dict
    {species: chromosome} (species it leaves out take the smallest). Validation and test always
    use the validation/test chromosomes. `generate=True` writes synthetic genomes
    (`generate_length` bases per chromosome) into `data_dir` for species that are absent, when `data_dir` is empty
    or was generated; a folder of other (real) genomes is refused, naming the species it lacks.
    """

    name = "species"

    def __init__(self, data_dir=None, batch_size: int = 32, num_workers: int = 0, max_length: int = 1024,
                 seed: int = 42, cache_dir=None, species: Sequence[str] = DEFAULT_SPECIES,
                 task: str = "classification", sampling: str = "hyenadna", end_token: str = "N",
                 reverse: bool = False, train_subset: str = "all", finetune_bases: int = 1_000_000,
                 finetune_chromosomes: str | dict[str, str] = "smallest", train_size: int = 100_000,
                 val_size: int = 2048, test_size: int = 2048, generate: bool = False,
                 generate_length: int = 200_000):
        super().__init__(data_dir, batch_size, num_workers, max_length, seed, cache_dir)
        if max_length is None:
            raise ValueError("max_length (bases per window) must be given for species windows")
        for value, allowed, what in ((task, TASKS, "task"), (sampling, SAMPLINGS, "sampling"),
                                     (train_subset, SUBSETS, "train_subset"), (end_token, ("N", "pad"), "end_token")):
            if value not in allowed:
                raise ValueError(f"{what} must be one of {allowed}, got {value!r}")
        unknown = [s for s in species if s not in SPECIES_SPLITS]
        if unknown:
            raise ValueError(f"unknown species {unknown}; known: {sorted(SPECIES_SPLITS)}")
        self.species = list(species)
        self.task, self.sampling, self.end_token, self.reverse = task, sampling, end_token, reverse
        self.train_subset, self.finetune_bases = train_subset, finetune_bases
        self.finetune_chromosomes = self._check_finetune_choice(finetune_chromosomes)
        self._finetune: dict[str, str] = {}  # species -> its finetuning chromosome, once resolved
        self._opened: dict[tuple[str, str], Chromosome] = {}
        self.sizes = {"train": train_size, "val": val_size, "test": test_size}
        for split, size in self.sizes.items():
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"{split}_size must be an integer >= 1 (windows per epoch), got {size!r}")
        self.generate, self.generate_length = generate, generate_length
        self.tokenizer = DNATokenizer()
        self.vocab_size = self.tokenizer.vocab_size
        self.pad_token_id = self.tokenizer.pad_token_id
        self.mask_token_id = self.tokenizer.mask_token_id
        self.cls_token_id = self.tokenizer.cls_token_id
        self.n_classes = len(self.species) if task == "classification" else None

    def prepare_data(self) -> None:
        if self.generate:
            absent = [s for s in self.species if not (self.data_dir / s).is_dir()]
            if absent:
                from .generators.genome import check_generated_folder, write_genomes

                check_generated_folder(self.data_dir, absent)
                write_genomes(self.data_dir, absent, chrom_length=self.generate_length, seed=self.seed)

    def _check_finetune_choice(self, choice: str | dict[str, str]) -> str | dict[str, str]:
        if isinstance(choice, str):
            if choice not in FINETUNE_CHOICES:
                raise ValueError(f"finetune_chromosomes must be one of {FINETUNE_CHOICES} or a dict {{species: "
                                 f"chromosome}}, got {choice!r}")
            return choice
        if not isinstance(choice, dict):
            raise ValueError(f"finetune_chromosomes must be one of {FINETUNE_CHOICES} or a dict {{species: "
                             f"chromosome}}, got {type(choice).__name__}")
        for s, c in choice.items():
            if s not in self.species:
                raise ValueError(f"finetune_chromosomes names species {s!r}, not one of species={self.species}")
            if str(c) not in SPECIES_SPLITS[s]["train"]:
                raise ValueError(f"finetune_chromosomes: chromosome {c!r} of {s} is not a training chromosome; "
                                 f"choose one of {SPECIES_SPLITS[s]['train']}")
        return {s: str(c) for s, c in choice.items()}

    def finetune_chromosome(self, species: str) -> str:
        """The training chromosome of `species` that the limited-finetune split finetunes on (`finetune_chromosomes`);
        "smallest" opens the species' training chromosomes to compare their lengths."""
        if species not in self._finetune:
            choice = self.finetune_chromosomes
            names = SPECIES_SPLITS[species]["train"]
            if isinstance(choice, dict) and species in choice:
                self._finetune[species] = choice[species]
            elif choice == "first":
                self._finetune[species] = names[0]
            else:  # the smallest; min keeps the first of equal lengths
                self._finetune[species] = min(names, key=lambda c: self._chromosome(species, c).length)
        return self._finetune[species]

    def chromosomes(self, split: str) -> dict[str, list[str]]:
        """{species: chromosome names} used by `split` ("train", "val", "test") under `train_subset`."""
        out = {}
        for s in self.species:
            names = SPECIES_SPLITS[s][_SPLIT_NAMES[split]]
            if split == "train" and self.train_subset == "finetune":
                names = [self.finetune_chromosome(s)]
            elif split == "train" and self.train_subset == "pretrain":
                names = [c for c in names if c != self.finetune_chromosome(s)]
            out[s] = names
        return out

    def _chromosome(self, species: str, chrom: str) -> Chromosome:
        """Chromosome `chrom` of `species` from data_dir (opened once); a missing file raises with the layout and
        the command that fetches it."""
        key = (species, chrom)
        if key not in self._opened:
            command = download_command("species", self.data_dir, f" --species {species}")
            if species not in DEFAULT_SPECIES:  # not among the downloadable genomes
                command = (f"seqssm data prepare species --species {species} --out {self.data_dir}   (synthetic; "
                           f"for the real genome place {species}'s chromosome FASTA files from NCBI there)")
            fix = f"delete it and download it again:\n    {command}"
            path = find_chromosome(self.data_dir / species, chrom, fix)
            if path is None:
                layout = (f"<data_dir>/{species}/chr{{C}}.fna (or .fa, .fna.gz) for C in train "
                          f"{SPECIES_SPLITS[species]['train']}, valid {_STD_VALID}, test {_STD_TEST}")
                raise missing(self.data_dir / species / f"chr{chrom}.fna", layout, command)
            self._opened[key] = Chromosome(path, species, chrom, fix)
        return self._opened[key]

    def _regions(self, split: str) -> list[list[Region]]:
        regions = []
        for s, names in self.chromosomes(split).items():
            row = []
            for c in names:
                chrom = self._chromosome(s, c)
                limit = self.finetune_bases if split == "train" and self.train_subset == "finetune" else None
                row.append(Region(chrom, limit))
                self._check_window_fits(row[-1], limit)
                if limit is not None and row[-1].length < limit:
                    warnings.warn(f"{chrom.path}: {row[-1].length} bases, fewer than finetune_bases={limit}",
                                  stacklevel=2)
            regions.append(row)
        return regions

    def _check_window_fits(self, region: Region, limit: int | None) -> None:
        """Refuse a region shorter than one window: its windows would be mostly padding, labelled as real data."""
        if region.length >= self.max_length:
            return
        if limit is not None and limit < self.max_length:
            raise DataFormatError(f"finetune_bases={limit} is shorter than one window (max_length={self.max_length}); "
                                  "raise finetune_bases or lower max_length")
        hint = " (generated genomes: raise generate_length)" if self.generate else ""
        raise DataFormatError(
            f"{region.chrom.path}: {region.length} bases, fewer than one window (max_length={self.max_length}): "
            f"every window would be mostly padding. Use the complete chromosome{hint}, or a smaller max_length")

    def build_splits(self):
        self.prepare_data()
        return {split: SpeciesDataset(self._regions(split), self.max_length, self.sizes[split], self.seed, split,
                                      self.sampling, self.end_token, self.reverse, self.task == "classification")
                for split in ("train", "val", "test")}

    def collate(self):
        return PadCollate(pad_value=self.pad_token_id)

    def train_dataloader(self):
        self.setup()
        return self._loader("train", shuffle=False, sampler=EpochKeySampler(self.sizes["train"]))
