"""Every claim's runs are valid configs of the project's machinery at full and smoke size, with the sizes the
recipes promise (parameter-matched widths), and the helpers claims measure with are right."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from seqssm.errors import ReproduceError
from seqssm.study.reproduce import CLAIMS, Settings, by_name
from seqssm.study.reproduce.claim import RECIPES, Declaration
from seqssm.study.reproduce.lra_claims import BidirectionalClaim, ListOpsClaim, RopeClaim
from seqssm.study.reproduce.report import plan, pooled_sd
from seqssm.study.reproduce.rl_claims import RLClaim, corridors_opened
from seqssm.study.reproduce.species_claim import kmer_perplexity
from seqssm.study.reproduce.stats import power, seeds_for_power, welch_test


def needs_rl_extra(name=None):
    """Skip (naming the extra) a check of an RL claim, or of the RL machinery when no name is given, without it."""
    if name is None or issubclass(CLAIMS[name], RLClaim):
        pytest.importorskip("gymnasium", reason="RL claims need the rl extra: pip install 'seqssm[rl]'")


def runs_of(name, smoke=False, **kw):
    return CLAIMS[name](Settings(out=Path("/nonexistent"), smoke=smoke, **kw)).runs()


def every_arm_runs(name, **kw):
    """The runs of every arm of the claim at the miniature's sizes, not only the arms its claim.yaml runs."""
    claim = CLAIMS[name](Settings(out=Path("/nonexistent"), **kw))
    claim.arms = CLAIMS[name].arms
    return claim.runs()


def budget_runs(name, factor, **kw):
    claim = CLAIMS[name](Settings(out=Path("/nonexistent"), **kw))
    return claim.at_budget(factor, claim.root / "x").runs()


@pytest.fixture(autouse=True)
def keep_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("scale", ["mini", "smoke", "full"])
@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_every_run_of_every_claim_is_a_valid_config(name, scale, monkeypatch, tmp_path):
    needs_rl_extra(name)
    settings = Settings(out=Path("/nonexistent"), smoke=scale == "smoke", scale="full" if scale == "full" else "mini")
    claim = CLAIMS[name](settings)
    runs = claim.runs()
    assert {r.arm for r in runs} >= set(claim.arms) - {"pre"}
    assert len({r.key for r in runs}) == len(runs)
    first_per_arm = {}
    for run in runs:
        first_per_arm.setdefault((run.arm, run.kind), run)
    for run in first_per_arm.values():
        if run.kind == "rl":
            from seqssm.rl.config import RunConfig, validate
            from seqssm.rl.runner import check_env

            config = RunConfig.from_dict({k: v for k, v in run.config.items() if k != "final_eval"})
            validate(config)
            check_env(config)
            assert config.algo.total_steps == run.units
        elif run.kind == "fit":
            import yaml

            from seqssm.tasks.lightning_cli import make_cli

            monkeypatch.setattr("sys.argv", ["seqssm"])
            path = tmp_path / f"{run.arm}.yaml"
            config = run.config
            if scale == "full":  # a GPU's settings, checked here on the CPU
                assert config["trainer"]["accelerator"] == "gpu"
                config = {**config, "trainer": {**config["trainer"], "accelerator": "cpu"}}
            path.write_text(yaml.safe_dump(config))
            cli = make_cli(["--config", str(path)], run=False)
            assert cli.trainer.max_steps == run.units
            assert cli.model.hparams.model == run.config["model"]["init_args"]["model"]
        else:
            assert run.kind == "surgery" and run.config["operation"] == "to_bidirectional"


def test_the_registry_names_each_claim_once_with_its_recipes():
    assert all(name == cls.name and (RECIPES / name / "claim.yaml").is_file() for name, cls in CLAIMS.items())
    assert all((RECIPES / cls.replicates).is_dir() for cls in CLAIMS.values() if cls.replicates)
    with pytest.raises(ReproduceError, match="every claim needs a name of its own"):
        by_name(RopeClaim, RopeClaim)


def test_the_claims_of_fit_runs_state_the_full_scale_shape_the_step_time_script_reads():
    fit = {name for name, cls in CLAIMS.items() if not issubclass(cls, RLClaim)
           and all(r.kind in ("fit", "surgery") for r in runs_of(name, scale="full"))}
    assert fit == {name for name, cls in CLAIMS.items() if cls.full_scale_tokens is not None}
    assert not issubclass(RopeClaim, ListOpsClaim) and issubclass(BidirectionalClaim, ListOpsClaim)


