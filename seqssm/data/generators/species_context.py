"""Synthetic genomes whose species signal needs context on both sides of a motif: ordered motif pairs across a gap.

Every species shares one near-uniform background chain and one library of `n_motifs` motifs, and lays pairs
"motif i, a gap of random bases, motif (i + shift) mod n_motifs" over it, with i uniform and `shift` the species'
own (1, 2, ... in the split table's order). So every species uses every motif equally often, first and second
alike: a motif, or any k-mer, says nothing about the species; only which motif stands `gap` bases to the right of
which does. A k-mer classifier stays near chance; a model must relate a motif to one far on its right (or, reading
causally, remember one far on its left). `ContextStructure.oracle` reads a window as a perfect reader would.

Pairs can be read from either side: reading causally, a model resolves a pair at its second motif by remembering the
first. `SelectorStructure` lays a signal that favours reading right to left: blocks of every key motif in a random
order, then a selector naming one slot; a species' selector always names the slot holding its own key. Reading left
to right, a model must keep the whole order of the keys until the selector says which one counts; reading right to
left, it keeps the slot number and reads one key. A reader that keeps only counts (which motifs, how many) resolves
nothing from the left and every block from the right.

Writes `out_dir/{species}/chr{C}.fna` for every chromosome of the species' HyenaDNA split, as
`seqssm.data.generators.genome.write_genomes` does, so the species task reads them with the real reader.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seqssm.errors import ConfigError, check_int

from ..species_splits import SPECIES_SPLITS
from .genome import BASES, sample_chain, transition_table, write_fasta


@dataclass(frozen=True)
class ContextStructure:
    """Motif pairs over a shared background (lengths in bases): `n_motifs` random motifs of `motif_length` bases;
    a pair starts at rate `pair_rate` per base (geometric spacing) and puts `min_gap`..`max_gap` random bases
    between its two motifs."""

    n_motifs: int = 8
    motif_length: int = 8
    min_gap: int = 16
    max_gap: int = 48
    pair_rate: float = 0.01

    def __post_init__(self):
        for name in ("n_motifs", "motif_length", "min_gap", "max_gap"):
            check_int("species_context", name, getattr(self, name))
        if self.max_gap < self.min_gap:
            raise ConfigError(f"species_context: max_gap ({self.max_gap}) must be >= min_gap ({self.min_gap})")
        if not 0 < self.pair_rate < 1:
            raise ConfigError(f"species_context: pair_rate must be in (0, 1), got {self.pair_rate!r}")

    header = "motif pairs, shift"

    def check_species(self, n_species: int) -> None:
        """Refuse more species than shifts (1 .. n_motifs - 1)."""
        if n_species >= self.n_motifs:
            raise ConfigError(f"species_context: {n_species} species need more than {n_species} motifs (each its "
                              f"own shift); got n_motifs = {self.n_motifs}")

    def library(self, seed: int) -> np.ndarray:
        """(n_motifs, motif_length) codes 0-3 of the shared motifs, all distinct."""
        rng = np.random.default_rng([seed, 7])
        while True:
            motifs = rng.integers(0, 4, (self.n_motifs, self.motif_length), dtype=np.uint8)
            if len({m.tobytes() for m in motifs}) == self.n_motifs:
                return motifs

    def lay(self, rng: np.random.Generator, codes: np.ndarray, library: np.ndarray, shift: int) -> np.ndarray:
        """`codes` (a chromosome, codes 0-3) with the species' pairs laid over it -> a new array."""
        out, m, n = codes.copy(), self.motif_length, len(codes)
        pos = int(rng.geometric(self.pair_rate))
        while True:
            gap = int(rng.integers(self.min_gap, self.max_gap + 1))
            if pos + 2 * m + gap > n:
                return out
            first = int(rng.integers(self.n_motifs))
            out[pos : pos + m] = library[first]
            out[pos + m + gap : pos + 2 * m + gap] = library[(first + shift) % self.n_motifs]
            pos += 2 * m + gap + int(rng.geometric(self.pair_rate))

    def oracle(self, window: np.ndarray, library: np.ndarray, n_species: int) -> np.ndarray:
        """(n_species,) count of each species' pairs found whole in `window` (codes 0-3): shift s's count is the
        number of motif i followed min_gap..max_gap bases after its end by motif i + s + 1."""
        m = self.motif_length
        starts = np.lib.stride_tricks.sliding_window_view(window, m)
        hits = [(p, k) for k in range(self.n_motifs) for p in np.flatnonzero((starts == library[k]).all(axis=1))]
        counts = np.zeros(n_species)
        for p, k in hits:
            for q, l in hits:
                shift = (l - k) % self.n_motifs
                if self.min_gap <= q - p - m <= self.max_gap and 1 <= shift <= n_species:
                    counts[shift - 1] += 1
        return counts


