"""The species-pretraining claim's LM precondition: NTP pretraining must beat the best of the 5- to 11-base count
models its genomes.yaml declares, not the background chain's own order (which shows only local statistics learned)."""

from pathlib import Path

import numpy as np
import pytest

from seqssm.data.generators.genome import BASES, sample_chain, transition_table
from seqssm.study.reproduce import CLAIMS, Settings
from seqssm.study.reproduce.species_claim import best_count_model, kmer_perplexity


def chain(order: int, length: int, seed: int) -> np.ndarray:
    """(length,) codes 0-3 of a peaked order-`order` Markov chain."""
    rng = np.random.default_rng(seed)
    cdf = transition_table(np.random.default_rng(0), order, concentration=0.3)
    return np.searchsorted(BASES, sample_chain(rng, cdf, order, length)).astype(np.uint8)


def test_the_best_count_model_is_the_one_of_the_chains_order():
    train, test = [chain(5, 200_000, 1)], [chain(5, 50_000, 2)]
    order, ppl, every = best_count_model(train, test, [3, 5])
    assert order == 5 and ppl == every[5] == pytest.approx(kmer_perplexity(train, test, 5))
    assert every[5] < every[3] - 0.2  # the order-3 model misses what the 6-mers tell
    with pytest.raises(ValueError, match="no orders"):
        best_count_model(train, test, [])


def test_the_claim_declares_5_to_11_base_count_models():
    # the selector genomes' motifs and spacing make up to 11 bases predictable from counts (genomes.yaml)
    claim = CLAIMS["species-pretraining"](Settings(out=Path("/nonexistent")))
    settings = claim.genome_settings()
    assert [o + 1 for o in settings["count_model_orders"]] == list(range(5, 12)) and settings["order"] < 4


def test_prepare_sets_the_bar_at_the_best_count_model(tmp_path):
    claim = CLAIMS["species-pretraining"](Settings(out=tmp_path, seeds=1, smoke=True))
    lines = "\n".join(claim.prepare())
    orders = claim.genome_settings()["count_model_orders"]
    assert claim.kmer_order in orders
    assert f"the best, the {claim.kmer_order + 1}-mer model's {claim.kmer_ppl:.3f}" in lines
    reported = [float(lines.split(f", {o + 1}-mer " if o > orders[0] else f" {o + 1}-mer ")[1][:5]) for o in orders]
    assert min(reported) == pytest.approx(claim.kmer_ppl, abs=6e-4)


@pytest.mark.parametrize("ntp_ppl, holds", [
    (3.750, False),  # below the 4-mer (chain-order) model's 3.791, above the best count model's 3.709
    (3.702, True),
])
def test_ntp_must_beat_the_best_count_model_not_the_chain_order(ntp_ppl, holds):
    claim = CLAIMS["species-pretraining"](Settings(out=Path("/nonexistent")))
    claim.kmer_order, claim.kmer_ppl = 5, 3.709
    records = {f"pretrain-ntp/seed{seed}": {"result": {"final": ntp_ppl, "metric": "val_ppl", "median_step_s": 0.1,
                                                        "fit_s": 50.0}} for seed in claim.seeds()}
    (text, ok), = [(t, ok) for t, ok in claim.measure(records).preconditions if t.startswith("NTP pretraining")]
    assert ok is holds and "best count model's (the 6-mer count model, 3.709)" in text