def test_budget_scales_the_training_steps():
    full = {r.key: r.units for r in budget_runs("repeat-previous", 1.0)}
    half = {r.key: r.units for r in budget_runs("repeat-previous", 0.5)}
    assert half["s5/seed0"] == pytest.approx(full["s5/seed0"] / 2, rel=0.01) and half["s5/seed0"] % (16 * 128) == 0
    rope = {r.key: r for r in budget_runs("rope", 2.0)}["mamba-s6/seed2"]
    assert rope.units == 190 and rope.config["trainer"]["val_check_interval"] == 19  # 10 validations
    assert rope.config["seed_everything"] == 2


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_every_claim_declares_its_seeds_with_power_its_budget_and_a_full_scale_plan(name):
    """claim.yaml's seeds are the fewest (at least 3) that give the primary comparison 80% power at the declared
    effect and spread, or fewer with the count that would and the reason stated; a claim declared for its primary
    pair runs that pair (with its ceiling arm and the arms whose runs the pair's runs start from) at one budget with a
    check and a "learned" precondition; --scale full runs the full-scale plan, secondary comparisons included."""
    claim = CLAIMS[name](Settings(out=Path("/out")))
    d = claim.declaration
    primary = d.primary
    needed = max(3, seeds_for_power(primary.relation, d.effect, d.sd, primary.margin))
    assert d.seeds_needed() == needed and d.seeds >= 3
    if d.seeds < needed:
        assert d.power() < 0.8 and f"80% power needs {needed} seeds" in " ".join(d.seeds_why.split())
    else:
        assert d.seeds == needed and d.power() >= 0.8
    if d.check is None:  # two run budgets
        assert [f for f, _ in claim.budgets()] == [1.0, 2.0] and d.budgets_why
        assert [p.name for _, p in claim.budgets()] == ["budget-1x", "budget-2x"]
    else:
        assert [p.name for _, p in claim.budgets()] == ["budget-1x"] and 0 < d.check < 0.8 and d.minutes > 0
        ceiling = {d.learned.ceiling} - {None}
        runs = {r.key: r for r in claim.runs()}
        todo, needed = [r for r in runs.values() if r.arm in (primary.a, primary.b)], set()
        while todo:  # the runs the pair's runs start from, and theirs
            todo += [runs[key] for key in todo.pop().needs]
            needed |= {r.arm for r in todo}
        assert set(claim.arms) == {primary.a, primary.b} | ceiling | needed and d.learned.why
        assert all({c.a, c.b} <= set(claim.arms) and c.role != "secondary" for c in d.comparisons)
    full = CLAIMS[name](Settings(out=Path("/out"), scale="full"))
    assert [p.name for _, p in full.budgets()] == ["full"] and len(full.seeds()) == d.full["seeds"]
    assert full.arms == CLAIMS[name].arms and set(d.comparisons) <= set(full.comparisons)
    mini_config = {r.key: r.config for r in claim.runs()}
    assert all(r.config != mini_config.get(r.key) for r in full.runs() if r.kind != "surgery")
    assert sum(c.role == "primary" for c in d.comparisons) == 1
    assert all(c.why for c in d.comparisons if c.role == "sanity")


# per re-declared claim: seeds, smallest effect, sd (the last run's), the primary comparison's power, minutes on 2 cores
PLAN = {"repeat-previous": (3, 0.5, 0.034, 1.00, 9), "memory-corridor": (8, 2.0, 1.46, 0.83, 82),
        "best-arm": (3, 0.1, 0.0316, 0.93, 2), "memory-length": (5, 0.333, 0.1925, 0.80, 33),
        "rope": (24, 0.0, 0.027, 0.81, 12), "bidirectional": (6, 0.02, 0.0122, 0.84, 26),
        "species-pretraining": (5, 0.05, 0.0284, 0.81, 20)}
DECLARED_RUN = ("repeat-previous", "memory-corridor", "best-arm", "memory-length", "bidirectional")


