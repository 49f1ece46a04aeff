"""The species-pretraining stand-in keeps the property the claim needs: the species signal is which motif follows
which across a gap, so a perfect reader of pairs (the oracle) tells species apart and a k-mer classifier cannot."""

import numpy as np
import pytest

from seqssm.data.generators.species_context import ContextStructure, write_context_genomes
from seqssm.errors import ConfigError
from seqssm.study.reproduce.species_claim import kmer_profile, nearest_centroid_accuracy, read_fasta, windows_of

SPECIES = ("human", "lemur", "mouse", "pig", "hippo")
SPLITS = {sp: {"train": ["1"], "valid": ["2"], "test": []} for sp in SPECIES}


@pytest.fixture(scope="module")
def genomes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("context")
    write_context_genomes(folder, SPECIES, chrom_length=65536, seed=0, splits=SPLITS)
    return {sp: {c: read_fasta(folder / sp / f"chr{c}.fna") for c in ("1", "2")} for sp in SPECIES}


def test_oracle_reads_the_pairs_and_kmers_see_nothing(genomes):
    structure = ContextStructure()
    library = structure.library(0)
    train = [windows_of(genomes[sp]["1"], 256) for sp in SPECIES]
    valid = [windows_of(genomes[sp]["2"], 256) for sp in SPECIES]
    oracle = np.mean([np.argmax(structure.oracle(w, library, len(SPECIES))) == c
                      for c, ws in enumerate(valid) for w in ws])
    kmer = nearest_centroid_accuracy(train, valid)
    assert oracle > 0.75 and kmer < 0.35  # chance: 0.2


def test_every_species_uses_every_motif_alike(genomes):
    """Each motif's count per species is about the same (~115, Poisson sd ~11): single motifs carry no species
    signal."""
    library = ContextStructure().library(0)
    counts = np.array([[np.sum((np.lib.stride_tricks.sliding_window_view(genomes[sp]["1"], 8) == m).all(axis=1))
                        for m in library] for sp in SPECIES])
    expected = counts.sum() / counts.size
    assert counts.min() > 0.6 * expected and counts.max() < 1.4 * expected


def test_oracle_counts_a_pair_by_its_shift():
    structure = ContextStructure(n_motifs=4, motif_length=4, min_gap=2, max_gap=3)
    library = np.array([[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]], dtype=np.uint8)
    gap = np.array([0, 1], dtype=np.uint8)  # no motif inside
    window = np.concatenate([library[1], gap, library[3]])  # motif 1, then motif 3: shift 2
    assert structure.oracle(window, library, 3).tolist() == [0, 1, 0]
    reversed_order = np.concatenate([library[3], gap, library[1]])  # shift (1 - 3) mod 4 = 2 as well
    assert structure.oracle(reversed_order, library, 3).tolist() == [0, 1, 0]
    assert structure.oracle(np.concatenate([library[1], gap, gap, gap, library[2]]), library, 3).sum() == 0  # too far


def test_kmer_profile_is_a_frequency_vector():
    p = kmer_profile(np.array([0, 1, 2, 3, 0, 1], dtype=np.uint8), k=2)
    assert p.sum() == pytest.approx(1.0) and p[0 * 4 + 1] == pytest.approx(2 / 5)


def test_bad_structures_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="max_gap"):
        ContextStructure(min_gap=10, max_gap=5)
    with pytest.raises(ConfigError, match="more than 5 motifs"):
        write_context_genomes(tmp_path, SPECIES, chrom_length=1000, structure=ContextStructure(n_motifs=5),
                              splits=SPLITS)
