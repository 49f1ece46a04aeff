"""Synthetic genomes whose species signal needs context on both sides of a motif: ordered motif pairs across a gap.

Every species shares one near-uniform background chain and one library of `n_motifs` motifs, and lays pairs
"motif i, a gap of random bases, motif (i + shift) mod n_motifs" over it, with i uniform and `shift` the species'
own (1, 2, ... in the split table's order). So every species uses every motif equally often, first and second
alike: a motif, or any k-mer, says nothing about the species; only which motif stands `gap` bases to the right of
which does. A k-mer classifier stays near chance; a model must relate a motif to one far on its right (or, reading
causally, remember one far on its left). `ContextStructure.oracle` reads a window as a perfect reader would.

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


def write_context_genomes(out_dir: str | Path, species, chrom_length: int = 40_000, order: int = 3,
                          concentration: float = 20.0, seed: int = 0, structure: ContextStructure = ContextStructure(),
                          splits: dict | None = None) -> Path:
    """Write the genomes of `species` (species k's pairs use shift k + 1) for every chromosome of their splits;
    returns out_dir."""
    check_int("species_context", "chrom_length", chrom_length)
    splits = splits or SPECIES_SPLITS
    species = list(species)
    unknown = [sp for sp in species if sp not in splits]
    if unknown:
        raise ConfigError(f"species_context: unknown species {unknown[0]!r}; known: {sorted(splits)}")
    if len(species) >= structure.n_motifs:
        raise ConfigError(f"species_context: {len(species)} species need more than {len(species)} motifs (each its "
                          f"own shift); got n_motifs = {structure.n_motifs}")
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
            write_fasta(out_dir / sp / f"chr{c}.fna", f"chr{c} synthetic {sp}: motif pairs, shift {k + 1}", seq)
    return out_dir