@pytest.mark.parametrize("name", sorted(PLAN))
def test_the_declared_plan_numbers_follow_from_the_effect_and_the_spread(name):
    """Each re-declared claim's seeds are the fewest reaching 80% power at its declared effect and sd, with the power
    the plan in docs/reproduction.md states."""
    d = CLAIMS[name](Settings(out=Path("/out"))).declaration
    n, effect, sd, planned, minutes = PLAN[name]
    p = d.primary
    assert (d.seeds, d.effect, d.sd, d.minutes) == (n, effect, sd, minutes)
    assert d.power() == pytest.approx(power(p.relation, effect, sd, n, p.margin)) and round(d.power(), 2) == planned
    assert d.power() >= 0.8 and (n == 3 or power(p.relation, effect, sd, n - 1, p.margin) < 0.8)


def test_the_declared_run_decides_its_claims_on_two_cores_in_under_three_hours():
    assert {"bidirectional", "memory-length", "memory-corridor"} <= set(DECLARED_RUN)
    assert sum(CLAIMS[name](Settings(out=Path("/out"))).declaration.minutes for name in DECLARED_RUN) < 180


DOCS = Path(__file__).parents[2] / "docs"


def _doc_tables(header):
    """Every table of docs/reproduction.md whose header row starts with `header`: {first cell: the other cells}."""
    lines = (DOCS / "reproduction.md").read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(header)]
    return [{cells[0]: cells[1:] for cells in ([c.strip() for c in line.split("|")[1:-1]]
                                              for line in lines[start + 2:lines.index("", start)])}
            for start in starts]


def test_docs_state_the_declared_plan_as_claim_yaml_computes_it():
    """docs/reproduction.md's declaration tables: per claim the pair, effect, sd, seeds, power, budget, check and
    minutes, as the claim.yaml gives them: the declared run's claims, then the replication declared after it."""
    tables = _doc_tables("| claim | pair (primary) | smallest effect")
    assert [set(rows) for rows in tables] == [set(PLAN), {"bidirectional-replication"}]
    rows = tables[0] | tables[1]
    for name in rows:
        d = CLAIMS[name](Settings(out=Path("/out"))).declaration
        pair, effect, sd, seeds, planned, _budget, check, minutes = rows[name][:8]
        assert pair == f"{d.primary.a} vs {d.primary.b}"
        assert (float(effect), float(sd), int(seeds), int(minutes)) == (d.effect, d.sd, d.seeds, d.minutes)
        assert planned == f"{d.power():.2f}" and check == f"{d.check:g}"


def test_the_bidirectional_replication_runs_the_declared_runs_on_fresh_seeds_at_the_spread_they_measured():
    """The replication's claim.yaml takes the pooled spread the declared run measured (its copied results.json), the
    fewest seeds reaching 80% power at it, and seeds that run did not use; its runs are the declared claim's, seed for
    seed, and it judges its own seeds only."""
    first = CLAIMS["bidirectional"](Settings(out=Path("/out")))
    again = CLAIMS["bidirectional-replication"](Settings(out=Path("/out")))
    ran = json.loads((DOCS / "reproduction" / "bidirectional" / "results.json").read_text())["budgets"][0]
    primary = next(c for c in ran["comparisons"] if c["role"] == "primary")
    d = again.declaration
    assert (primary["a"], primary["b"]) == (d.primary.a, d.primary.b) == (first.declaration.primary.a,
                                                                           first.declaration.primary.b)
    assert d.sd == round(pooled_sd(primary), 4) == 0.0174 and first.declaration.power(6, d.sd) < 0.8
    assert d.seeds == seeds_for_power(d.primary.relation, d.effect, d.sd, d.primary.margin) and d.power() >= 0.8
    assert ran["settings"]["seeds"] == len(first.seeds()) == d.first_seed == again.seeds()[0]
    assert len(again.seeds()) == d.seeds and not set(again.seeds()) & set(first.seeds())
    assert (d.effect, d.budgets, d.check, d.learned) == (first.declaration.effect, first.declaration.budgets,
                                                         first.declaration.check, first.declaration.learned)
    wider = {r.key: r.config for r in CLAIMS["bidirectional"](Settings(out=Path("/out"), seeds=17)).runs()}
    assert all(r.config == wider[r.key] for r in again.runs()) and len(again.runs()) == 2 * d.seeds