@dataclass(frozen=True)
class SelectorStructure:
    """Blocks of keys then a selector over a shared background (lengths in bases): `n_keys` key motifs and `n_keys`
    selector motifs of `motif_length` bases; a block lays the keys in a random order, one per slot, then selector j
    (slot j), `spacing` random bases between consecutive motifs; blocks start at rate `block_rate` per base
    (geometric spacing). Species k's selectors name the slot of key k: every key is in every block once and every
    selector equally frequent in every species, so only which key sits in the slot the selector after it names tells
    the species."""

    n_keys: int = 6
    motif_length: int = 5
    spacing: int = 3
    block_rate: float = 0.02

    header = "keys then a selector, species"

    def __post_init__(self):
        for name in ("n_keys", "motif_length"):
            check_int("species_context", name, getattr(self, name))
        check_int("species_context", "spacing", self.spacing, minimum=0)
        if not 0 < self.block_rate < 1:
            raise ConfigError(f"species_context: block_rate must be in (0, 1), got {self.block_rate!r}")

    @property
    def stride(self) -> int:
        """Bases from one slot's start to the next's."""
        return self.motif_length + self.spacing

    def check_species(self, n_species: int) -> None:
        """Refuse more species than keys (each species selects its own)."""
        if n_species > self.n_keys:
            raise ConfigError(f"species_context: {n_species} species need at least {n_species} keys (each its own); "
                              f"got n_keys = {self.n_keys}")

    def library(self, seed: int) -> np.ndarray:
        """(2 n_keys, motif_length) codes 0-3, all distinct: the keys, then selector j at row n_keys + j."""
        rng = np.random.default_rng([seed, 8])
        while True:
            motifs = rng.integers(0, 4, (2 * self.n_keys, self.motif_length), dtype=np.uint8)
            if len({m.tobytes() for m in motifs}) == 2 * self.n_keys:
                return motifs

    def lay(self, rng: np.random.Generator, codes: np.ndarray, library: np.ndarray, shift: int) -> np.ndarray:
        """`codes` (a chromosome, codes 0-3) with blocks of species `shift` (1, 2, ...: it selects key shift - 1) laid
        over it -> a new array."""
        out, m, k = codes.copy(), self.motif_length, self.n_keys
        block = k * self.stride + m
        pos = int(rng.geometric(self.block_rate))
        while pos + block <= len(codes):
            order = rng.permutation(k)
            for slot, key in enumerate(order):
                out[pos + slot * self.stride : pos + slot * self.stride + m] = library[key]
            selected = int(np.flatnonzero(order == shift - 1)[0])
            out[pos + k * self.stride : pos + block] = library[k + selected]
            pos += block + int(rng.geometric(self.block_rate))
        return out

    def occurrences(self, window: np.ndarray, library: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start positions, library rows) of every motif found in `window` (codes 0-3), in order of position."""
        starts = np.lib.stride_tricks.sliding_window_view(window, self.motif_length)
        hits = (starts[:, None, :] == library[None]).all(axis=2)  # (positions, motifs)
        pos, row = np.nonzero(hits)
        return pos, row

    def oracle(self, window: np.ndarray, library: np.ndarray, n_species: int) -> np.ndarray:
        """(n_species,) count of each species' blocks resolved in `window`: a selector j whose slot j (j slots and
        the selector's own stride back) holds key k counts for species k + 1."""
        pos, row = self.occurrences(window, library)
        key_at = {int(p): int(r) for p, r in zip(pos, row) if r < self.n_keys}
        counts = np.zeros(n_species)
        for p, r in zip(pos, row):
            if r >= self.n_keys:
                key = key_at.get(int(p) - (self.n_keys - (int(r) - self.n_keys)) * self.stride)
                if key is not None and key < n_species:
                    counts[key] += 1
        return counts


def write_context_genomes(out_dir: str | Path, species, chrom_length: int = 40_000, order: int = 3,
                          concentration: float = 20.0, seed: int = 0,
                          structure: ContextStructure | SelectorStructure = ContextStructure(),
                          splits: dict | None = None) -> Path:
    """Write the genomes of `species` (species k's pairs use shift k + 1; with a `SelectorStructure`, its selectors
    name key k's slot) for every chromosome of their splits; returns out_dir."""
    check_int("species_context", "chrom_length", chrom_length)
    splits = splits or SPECIES_SPLITS
    species = list(species)
    unknown = [sp for sp in species if sp not in splits]
    if unknown:
        raise ConfigError(f"species_context: unknown species {unknown[0]!r}; known: {sorted(splits)}")
    structure.check_species(len(species))
    out_dir = Path(out_dir)
    library = structure.library(seed)
    cdf = transition_table(np.random.default_rng([seed, 2]), order, concentration)
    for k, sp in enumerate(species):
        rng = np.random.default_rng([seed, list(splits).index(sp)])
        chroms = [c for part in ("train", "valid", "test") for c in splits[sp][part]]
        (out_dir / sp).mkdir(parents=True, exist_ok=True)
        for c in chroms:
            codes = np.searchsorted(BASES, sample_chain(rng, cdf, order, chrom_length)).astype(np.uint8)
            seq = BASES[structure.lay(rng, codes, library, k + 1)]
            write_fasta(out_dir / sp / f"chr{c}.fna", f"chr{c} synthetic {sp}: {structure.header} {k + 1}", seq)
    return out_dir
