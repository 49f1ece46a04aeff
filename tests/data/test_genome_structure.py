"""Structured synthetic genomes (GenomeStructure): species-specific motif use over one shared background chain,
mutated copies, tandem repeats and reverse-complement echoes; the plain Markov genomes stay the default."""

import numpy as np
import pytest

from seqssm.data.generators.genome import (COMPLEMENT, GenomeStructure, lay_structure, motif_library,
                                           write_genomes)
from seqssm.data.species_splits import SPECIES_SPLITS


def read(path):
    return np.frombuffer(b"".join(path.read_bytes().splitlines()[1:]), dtype=np.uint8)


def motif_counts(seq, library):
    """Exact occurrences of every library motif in seq."""
    k = library.shape[1]
    windows = np.lib.stride_tricks.sliding_window_view(seq, k)
    return np.array([(windows == m).all(axis=1).sum() for m in library])


def test_motifs_are_laid_with_tandems_and_echoes_at_the_configured_rates():
    structure = GenomeStructure(n_motifs=4, motif_length=10, motif_rate=1 / 40, mutation=0.0, tandem=0.5, echo=1.0,
                                echo_distance=30)
    library = motif_library(structure, seed=0)
    rng = np.random.default_rng(0)
    background = np.full(20_000, ord("A"), dtype=np.uint8)  # a blank background shows exactly what was laid
    seq = lay_structure(rng, background.copy(), library, np.array([0.7, 0.3, 0.0, 0.0]), structure)
    counts = motif_counts(seq, library)
    assert counts[2] == counts[3] == 0  # motifs outside the profile never appear ...
    assert 2.0 < counts[0] / counts[1] < 3.5  # ... and the others in proportion to it (0.7 / 0.3)
    # each placement covers 10 bases plus, half of the time, a tandem copy; gaps of mean 40 between them
    placements = counts.sum() / 1.5
    assert 20_000 / 55 * 0.8 < placements < 20_000 / 55 * 1.2
    # every first copy is echoed as its reverse complement 30 bases on (unless an echo is overwritten later)
    echoes = motif_counts(seq, np.stack([COMPLEMENT[m[::-1]] for m in library]))
    assert echoes[:2].sum() > 0.6 * placements


def test_mutation_replaces_bases_at_its_rate():
    structure = GenomeStructure(n_motifs=1, motif_length=50, motif_rate=1.0, mutation=0.2, tandem=0.0, echo=0.0)
    library = motif_library(structure, seed=1)
    seq = lay_structure(np.random.default_rng(1), np.zeros(50 * 200, np.uint8), library, np.ones(1), structure)
    copies = seq.reshape(200, 50)
    changed = (copies != library[0]).mean()
    assert 0.2 * 0.75 * 0.85 < changed < 0.2 * 0.75 * 1.15  # a replaced base is a different one 3 times in 4


def test_species_share_the_background_and_differ_in_motif_use(tmp_path):
    structure = GenomeStructure(n_motifs=8, motif_length=12, motif_rate=1 / 300, profile_concentration=0.3,
                                mutation=0.0)
    write_genomes(tmp_path, ("human", "pig"), chrom_length=30_000, order=2, concentration=2.0, seed=3,
                  structure=structure)
    library = motif_library(structure, seed=3)
    profiles = []
    for sp in ("human", "pig"):
        chroms = [read(tmp_path / sp / f"chr{c}.fna") for c in SPECIES_SPLITS[sp]["train"][:4]]
        counts = sum(motif_counts(c, library) for c in chroms)
        profiles.append(counts / counts.sum())
        assert (tmp_path / sp / "chr1.fna").read_text().startswith(f">chr1 synthetic {sp} shared order-2 Markov")
    assert np.abs(profiles[0] - profiles[1]).sum() > 0.5  # species lean on different motifs

    def bigram_freqs(sp):
        seq = np.concatenate([read(tmp_path / sp / f"chr{c}.fna") for c in SPECIES_SPLITS[sp]["train"][:4]])
        pairs = seq[:-1].astype(int) * 256 + seq[1:]
        return np.bincount(pairs, minlength=256 * 256)[[a * 256 + b for a in b"ACGT" for b in b"ACGT"]] / len(pairs)

    # the background chain (rows ~ Dirichlet(2): far from uniform) is shared: 2-mer frequencies agree closely
    assert np.abs(bigram_freqs("human") - bigram_freqs("pig")).sum() < 0.1


def test_the_plain_markov_genomes_stay_the_default(tmp_path):
    write_genomes(tmp_path / "a", ("human",), chrom_length=2_000, order=2, seed=0)
    write_genomes(tmp_path / "b", ("human",), chrom_length=2_000, order=2, seed=0, structure=None)
    first = (tmp_path / "a" / "human" / "chr2.fna").read_bytes()
    assert first == (tmp_path / "b" / "human" / "chr2.fna").read_bytes()
    assert first.startswith(b">chr2 synthetic human order-2 Markov chain")


@pytest.mark.parametrize("field, value", [("n_motifs", 0), ("motif_rate", 0.0), ("mutation", 1.5), ("echo", -0.1),
                                          ("profile_concentration", 0.0), ("echo_distance", -1)])
def test_bad_structure_settings_are_refused_by_name(field, value):
    with pytest.raises(ValueError, match=f"GenomeStructure.{field} = "):
        GenomeStructure(**{field: value})
