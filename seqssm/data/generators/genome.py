"""Synthetic genomes: per species an order-k Markov chain with its own transition table, or (with a
`GenomeStructure`) one shared chain carrying species-specific motifs, tandem repeats and long-range echoes.

Writes `out_dir/{species}/chr{C}.fna` (FASTA, 80 columns) for every chromosome of the
species' HyenaDNA split, so the species task runs offline on the real reader. By default species differ
only in their k-mer statistics, which a sequence model can learn from a window (and a language model
can learn nothing beyond them). With `structure`, the k-mer background is the same for every species and
what tells species apart is which motifs they use: structure a language model can learn from unlabelled
sequences of every species, and a classifier needs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from seqssm.errors import ConfigError, DataNotFoundError, check_int
from seqssm.files import atomic_write

from ..species_splits import SPECIES_SPLITS

BASES = np.frombuffer(b"ACGT", dtype=np.uint8)
MAX_ORDER = 10  # the transition table has 4**order rows: 32 MB at order 10, 2 GB at 13
SYNTHETIC_MARKER = ".seqssm-synthetic.json"  # in a folder write_genomes wrote into: the species it generated


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


@dataclass(frozen=True)
class GenomeStructure:
    """Structure laid over a background chain shared by all species (rates per base, lengths in bases).

    A library of `n_motifs` random motifs of `motif_length` bases is shared by all species; each species
    uses them with its own frequencies ~ Dirichlet(`profile_concentration`) (small: each species leans on
    a few motifs, which other species use too). Motifs start at rate `motif_rate` (geometric gaps); each
    copy has every base replaced by a random one with probability `mutation`; with probability `tandem`
    the motif is repeated right after itself (a tandem repeat); with probability `echo` its reverse
    complement is written `echo_distance` bases further on (an inverted repeat: a long-range dependency).
    """

    n_motifs: int = 16
    motif_length: int = 12
    motif_rate: float = 1 / 48
    profile_concentration: float = 0.5
    mutation: float = 0.05
    tandem: float = 0.2
    echo: float = 0.5
    echo_distance: int = 96

    def __post_init__(self):
        for name, value, ok in (("n_motifs", self.n_motifs, self.n_motifs >= 1),
                                ("motif_length", self.motif_length, self.motif_length >= 1),
                                ("motif_rate", self.motif_rate, 0 < self.motif_rate <= 1),
                                ("profile_concentration", self.profile_concentration, self.profile_concentration > 0),
                                ("echo_distance", self.echo_distance, self.echo_distance >= 0),
                                *((k, getattr(self, k), 0 <= getattr(self, k) <= 1)
                                  for k in ("mutation", "tandem", "echo"))):
            if not ok:
                raise ValueError(f"GenomeStructure.{name} = {value!r} is out of range (motif counts and lengths >= 1, "
                                 "motif_rate in (0, 1], probabilities in [0, 1], profile_concentration > 0)")


COMPLEMENT = np.zeros(256, dtype=np.uint8)
COMPLEMENT[BASES] = BASES[::-1]  # A<->T, C<->G


def motif_library(structure: GenomeStructure, seed: int) -> np.ndarray:
    """(n_motifs, motif_length) uint8 ASCII motifs shared by every species of `seed`."""
    rng = np.random.default_rng([seed, 1])
    return BASES[rng.integers(0, 4, size=(structure.n_motifs, structure.motif_length))]


def lay_structure(rng: np.random.Generator, seq: np.ndarray, library: np.ndarray, profile: np.ndarray,
                  structure: GenomeStructure) -> np.ndarray:
    """`seq` (uint8 ASCII, changed in place and returned) with motifs drawn from `profile` (n_motifs,) written over
    it: each mutated, maybe repeated in tandem, maybe echoed as its reverse complement further on."""
    n, k = len(seq), library.shape[1]
    pos = int(rng.geometric(structure.motif_rate)) - 1
    while pos + k <= n:
        copies = 2 if rng.random() < structure.tandem else 1
        for c in range(copies):
            start = pos + c * k
            if start + k > n:
                break
            if c == 0:  # a tandem copy repeats the motif just drawn
                motif = library[rng.choice(len(library), p=profile)]
            copy = motif.copy()
            mutated = rng.random(k) < structure.mutation
            copy[mutated] = BASES[rng.integers(0, 4, size=int(mutated.sum()))]
            seq[start : start + k] = copy
            if c == 0 and rng.random() < structure.echo and start + structure.echo_distance + k <= n:
                echo_start = start + structure.echo_distance
                seq[echo_start : echo_start + k] = COMPLEMENT[copy[::-1]]
        pos += copies * k + int(rng.geometric(structure.motif_rate)) - 1
    return seq


def write_fasta(path: Path, name: str, seq: np.ndarray, width: int = 80) -> None:
    """Write one FASTA record `>name` with `width` bases per line."""
    with open(path, "wb") as f:
        f.write(f">{name}\n".encode())
        for i in range(0, len(seq), width):
            f.write(seq[i : i + width].tobytes() + b"\n")


def write_genomes(out_dir: str | Path, species=("human", "lemur", "mouse", "pig", "hippo"),
                  chrom_length: int = 200_000, order: int = 4, concentration: float = 1.0, seed: int = 0,
                  splits: dict | None = None, structure: GenomeStructure | None = None) -> Path:
    """Write synthetic FASTA genomes for `species` (all chromosomes of their splits); returns out_dir.

    structure None: per species an order-`order` chain with rows ~ Dirichlet(`concentration`). A
    GenomeStructure: one such chain for all species (large `concentration` keeps it near uniform, so that
    k-mer counts tell little), with the species' motifs laid over it (see GenomeStructure)."""
    check_int("species", "chrom_length", chrom_length)
    check_int("species", "order", order, minimum=0)
    check_int("species", "seed", seed, minimum=0)  # numpy's generators take no negative seed
    if order > MAX_ORDER:
        raise ConfigError(f"species: order = {order} needs a transition table of 4**{order} rows; use an order "
                          f"of at most {MAX_ORDER}")
    if not concentration > 0:
        raise ConfigError(f"species: concentration must be > 0 (a Dirichlet parameter), got {concentration!r}")
    if isinstance(species, str) or not species:
        raise ConfigError(f"species: name at least one species in a list, got {species!r}")
    splits = splits or SPECIES_SPLITS  # the split table decides which chromosome files exist
    unknown = [sp for sp in species if sp not in splits]
    if unknown:
        raise ConfigError(f"species: unknown species {unknown[0]!r}; known: {sorted(splits)}")
    out_dir = Path(out_dir)
    mark_synthetic(out_dir, species)
    library = motif_library(structure, seed) if structure is not None else None
    for sp in species:
        # keyed by the species' place in the table, so a genome does not depend on which others are written
        rng = np.random.default_rng([seed, list(splits).index(sp)])
        cdf = transition_table(rng if structure is None else np.random.default_rng([seed, 2]), order, concentration)
        chroms = [c for part in ("train", "valid", "test") for c in splits[sp][part]]
        (out_dir / sp).mkdir(parents=True, exist_ok=True)
        bases = sample_chain(rng, cdf, order, chrom_length * len(chroms)).reshape(len(chroms), chrom_length)
        kind = f"order-{order} Markov chain"
        if structure is not None:
            profile = rng.dirichlet(np.full(structure.n_motifs, structure.profile_concentration))
            bases = np.stack([lay_structure(rng, seq, library, profile, structure) for seq in bases])
            kind = f"shared order-{order} Markov chain with {sp}'s motifs"
        for c, seq in zip(tqdm(chroms, desc=f"genome {sp}", leave=False), bases):
            write_fasta(out_dir / sp / f"chr{c}.fna", f"chr{c} synthetic {sp} {kind}", seq)
    return out_dir