def test_the_replications_report_names_its_fresh_seeds():
    replication = plan(CLAIMS["bidirectional-replication"](Settings(out=Path("/out"))),
                       [{"role": "primary", "verdict": "no data"}])
    assert "Seeds: 11 per arm (seeds 6 to 16, which no earlier run used). Planned (11 seeds)" in replication[2]
    assert plan(CLAIMS["bidirectional"](Settings(out=Path("/out"))),
                [{"role": "primary", "verdict": "no data"}])[2].startswith("Seeds: 6 per arm. Planned")


def _to_its_digits(text, value):
    """Does the number `text` (as a table prints it, "+0.023", "0.0008") round `value` to its own decimals?"""
    decimals = len(text.split(".")[1]) if "." in text else 0
    return abs(float(text) - value) <= 0.5 * 10 ** -decimals + 1e-12


def test_docs_state_each_claims_outcome_as_its_copied_results_json_records_it():
    """docs/reproduction.md's "What each claim got" row of every claim that ran (its results.json copied beside the
    page): the verdict, seeds, measured sd and the power at it, p for / against and the interval, each as the
    recorded seed values compute them, to the digits printed."""
    (rows,) = _doc_tables("| claim | pair | seeds (declared power)")
    ran = sorted(p.parent.name for p in (DOCS / "reproduction").glob("*/results.json"))
    assert set(ran) <= set(rows) and "bidirectional-replication" in ran
    for name in ran:
        results = json.loads((DOCS / "reproduction" / name / "results.json").read_text())
        budget = results["budgets"][0]
        primary = next(c for c in budget["comparisons"] if c["role"] == "primary")
        _pair, seeds, sd, power_measured, verdict, p, difference = rows[name][:7]
        d = CLAIMS[name](Settings(out=Path("/out"))).declaration
        assert verdict.startswith(results["qualified"].split(" (")[0]), name
        n = len(primary["a_values"])
        assert seeds.startswith(f"{n} ({d.power(n):.2f})") and n == len(primary["b_values"]) == d.seeds, name
        measured = pooled_sd(primary)
        assert _to_its_digits(sd.split(" / ")[1], measured) and power_measured == f"{d.power(n, measured):.2f}", name
        again = welch_test(primary["relation"], primary["a_values"], primary["b_values"], primary["margin"])
        assert again.p == pytest.approx(primary["p"], abs=1e-12), name
        p_for, p_against = p.split(" / ")
        assert _to_its_digits(p_for, again.p) and (p_against == "–" or _to_its_digits(p_against, again.p_against))
        estimate, low, high = difference.replace("[", "").replace("]", "").replace(",", "").split()
        assert all(_to_its_digits(text, value) for text, value in zip((estimate, low, high),
                                                                         (again.estimate, *again.interval))), name


def test_a_declared_first_seed_must_not_be_negative(tmp_path):
    path = tmp_path / "claim.yaml"
    path.write_text((RECIPES / "bidirectional-replication" / "claim.yaml").read_text()
                    .replace("_base_: ../bidirectional", f"_base_: {RECIPES / 'bidirectional'}")
                    .replace("first: 6", "first: -1"))
    with pytest.raises(ReproduceError, match="seeds.first must be >= 0, got -1"):
        Declaration.load(path, BidirectionalClaim.arms, tuple(m.name for m in BidirectionalClaim.metrics))


def parameters(module):
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("name", ["repeat-previous", "memory-length"])
def test_s5_is_parameter_matched_to_the_gru(name):
    needs_rl_extra()
    from seqssm.rl.config import RunConfig
    from seqssm.rl.core import build_core

    cores = {r.arm: build_core(RunConfig.from_dict({k: v for k, v in r.config.items() if k != "final_eval"})
                               .agent.core) for r in runs_of(name) if r.arm in ("s5", "gru")}
    assert parameters(cores["s5"]) == pytest.approx(parameters(cores["gru"]), rel=0.1)


