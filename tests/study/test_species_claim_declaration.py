"""The species-pretraining claim as re-declared for issue 33: genomes.yaml's structure switch reaches the generator and
the data folder's name, the declaration's plan follows from its effect and the last run's spread, the miniature runs
the primary pair and the stages it starts from, and the check and the "learned" precondition read the finetuning
curves."""

import shutil
from pathlib import Path

import pytest
import yaml

from seqssm.data.generators.species_context import ContextStructure, SelectorStructure
from seqssm.errors import ReproduceError
from seqssm.study.reproduce import CLAIMS, Settings
from seqssm.study.reproduce.claim import RECIPES, LAST_FIFTH, learned_precondition
from seqssm.study.reproduce.report import Part, measured, pooled_sd
from seqssm.study.reproduce.species_claim import genome_structure
from seqssm.study.reproduce.stats import power, seeds_for_power

NAME = "species-pretraining"
# the last run's finetuning accuracies of the pair, per seed (its report, docs/reproduction/species-pretraining/report.md at commit 8389b1a)
LAST_RUN = {"1x": {"mlm-bi": [0.208984375, 0.15234375, 0.19921875], "ntp": [0.197265625, 0.189453125, 0.19140625]},
            "2x": {"mlm-bi": [0.208984375, 0.1953125, 0.2265625], "ntp": [0.173828125, 0.2421875, 0.18359375]}}


def claim_with(tmp_path, **edits):
    """The claim on a copy of its recipes with top-level keys of the named files replaced, e.g.
    genomes={"structure": {...}}; results under tmp_path/out, at smoke size."""
    recipes = tmp_path / "reproduce"
    shutil.copytree(RECIPES / NAME, recipes / NAME)
    shutil.copytree(RECIPES.parent / "species", tmp_path / "species")  # the stages' bases
    for name, keys in edits.items():
        path = recipes / NAME / f"{name}.yaml"
        path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), **keys}))
    return CLAIMS[NAME](Settings(out=tmp_path / "out", recipes=recipes, seeds=1, smoke=True))


PAIRS = {"kind": "pairs", "n_motifs": 6, "motif_length": 5, "min_gap": 8, "max_gap": 24, "pair_rate": 0.05}


def test_the_structure_kind_builds_the_generators_structure():
    assert genome_structure(PAIRS) == ContextStructure(6, 5, 8, 24, 0.05)
    assert genome_structure({"kind": "selector", "n_keys": 5, "spacing": 2}) == SelectorStructure(n_keys=5, spacing=2)
    with pytest.raises(ReproduceError, match="structure.kind must be one of pairs, selector, got 'triples'"):
        genome_structure({"kind": "triples"})
    with pytest.raises(ReproduceError, match="got None"):
        genome_structure({"n_keys": 6})


def test_the_claim_lays_the_selector_and_names_its_folder_by_the_kind(tmp_path):
    selector = claim_with(tmp_path / "a")
    assert selector.genome_settings()["structure"]["kind"] == "selector"
    assert selector.data_folder().name == "context-genomes-1200-3-20.0-0-selector-6-5-3-0.02"
    lines = selector.prepare()
    header = next(selector.data_folder().glob("human/chr*.fna")).read_text().splitlines()[0]
    assert SelectorStructure.header in header and "a selector naming one slot" in lines[0]
    pairs = claim_with(tmp_path / "b", genomes={"structure": PAIRS})
    assert pairs.data_folder().name == "context-genomes-1200-3-20.0-0-pairs-6-5-8-24-0.05"
    pairs.prepare()
    header = next(pairs.data_folder().glob("human/chr*.fna")).read_text().splitlines()[0]
    assert ContextStructure.header in header


def test_the_declared_plan_follows_from_the_effect_and_the_last_runs_spread():
    d = CLAIMS[NAME](Settings(out=Path("/out"))).declaration
    p = d.primary
    assert (p.a, p.b, p.relation) == ("mlm-bi", "ntp", "greater")
    spreads = [pooled_sd({"a_values": run["mlm-bi"], "b_values": run["ntp"]}) for run in LAST_RUN.values()]
    assert d.sd == round(max(spreads), 4)
    assert d.seeds == seeds_for_power(p.relation, d.effect, d.sd) == 5
    assert d.power() == pytest.approx(power(p.relation, d.effect, d.sd, 5)) and d.power() >= 0.8 > d.power(4)
    assert d.budgets == (1.0,) and d.check == 0.5 and (d.learned.level, d.learned.plateau) == (0.3, 0.025)
    # the last run's per-seed wall seconds at 2x (half these steps) for the pair's four runs, doubled, over 2 cores
    assert 5 * 2 * (56 + 93 + 31 + 51) / 2 / 60 <= d.minutes < 21