def mark_synthetic(folder: Path, species) -> None:
    """Add `species` to `folder`'s SYNTHETIC_MARKER, written before any genome: a folder whose generation was cut
    short still counts as generated."""
    marker = folder / SYNTHETIC_MARKER
    try:
        known = json.loads(marker.read_text(encoding="utf-8"))["species"]
    except (OSError, ValueError, KeyError, TypeError):  # none yet, or unreadable: the species written from now on
        known = []
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(marker, json.dumps({"generator": "seqssm synthetic genomes",
                                          "species": sorted({*known, *species})}) + "\n")


def check_generated_folder(folder: str | Path, absent) -> None:
    """Raise DataNotFoundError naming the `absent` species unless `folder` may take synthetic genomes for them: it is
    missing, empty (hidden entries aside) or was written by write_genomes (it holds SYNTHETIC_MARKER). Synthetic
    genomes beside real ones would be trained on as if they were real."""
    folder = Path(folder)
    held = sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) if folder.is_dir() else []
    if not held or (folder / SYNTHETIC_MARKER).is_file():
        return
    missing = ", ".join(f"{sp}/" for sp in absent)
    raise DataNotFoundError(
        f"{folder} has no {missing} and holds other data ({', '.join(held[:4])}{', ...' if len(held) > 4 else ''}), "
        f"so generate: true writes no synthetic genomes there (only into an empty folder or one it generated, marked "
        f"by {SYNTHETIC_MARKER}). Put the chromosome files (chr<C>.fna) of {absent[0]} in {folder / absent[0]}, leave "
        f"{', '.join(absent)} out of species, or point data_dir at an empty folder for synthetic genomes")