@pytest.mark.parametrize("name, arms, vocab, classes", [
    ("bidirectional", ("mamba-s6", "mamba-s6-bi"), 18, 10),
    ("species-pretraining", ("regular", "bidirectional"), 12, 5),
])
def test_bidirectional_widths_are_parameter_matched(name, arms, vocab, classes):
    """The bidirectional width is the largest whose parameter count stays within the causal model's (Ulbaek 2024 thesis,
    table 6), and F1's NTP parent has it too (Ulbaek 2024 thesis, 16.7.2)."""
    from seqssm.study.species import matched_bidirectional_width

    runs = {r.key.split("/")[0]: r.config for r in every_arm_runs(name) if r.seed == 0}
    causal, bi = (runs[a]["model"]["init_args"]["model_overrides"] for a in arms)

    assert bi["d_model"] == matched_bidirectional_width(causal["d_model"], vocab_size=vocab, n_classes=classes,
                                                        n_layers=causal["n_layers"])
    if name == "species-pretraining":
        widths = {k: runs[k]["model"]["init_args"]["model_overrides"]["d_model"] for k in
                  ("pretrain-ntp", "pretrain-ntp-f1", "pretrain-mlm-bi", "ntp", "mlm-bi", "f1")}
        assert widths == {"pretrain-ntp": 32, "pretrain-ntp-f1": bi["d_model"], "pretrain-mlm-bi": bi["d_model"],
                          "ntp": 32, "mlm-bi": bi["d_model"], "f1": bi["d_model"]}
    else:  # the placebo (a full-scale arm) has the bidirectional width
        full = {r.key.split("/")[0]: r.config["model"]["init_args"]["model_overrides"]["d_model"]
                for r in runs_of(name, scale="full") if r.seed == 0}
        assert full["mamba-s6-placebo"] == full["mamba-s6-bi"]


def test_species_finetuning_arms_start_from_their_pretraining():
    runs = {r.key: r for r in every_arm_runs("species-pretraining", seeds=1)}
    assert runs["ntp/seed0"].needs == ("pretrain-ntp/seed0",)
    init_from = runs["ntp/seed0"].config["model"]["init_args"]["init_from"]
    assert init_from.endswith("pretrain-ntp/seed0/checkpoints/last.ckpt")
    assert runs["f1/seed0"].needs == ("surgery-f1/seed0",)
    assert runs["surgery-f1/seed0"].config["parents"][0].endswith("pretrain-ntp-f1/seed0/checkpoints/last.ckpt")
    assert runs["mlm-bi/seed0"].config["model"]["init_args"]["reinit_head"] is True
    assert "init_from" not in runs["regular/seed0"].config["model"]["init_args"]
    assert runs["pretrain-mlm-bi/seed0"].config["data"]["init_args"]["task"] == "mlm"
    assert runs["regular/seed0"].config["data"]["init_args"]["train_subset"] == "finetune"


@pytest.mark.parametrize("episode_return, opened", [(0, 0), (1, 1), (2, 1), (3, 2), (5, 2), (6, 3), (35, 7), (36, 8)])
def test_corridors_opened_inverts_the_memory_corridor_reward(episode_return, opened):
    assert corridors_opened(episode_return) == opened


def test_corridors_opened_matches_the_environment():
    needs_rl_extra()
    from seqssm.rl.envs import MemoryCorridor

    env = MemoryCorridor(num_doors=3, length=6)
    rng = np.random.default_rng(0)
    for episode in range(30):
        env.reset(seed=episode)
        total, done, stop_after = 0.0, False, rng.integers(0, 7)  # play right until `stop_after` corridors, then err
        while not done:
            right = int(env.doors[env.position])
            action = right if env.opened < stop_after else (right + 1) % 3
            _, reward, done, _, _ = env.step(action)
            total += reward
        assert corridors_opened(total) == env.opened


def test_kmer_perplexity_of_uniform_and_of_periodic_sequences():
    rng = np.random.default_rng(0)
    uniform = [rng.integers(0, 4, 50_000).astype(np.uint8) for _ in range(2)]
    assert kmer_perplexity(uniform[:1], uniform[1:]) == pytest.approx(4.0, rel=0.02)
    periodic = np.tile(np.array([0, 1, 2, 3, 3, 2], np.uint8), 5000)
    assert kmer_perplexity([periodic], [periodic]) < 1.01
    assert math.isfinite(kmer_perplexity([periodic], uniform[:1]))


def test_the_memoryless_core_keeps_the_layer_contract():
    from seqssm.study.reproduce.work import Memoryless

    core = Memoryless(8)
    x = torch.randn(2, 5, 8)
    y, state = core.scan(x, core.initial_state(2), resets=torch.zeros(2, 5, dtype=torch.bool))
    steps = torch.stack([core.step(x[:, t], state)[0] for t in range(5)], dim=1)
    assert state == () and torch.equal(y, core(x)) and torch.allclose(steps, y)


