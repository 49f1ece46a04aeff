"""The species stand-in for bidirectional reading (`SelectorStructure`): a reader that keeps only counts resolves a
window's species from the right-hand context of each motif and stays at chance from the left-hand context (the causal
side), while k-mer counts see nothing and a perfect reader sees every block."""

from collections import Counter

import numpy as np
import pytest

from seqssm.data.generators.species_context import SelectorStructure, write_context_genomes
from seqssm.errors import ConfigError
from seqssm.study.reproduce.species_claim import nearest_centroid_accuracy, read_fasta, windows_of

SPECIES = ("human", "lemur", "mouse", "pig", "hippo")
SPLITS = {sp: {"train": ["1"], "valid": ["2"], "test": []} for sp in SPECIES}
STRUCTURE = SelectorStructure()
WINDOW = 256


@pytest.fixture(scope="module")
def windows(tmp_path_factory):
    """(train, valid): per species, its 256-base windows (codes 0-3) of chromosome 1 and 2."""
    folder = tmp_path_factory.mktemp("selector")
    write_context_genomes(folder, SPECIES, chrom_length=65536, seed=0, structure=STRUCTURE, splits=SPLITS)
    return tuple([windows_of(read_fasta(folder / sp / f"chr{c}.fna"), WINDOW) for sp in SPECIES] for c in ("1", "2"))


def count_reader(window: np.ndarray, library: np.ndarray, direction: int) -> Counter:
    """Counts of what a reader keeping only counts sees at each motif of `window`, reading towards `direction` (-1:
    left, the causal side; +1: right): (the motif, how many keys lie between it and the nearest selector that way,
    that selector, or -1 at the window's edge)."""
    _, row = STRUCTURE.occurrences(window, library)
    n, seen = STRUCTURE.n_keys, Counter()
    for t, motif in enumerate(row):
        keys, u = 0, t + direction
        while 0 <= u < len(row) and row[u] < n:
            keys, u = keys + 1, u + direction
        seen[int(motif), keys, int(row[u]) if 0 <= u < len(row) else -1] += 1
    return seen


def naive_bayes_accuracy(train: list[list[Counter]], valid: list[list[Counter]]) -> float:
    """Held-out accuracy of multinomial naive Bayes (add-one) over the readers' count features, per class a list."""
    features = sorted({f for per_class in train for c in per_class for f in c})
    index = {f: i for i, f in enumerate(features)}
    totals = np.ones((len(train), len(features) + 1))  # the last column: features never seen in training
    for k, per_class in enumerate(train):
        for c in per_class:
            for f, n in c.items():
                totals[k, index[f]] += n
    log_p = np.log(totals / totals.sum(axis=1, keepdims=True))
    right = [np.argmax([sum(n * log_p[k, index.get(f, -1)] for f, n in c.items()) for k in range(len(train))]) == y
             for y, per_class in enumerate(valid) for c in per_class]
    return float(np.mean(right))


def test_only_the_right_hand_context_tells_the_species(windows):
    train, valid = windows
    library = STRUCTURE.library(0)
    chance = 1 / len(SPECIES)
    left, right = ([[[count_reader(w, library, d) for w in ws] for ws in part] for part in (train, valid)]
                   for d in (-1, 1))
    oracle = np.mean([np.argmax(STRUCTURE.oracle(w, library, len(SPECIES))) == y
                      for y, ws in enumerate(valid) for w in ws])
    assert oracle > 0.9
    assert abs(naive_bayes_accuracy(*left) - chance) < 0.05      # the causal side: counts of keys, no order
    assert naive_bayes_accuracy(*right) > chance + 0.5
    assert abs(nearest_centroid_accuracy(train, valid) - chance) < 0.05  # every key and selector in every species


def test_a_species_selects_its_own_key():
    structure = SelectorStructure(n_keys=3, motif_length=4, spacing=1, block_rate=0.5)
    # keys, then selectors; the background (3s) is in none of them, so no motif is found across a boundary
    library = np.array([[0] * 4, [1] * 4, [2] * 4, [0, 1] * 2, [1, 2] * 2, [2, 0] * 2], dtype=np.uint8)
    laid = structure.lay(np.random.default_rng(0), np.full(400, 3, np.uint8), library, shift=2)
    blocks = int((structure.occurrences(laid, library)[1] >= 3).sum())  # one selector per block
    assert blocks > 5 and structure.oracle(laid, library, 3).tolist() == [0, blocks, 0]


def test_bad_selector_structures_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="block_rate"):
        SelectorStructure(block_rate=1.5)
    with pytest.raises(ConfigError, match="at least 5 keys"):
        write_context_genomes(tmp_path, SPECIES, chrom_length=1000, structure=SelectorStructure(n_keys=4),
                              splits=SPLITS)