def test_the_miniature_runs_the_pair_and_the_stages_it_starts_from():
    claim = CLAIMS[NAME](Settings(out=Path("/out")))
    runs = claim.runs()
    assert {r.arm for r in runs} == {"ntp", "mlm-bi", "pretrain-ntp", "pretrain-mlm-bi"}
    steps = {r.arm: r.units for r in runs}
    assert steps == {"ntp": 720, "mlm-bi": 720, "pretrain-ntp": 1440, "pretrain-mlm-bi": 1440}
    validate = {r.arm: r.config["trainer"]["val_check_interval"] for r in runs}
    assert validate["ntp"] == validate["mlm-bi"] == 72  # the check (360) and the last fifth (576) are validations
    full = CLAIMS[NAME](Settings(out=Path("/out"), scale="full"))
    assert {c.a for c in full.comparisons} >= {"f1", "bidirectional"} and "surgery" in {r.kind for r in full.runs()}


def test_an_arm_without_its_pretraining_stage_is_refused(tmp_path):
    with pytest.raises(ReproduceError, match="pretraining stages it does not run: pretrain-mlm-bi, pretrain-ntp"):
        claim_with(tmp_path, claim={"arms": ["ntp", "mlm-bi"]})


STEPS = [72 * k for k in range(1, 11)]


def records(curves: dict[str, list[float]], ntp_ppl: float = 3.1) -> dict:
    """Finished runs of the miniature's arms for 3 seeds: each finetuning arm's validation curve over STEPS (its last
    point the final accuracy), the NTP stage's perplexity."""
    out = {}
    for seed in range(3):
        for arm, curve in curves.items():
            out[f"{arm}/seed{seed}"] = {"result": {
                "final": curve[-1] + 0.001 * seed, "steps": STEPS[-1], "median_step_s": 0.1, "metric": "val_acc",
                "curve": [{"step": s, "val_acc": a + 0.001 * seed} for s, a in zip(STEPS, curve)]}}
        out[f"pretrain-ntp/seed{seed}"] = {"result": {"final": ntp_ppl, "metric": "val_ppl", "median_step_s": 0.1,
                                                       "fit_s": 100.0}}
        out[f"pretrain-mlm-bi/seed{seed}"] = {"result": {"final": 0.5, "metric": "val_mlm_acc",
                                                          "median_step_s": 0.2, "fit_s": 190.0}}
    return out


RISING = [0.2, 0.22, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6]  # 0.45 at step 576: still learning
SETTLED = [0.2, 0.3, 0.4, 0.5, 0.55, 0.58, 0.59, 0.6, 0.6, 0.61]
CHANCE = [0.2, 0.21, 0.2, 0.19, 0.2, 0.21, 0.2, 0.2, 0.21, 0.2]


@pytest.mark.parametrize("mlm_bi, holds, rise", [(SETTLED, True, 0.01), (RISING, False, 0.1), (CHANCE, False, 0.0)])
def test_the_learned_precondition_reads_the_finetuning_curves(mlm_bi, holds, rise):
    claim = CLAIMS[NAME](Settings(out=Path("/out"), seeds=3))
    claim.kmer_order, claim.kmer_ppl = 10, 3.203
    found = records({"mlm-bi": mlm_bi, "ntp": CHANCE})
    end, fifth = claim.measure(found).values, claim.measure(found, at=LAST_FIFTH).values
    assert fifth["mlm-bi"]["acc"] == pytest.approx([mlm_bi[7] + 0.001 * s for s in range(3)])  # step 576
    text, ok = learned_precondition(claim.declaration.learned, claim.declaration.primary, end, fifth)
    assert ok is holds and "the better arm (mlm-bi)" in text and f"rose by {rise:+.3g}" in text
    part = measured(Part(claim, claim.runs(), found, {}, timing=None))
    assert dict(part.preconditions)[text] is holds
    assert any(t.startswith("NTP pretraining") and ok for t, ok in part.preconditions)  # 3.1 below 3.203


def test_the_check_reads_the_pair_at_half_its_finetuning_without_the_pretraining_stages():
    claim = CLAIMS[NAME](Settings(out=Path("/out"), seeds=3))
    claim.kmer_order, claim.kmer_ppl = 10, 3.203
    found = records({"mlm-bi": RISING, "ntp": CHANCE}, ntp_ppl=3.3)
    m = claim.measure(found, at=0.5)
    assert m.values["mlm-bi"]["acc"] == pytest.approx([0.35, 0.351, 0.352])  # step 360
    assert set(m.values) == {"mlm-bi", "ntp"} and not m.preconditions
    end = claim.measure(found)
    assert end.values["pretrain-ntp"]["ppl"] == [3.3] * 3 and end.values["mlm-bi"]["acc"] == [0.6, 0.601, 0.602]
    (text, ok), = end.preconditions
    assert not ok and "(the 11-mer count model, 3.203)" in text  # 3.3 does not beat the 11-mers