def test_species_prepare_indexes_every_genome_before_runs_read_them(tmp_path):
    # runs side by side open the same FASTA files; an index each of them would write at once must already be there
    claim = CLAIMS["species-pretraining"](Settings(out=tmp_path, seeds=1, smoke=True))
    claim.prepare()
    fastas = sorted(tmp_path.glob("data/*/*/chr*.fna"))
    assert fastas
    for fasta in fastas:
        index = Path(f"{fasta}.fai")
        assert index.stat().st_size > 0 and index.stat().st_mtime >= fasta.stat().st_mtime


def test_the_ceiling_precondition_asks_the_ceiling_arm_to_lead_both_arms_of_the_pair():
    from seqssm.study.reproduce.claim import Comparison, Learned, learned_precondition

    primary = Comparison("ret", "kf", "gru", "greater", "p", role="primary")
    ceiling = Learned("w", ceiling="oracle")
    values = {"kf": {"ret": [0.33, 0.34]}, "gru": {"ret": [0.38, 0.39]}, "oracle": {"ret": [0.41, 0.42]}}
    text, holds = learned_precondition(ceiling, primary, values, None)
    assert holds and text.startswith("learned: the ceiling arm (oracle, 0.415) leads")
    values["oracle"]["ret"] = [0.03, 0.04]  # the Oracle below the memories: nothing learned yet
    assert not learned_precondition(ceiling, primary, values, None)[1]
    assert not learned_precondition(ceiling, primary, {"kf": values["kf"]}, None)[1]  # the pair incomplete
    for bad in ({}, {"level": 1.0}, {"level": 1.0, "plateau": 0.1, "ceiling": "oracle"},
                {"level": 1.0, "plateau": 0.0}):
        with pytest.raises(ValueError):
            Learned("w", **bad)


def test_repeat_previous_reports_the_gpu_speed_ratio_and_judges_nothing_on_it():
    d = CLAIMS["repeat-previous"](Settings(out=Path("/out"))).declaration
    speed, = [c for c in d.comparisons if c.role == "speed"]
    assert speed.margin == 1.0 and not speed.counted and "reported" in speed.paper
    assert all(not (c.role == "speed" and c.counted) for name in CLAIMS
               for c in CLAIMS[name](Settings(out=Path("/out"), scale="full")).comparisons)


def test_memory_length_counts_solved_lengths_by_bsuites_rule():
    """A length is solved when fewer than 37.5% of its first 10,000 training episodes are imperfect (returns are +1 or
    -1, so an iteration's mean return gives its share)."""
    from seqssm.study.reproduce.rl_claims import imperfect_share

    # 4,000 episodes at chance (half imperfect), then 6,000 right: 2,000 / 10,000 imperfect
    curve = [{"steps": 1, "episodes": 4000, "episodic_return": 0.0},
             {"steps": 2, "episodes": 6000, "episodic_return": 1.0},
             {"steps": 3, "episodes": 5000, "episodic_return": -1.0}]  # past 10,000 episodes: not counted
    assert imperfect_share(curve) == pytest.approx(0.2)
    assert imperfect_share(curve[:1]) == pytest.approx(0.5)  # 50% imperfect: not solved
    assert imperfect_share([{"steps": 1, "episodes": 0, "episodic_return": None}]) is None
    claim = CLAIMS["memory-length"](Settings(out=Path("/out"), seeds=1))
    records = {}
    for arm, late in (("s5", 1.0), ("gru", -1.0)):
        for length in claim.sweep_values():
            result = {"steps": 4, "us_per_step": 100.0, "final": {"eval": {"return_mean": late}},
                      "curve": [{"steps": 2, "episodes": 100, "episodic_return": 1.0, "wall_s": 1.0},
                                {"steps": 4, "episodes": 300, "episodic_return": late, "wall_s": 2.0}]}
            records[f"{arm}/memory_length={length}/seed0"] = {"result": result}
    end, half = claim.measure(records), claim.measure(records, at=0.5)
    assert end.values["s5"]["solve_rate"] == [1.0] and end.values["gru"]["solve_rate"] == [0.0]  # 75% imperfect
    assert half.values["gru"]["solve_rate"] == [1.0] and "return_all" not in half.values["gru"]
