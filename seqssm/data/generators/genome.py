"""Synthetic genomes: per species an order-k Markov chain with its own transition table.

Writes `out_dir/{species}/chr{C}.fna` (FASTA, 80 columns) for every chromosome of the
species' HyenaDNA split, so the species task runs offline on the real reader. Species differ
only in their k-mer statistics, which a sequence model can learn from a window.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ..species_splits import SPECIES_SPLITS

BASES = np.frombuffer(b"ACGT", dtype=np.uint8)


def transition_table(rng: np.random.Generator, order: int, concentration: float) -> np.ndarray:
    """(4**order, 4) cumulative next-base probabilities, rows ~ Dirichlet(concentration)."""
    probs = rng.dirichlet(np.full(4, concentration), size=4**order)
    return np.cumsum(probs, axis=1)


def sample_chain(rng: np.random.Generator, cdf: np.ndarray, order: int, length: int, block: int = 4096) -> np.ndarray:
    """(length,) uint8 ASCII bases from the chain; run as parallel blocks so numpy does the loop.

    Each block starts from a uniformly random context, a negligible break of the chain every
    `block` bases that makes generation ~1000x faster than a per-base Python loop.
    """
    block = min(block, length)
    n_blocks = -(-length // block)
    state = rng.integers(0, 4**order, size=n_blocks)
    out = np.empty((n_blocks, block), dtype=np.uint8)
    mask = 4**order - 1
    for t in range(block):
        u = rng.random(n_blocks)
        nxt = (u[:, None] > cdf[state]).sum(axis=1).clip(max=3)
        out[:, t] = nxt
        state = ((state << 2) | nxt) & mask
    return BASES[out.reshape(-1)[:length]]


def write_fasta(path: Path, name: str, seq: np.ndarray, width: int = 80) -> None:
    """Write one FASTA record `>name` with `width` bases per line."""
    with open(path, "wb") as f:
        f.write(f">{name}\n".encode())
        for i in range(0, len(seq), width):
            f.write(seq[i : i + width].tobytes() + b"\n")


def write_genomes(out_dir: str | Path, species=("human", "lemur", "mouse", "pig", "hippo"),
                  chrom_length: int = 200_000, order: int = 4, concentration: float = 1.0, seed: int = 0,
                  splits: dict | None = None) -> Path:
    """Write synthetic FASTA genomes for `species` (all chromosomes of their splits); returns out_dir."""
    splits = splits or SPECIES_SPLITS  # the split table decides which chromosome files exist
    out_dir = Path(out_dir)
    for sp in species:
        if sp not in splits:
            raise ValueError(f"unknown species {sp!r}; known: {sorted(splits)}")
        # keyed by the species' place in the table, so a genome does not depend on which others are written
        rng = np.random.default_rng([seed, list(splits).index(sp)])
        cdf = transition_table(rng, order, concentration)
        chroms = [c for part in ("train", "valid", "test") for c in splits[sp][part]]
        (out_dir / sp).mkdir(parents=True, exist_ok=True)
        bases = sample_chain(rng, cdf, order, chrom_length * len(chroms)).reshape(len(chroms), chrom_length)
        for c, seq in zip(tqdm(chroms, desc=f"genome {sp}", leave=False), bases):
            write_fasta(out_dir / sp / f"chr{c}.fna", f"chr{c} synthetic {sp} order-{order} Markov chain", seq)
    return out_dir
