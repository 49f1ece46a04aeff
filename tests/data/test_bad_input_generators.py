"""Bad arguments to the offline generators (issue 27): each is refused before anything is drawn or written, with one
line naming the argument and its value, and no generator loop runs without bound (a cap on draws in a row that
find nothing, with a message saying which argument to change)."""

import time

import pytest

from seqssm.data.generators import genome, listops, pathfinder, standins
from seqssm.data.prepare import prepare
from seqssm.errors import ConfigError


@pytest.mark.parametrize("kwargs, message", [
    ({"min_length": 500, "max_length": 20}, r"min_length = 500 must be below max_length - 1 = 19"),
    ({"min_length": 5, "max_length": 6}, r"min_length = 5 must be below max_length - 1 = 5"),
    ({"min_length": -1}, r"min_length must be an integer >= 0, got -1"),
    ({"max_length": 0}, r"max_length must be an integer >= 1, got 0"),
    ({"max_args": 1}, r"max_args must be an integer >= 2, got 1"),
    ({"max_depth": 0}, r"max_depth must be an integer >= 1, got 0"),
    ({"max_depth": 2, "max_args": 3, "min_length": 11, "max_length": 50},
     r"min_length = 11, but trees of max_depth 2 and max_args 3 have at most 5 tokens"),
])
def test_listops_refuses_impossible_arguments_at_once(tmp_path, kwargs, message):
    # Before: --min-length 500 --max-length 20 drew trees forever and printed nothing.
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=rf"^listops: {message}"):
        listops.write_listops(tmp_path / "out", 3, 1, 1, **kwargs)
    assert time.perf_counter() - start < 1.0
    assert not (tmp_path / "out").exists()  # nothing written


def test_the_longest_listops_tree_is_the_longest_drawn():
    rng = listops.random.Random(0)
    drawn = max(listops._tree(rng, 1, 3, 2)[1] for _ in range(3000))
    assert listops.longest(1, 10) == 1 and drawn == listops.longest(3, 2) == 10


def test_listops_gives_up_when_the_range_holds_too_few_expressions(monkeypatch):
    # Only the ten digits have fewer than 2 tokens: 20 distinct expressions can never be found.
    monkeypatch.setattr(listops, "MAX_MISSES", 2000)
    with pytest.raises(ConfigError, match=r"2000 trees in a row gave no new expression of more than min_length = 0 "
                                          r"and fewer than max_length = 2 tokens \(10 of n = 20 found\): widen"):
        listops.generate_listops(20, seed=0, min_length=0, max_length=2)
    assert len(listops.generate_listops(10, seed=0, min_length=0, max_length=2)) == 10  # all ten exist


def test_cli_prepare_refuses_the_listops_range_of_the_issue(tmp_path):
    with pytest.raises(ConfigError, match=r"^listops: min_length = 500 must be below max_length - 1 = 19"):
        prepare("listops", tmp_path / "listops", n_train=4, n_val=1, n_test=1, min_length=500, max_length=20)


@pytest.mark.parametrize("style, message", [({"res": 0}, "res must be an integer >= 1, got 0"),
                                            ({"dashes": 0}, "dashes must be an integer >= 1, got 0"),
                                            ({"distractors": -1}, "distractors must be an integer >= 0, got -1"),
                                            ({"curvature": float("nan")}, "curvature must be >= 0")])
def test_pathfinder_style_is_checked(style, message):
    with pytest.raises(ConfigError, match=f"^pathfinder: {message}"):
        pathfinder.PathfinderStyle(**style)


def test_pathfinder_gives_up_when_the_contours_never_fit(tmp_path, monkeypatch):
    # Before: at resolution 12 every draw fails and the loop never ended.
    monkeypatch.setattr(pathfinder, "MAX_FAILED_DRAWS", 20)
    with pytest.raises(ConfigError, match=r"^pathfinder: 20 draws in a row found no room for two contours of 10 "
                                          r"dashes at resolution 12: raise the resolution"):
        pathfinder.write_pathfinder(tmp_path / "pf", 2, res=12)
    assert not (tmp_path / "pf").exists()
    with pytest.raises(ConfigError, match="^pathfinder: n must be an integer >= 1, got 0"):
        pathfinder.write_pathfinder(tmp_path / "pf", 0)
    with pytest.raises(ConfigError, match="^pathfinder: seed must be an integer >= 0, got -1"):
        pathfinder.write_pathfinder(tmp_path / "pf", 2, seed=-1)


@pytest.mark.parametrize("kwargs, message", [({"chrom_length": 0}, "chrom_length must be an integer >= 1, got 0"),
                                             ({"order": -1}, "order must be an integer >= 0, got -1"),
                                             ({"order": 14}, r"order = 14 needs a transition table of 4\*\*14 rows"),
                                             ({"concentration": 0.0}, "concentration must be > 0"),
                                             ({"species": []}, "name at least one species"),
                                             ({"species": "human"}, "name at least one species in a list"),
                                             ({"species": ["human", "cat"]}, "unknown species 'cat'"),
                                             ({"seed": -1}, "seed must be an integer >= 0, got -1")])
def test_genome_arguments_are_checked_before_writing(tmp_path, kwargs, message):
    with pytest.raises(ConfigError, match=f"^species: {message}"):
        genome.write_genomes(tmp_path / "g", **kwargs)
    assert not (tmp_path / "g").exists()


@pytest.mark.parametrize("write, name", [(standins.write_cifar_standin, "per_batch"),
                                         (standins.write_mnist_standin, "n_train"),
                                         (standins.write_imdb_standin, "n"), (standins.write_aan_standin, "n")])
def test_standins_refuse_counts_below_one_and_negative_seeds(tmp_path, write, name):
    with pytest.raises(ConfigError, match=rf"^{write.__name__}: {name} must be an integer >= 1, got 0"):
        write(tmp_path, **{name: 0})
    with pytest.raises(ConfigError, match=rf"^{write.__name__}: seed must be an integer >= 0, got -2"):
        write(tmp_path, seed=-2)
