"""The shared runner and report on fake arms: runs in dependency order at both declared budgets, skip on rerun,
refuse changed settings, report failures and preconditions, and write results.json, report.md (table of mean ± SE,
paper values, every seed, verdict lines with intervals and p-values, the plan) and figures."""

import json

import pytest

from seqssm.study.reproduce import report, runner, work
from seqssm.study.reproduce.claim import Claim, Comparison, Measurements, Metric, ReproduceError, Run, Settings

pytest.importorskip("matplotlib", reason="needs the plot extra: pip install 'seqssm[plot]'")


class FakeClaim(Claim):
    """Arms a (scores 1.0, 1.2, 1.4 by seed) and b (0.0, 0.1, 0.2), a 'pre' stage b's runs need; read at a fraction
    `at` of training, a's scores are `at` times theirs and b's `early` times (1 - at) higher."""

    name = "fake"
    title = "a fake claim"
    source = "nobody, 1.1"
    claim = "a beats b"
    arms = ("a", "b", "pre")
    metrics = (Metric("score", "score"),)
    paper_values = {"a": {"score": "0.9"}}
    level = {"a": 1.0, "b": 0.0, "pre": 0.0}
    precondition = True
    early = 0.0

    def runs(self):
        runs = []
        for seed in self.seeds():
            runs.append(Run(f"pre/seed{seed}", "pre", seed, "fake", {"value": self.level["pre"]}, 10))
            for arm in ("a", "b"):
                needs = (f"pre/seed{seed}",) if arm == "b" else ()
                value = self.level[arm] + self.factor * 0.1 * seed * (2 if arm == "a" else 1)
                runs.append(Run(f"{arm}/seed{seed}", arm, seed, "fake", {"value": value}, 10, needs))
        return runs

    def measure(self, records, at=1.0):
        m = Measurements()
        for key, record in sorted(records.items()):
            score = record["result"]["score"]
            if record["arm"] == "a":
                m.add("a", "score", score * at)
            elif record["arm"] == "b":
                m.add("b", "score", score + self.early * (1 - at))
        m.notes.append("a note")
        m.preconditions.append(("the fake task is learned", self.precondition))
        return m

    def plot(self, m, folder):
        plt = __import__("seqssm.study.reproduce.plots", fromlist=["pyplot"]).pyplot()
        fig, ax = plt.subplots()
        ax.plot([0, 1])
        return [__import__("seqssm.study.reproduce.plots", fromlist=["save"]).save(fig, folder / "fake.png")]


@pytest.fixture
def calls(monkeypatch):
    """The fake worker: records the keys it ran, fails for value < 0, returns {score: value}."""
    ran = []

    def fake(run_dir, config, progress):
        ran.append(run_dir.relative_to(run_dir.parents[1]).as_posix())
        progress(5)
        if config["value"] < 0:
            raise RuntimeError("negative value")
        return {"score": config["value"]}

    monkeypatch.setitem(work.WORKERS, "fake", fake)
    return ran


DECLARATION = """
metric: the fake score, a against b
comparisons:
  - {metric: score, a: a, b: b, relation: greater, role: primary, paper: "a 0.9 vs b 0.1"}
  - {metric: score, a: b, b: a, relation: equivalent, margin: 0.1, role: secondary, paper: "nothing"}
  - {metric: score, a: a, b: a, relation: faster, role: speed, paper: "no ratio"}
seeds: {n: 3, sd: 0.1, effect: 0.5, why: "made up"}
budgets: {factors: [1.0, 2.0], why: "a test"}
full_scale: {settings: "big", seeds: 2, unit: step, s_per_unit_here: 0.5, flop_ratio: 10, flop_why: "x10"}
"""


def run(tmp_path, **kw):
    recipes = tmp_path / "recipes"
    (recipes / "fake").mkdir(parents=True, exist_ok=True)
    (recipes / "fake" / "claim.yaml").write_text(DECLARATION)
    claim = FakeClaim(Settings(out=tmp_path, jobs=1, recipes=recipes, **kw))
    return claim, runner.run_claim(claim, log=lambda line: None, bars=False)


def test_runs_in_dependency_order_at_both_budgets_and_reports(tmp_path, calls):
    claim, summary = run(tmp_path)
    assert len(calls) == 18  # 9 runs at each budget
    for seed in range(3):
        assert calls.index(f"pre/seed{seed}") < calls.index(f"b/seed{seed}")
    assert summary["verdict"] == "agrees" and summary["verdicts"] == ["agrees", "agrees"]
    main, twice = summary["budgets"]
    assert [c["verdict"] for c in main["comparisons"]] == ["agrees", "disagrees", "reported"]
    assert main["counts"] == {"agrees": 0, "disagrees": 1, "inconclusive": 0}  # the primary is not among them
    a = main["arms"]["a"]["score"]
    assert a["values"] == pytest.approx([1.0, 1.2, 1.4]) and a["mean"] == pytest.approx(1.2)
    assert twice["arms"]["a"]["score"]["values"] == pytest.approx([1.0, 1.4, 1.8])  # the factor 2 budget
    saved = json.loads((tmp_path / "fake" / "results.json").read_text())
    assert saved["verdict"] == "agrees" and set(saved["budgets"][0]["runs"]) == {r.key for r in claim.runs()}
    md = (tmp_path / "fake" / "report.md").read_text()
    assert "| a | 1.200 ± 0.115 | 0.9 |" in md  # mean ± SE, the paper's value beside it
    assert "| a | score | 1.000, 1.200, 1.400 |" in md  # every seed
    assert ("- **agrees** (primary): a > b on score: 1.200 vs 0.100 (seeds 1.000, 1.200, 1.400 | 0.000, 0.100, "
            "0.200); difference +1.100, 95% CI [") in md
    assert "one-sided Welch p = 0.0" in md and "TOST p = " in md and "(Holm " in md
    assert "Verdict at the budget: **agrees**; at twice it: **agrees**." in md
    assert "### At the budget (budget-1x)" in md and "### At twice the budget (budget-2x)" in md
    assert "power 0.99" in md or "power 1.00" in md
    # 2 seeds x 3 full-scale runs of 10 steps x 0.5 s x 10 / 250 / 3600
    assert "`seqssm reproduce fake --scale full` (big; 6 runs, 2 seeds): about 0.0 h" in md
    assert "- a note" in md and "- Precondition holds: the fake task is learned" in md and "![fake](fake.png)" in md
    assert (tmp_path / "fake" / "fake.png").stat().st_size > 0
    result = tmp_path / "fake" / "budget-1x" / "a" / "seed1" / "result.json"
    assert json.loads(result.read_text())["result"] == {"score": 1.2}


def test_full_scale_estimate_scales_the_model_share_only(tmp_path):
    recipes = tmp_path / "recipes"
    (recipes / "fake").mkdir(parents=True)
    (recipes / "fake" / "claim.yaml").write_text(DECLARATION.replace("flop_ratio: 10", "flop_ratio: 10, "
                                                                     "env_s_per_unit: 0.25"))
    claim = FakeClaim(Settings(out=tmp_path, recipes=recipes))
    hours, runs = report.full_scale_estimate(claim)
    # 2 seeds x 3 runs x 10 steps, each 0.25 s of environment + (0.5 - 0.25) s x 10 FLOPs / 250
    assert runs == 6 and hours == pytest.approx(60 * (0.25 + 0.25 * 10 / report.H100_OVER_CPU_THREAD) / 3600)


def test_a_failed_precondition_fails_the_claim(tmp_path, calls, monkeypatch):
    monkeypatch.setattr(FakeClaim, "precondition", False)
    _, summary = run(tmp_path)
    assert summary["verdict"] == "precondition failed"
    assert "- Precondition FAILS: the fake task is learned" in (tmp_path / "fake" / "report.md").read_text()


def test_finished_runs_are_skipped_on_a_second_call(tmp_path, calls):
    run(tmp_path)
    calls.clear()
    (tmp_path / "fake" / "budget-1x" / "b" / "seed2" / "result.json").unlink()  # as if interrupted there
    _, summary = run(tmp_path)
    assert calls == ["b/seed2"]
    assert summary["budgets"][0]["arms"]["b"]["score"]["values"] == pytest.approx([0.0, 0.1, 0.2])


def test_runs_made_with_other_settings_are_not_reused(tmp_path, calls):
    run(tmp_path)
    with pytest.raises(ReproduceError, match=r"was made with other settings \(value: 1.2 -> 1.4\)"):
        FakeClaim.precondition = True
        claim = FakeClaim(Settings(out=tmp_path, jobs=1, recipes=tmp_path / "recipes"))
        runner.execute(claim.at_budget(2.0, claim.root / "budget-1x").runs(), claim.root / "budget-1x", 1,
                       lambda line: None, bars=False)


def test_a_failed_run_is_reported_and_skips_what_needs_it(tmp_path, calls, monkeypatch):
    monkeypatch.setitem(FakeClaim.level, "pre", -1.0)
    _, summary = run(tmp_path)
    main = summary["budgets"][0]
    assert set(main["failed"]) == {f"{arm}/seed{s}" for arm in ("pre", "b") for s in range(3)}
    assert "negative value" in main["failed"]["pre/seed0"]
    assert "skipped: a run it needs failed" in main["failed"]["b/seed0"]
    assert [c["verdict"] for c in main["comparisons"]] == ["no data", "no data", "reported"]  # b never ran
    md = (tmp_path / "fake" / "report.md").read_text()
    assert "Runs that failed" in md and "`pre/seed0`: RuntimeError: negative value" in md
    assert "| a | 1.200 ± 0.115 |" in md  # the arm that ran is still reported


def test_one_seed_gives_values_without_standard_errors(tmp_path, calls):
    _, summary = run(tmp_path, seeds=1)
    assert summary["verdict"] == "inconclusive"
    saved = json.loads((tmp_path / "fake" / "results.json").read_text())
    assert saved["budgets"][0]["arms"]["a"]["score"]["se"] is None  # strict JSON: NaN written as null
    assert "| a | 1.000 | 0.9 |" in (tmp_path / "fake" / "report.md").read_text()


def test_the_index_report_links_every_claim(tmp_path, calls):
    claim, _ = run(tmp_path)
    summaries = runner.run_all([claim], log=lambda line: None, bars=False)
    index = (tmp_path / "report.md").read_text()
    assert ("| [fake](fake/report.md) | nobody, 1.1 | agrees, at 100% of the full-scale plan's steps | agrees (2x) | "
            "0 / 1 / 0 |") in index
    assert "![fake](fake/fake.png)" in index and summaries[0]["claim"] == "fake"


def test_a_declaration_without_one_primary_comparison_is_refused(tmp_path):
    recipes = tmp_path / "recipes"
    (recipes / "fake").mkdir(parents=True)
    (recipes / "fake" / "claim.yaml").write_text(DECLARATION.replace("role: primary", "role: secondary"))
    with pytest.raises(ReproduceError, match="exactly one primary comparison"):
        FakeClaim(Settings(out=tmp_path, recipes=recipes))
    with pytest.raises(ValueError, match="must say why"):
        Comparison("score", "a", "b", "greater", "paper", role="sanity")


def test_bad_settings_are_refused():
    for kw, message in (({"seeds": 0}, "--seeds must be >= 1"), ({"budget": 0.0}, "--budget must be a positive"),
                        ({"jobs": 0}, "--jobs must be >= 1"), ({"scale": "huge"}, "--scale must be one of"),
                        ({"smoke": True, "scale": "full"}, "--smoke shrinks the miniature")):
        with pytest.raises(ReproduceError, match=message):
            Settings(out=".", **kw)


def test_fmt_and_overall():
    assert report.fmt([], ".2f") == "–"
    assert report.fmt([1.0], ".2f") == "1.00"
    rows = [{"role": "primary", "verdict": "agrees"}, {"role": "secondary", "verdict": "disagrees"}]
    assert report.overall(rows, [("ok", True)]) == "agrees"  # the primary comparison decides
    assert report.overall(rows, [("ok", True), ("stand-in", False)]) == "precondition failed"


CHECKED = DECLARATION.replace('budgets: {factors: [1.0, 2.0], why: "a test"}',
                              'budgets: {factors: [1.0], check: 0.5, minutes: 1, why: "a test"}\n'
                              'learned: {level: 1.0, plateau: 0.3, why: "a test"}')


def run_checked(tmp_path, declaration=CHECKED, **kw):
    recipes = tmp_path / "recipes"
    (recipes / "fake").mkdir(parents=True, exist_ok=True)
    (recipes / "fake" / "claim.yaml").write_text(declaration)
    claim = FakeClaim(Settings(out=tmp_path, jobs=1, recipes=recipes, **kw))
    return claim, runner.run_all([claim], log=lambda line: None, bars=False)[0]


def index_row(tmp_path):
    return next(line for line in (tmp_path / "report.md").read_text().splitlines() if line.startswith("| [fake]"))


def test_one_budget_is_run_and_its_check_read_from_the_same_runs(tmp_path, calls):
    _, summary = run_checked(tmp_path)
    assert len(calls) == 9  # one run budget
    main, check = summary["budgets"]
    assert check["at"] == 0.5 and check["arms"]["a"]["score"]["values"] == pytest.approx([0.5, 0.6, 0.7])
    # a rose from 0.96 at four fifths to 1.2: 0.24 < 0.3, and 1.2 >= 1.0
    learned = main["preconditions"][-1]
    assert learned["holds"] and learned["check"].startswith("learned: the better arm (a) reaches 1.2")
    assert summary["verdicts"] == ["agrees", "agrees"] and summary["verdict"] == "agrees"
    assert summary["elapsed_s"] == main["elapsed_s"]  # the check ran nothing
    assert [c["role"] for c in check["comparisons"]] == ["primary", "secondary"]  # no step times at the check
    md = (tmp_path / "fake" / "report.md").read_text()
    assert "### The check: the same runs at 0.5 of their training" in md
    assert "no finished runs to compare" not in md and "the check does not compare it" in md
    assert "Budget, fixed before running: 1x the recipes' steps, with the verdict checked at 0.5" in md
    assert index_row(tmp_path).startswith("| [fake](fake/report.md) | nobody, 1.1 | agrees, at 100% of the "
                                          "full-scale plan's steps | agrees (0.5 of the budget) | 0 / 1 / 0 |")


def test_a_check_that_says_the_opposite_makes_the_claim_unstable_and_counts_nothing(tmp_path, calls, monkeypatch):
    monkeypatch.setattr(FakeClaim, "early", 4.0)  # b far ahead at half the budget
    _, summary = run_checked(tmp_path)
    assert summary["verdicts"] == ["agrees", "disagrees"] and summary["verdict"] == "unstable"
    assert summary["counts"] == {"agrees": 0, "disagrees": 0, "inconclusive": 0}
    assert "| unstable: agrees at the budget, disagrees at the check, at 100% of the full-scale plan's steps | " \
           "disagrees (0.5 of the budget) | 0 / 0 / 0 |" in index_row(tmp_path)


@pytest.mark.parametrize("learned, holds", [("{level: 1.0, plateau: 0.3, why: w}", True),
                                            ("{level: 1.3, plateau: 0.3, why: w}", False),  # below the level
                                            ("{level: 1.0, plateau: 0.2, why: w}", False)])  # still improving
def test_the_learned_precondition_fails_the_claim_and_then_no_comparison_counts(tmp_path, calls, learned, holds):
    declaration = CHECKED.replace('learned: {level: 1.0, plateau: 0.3, why: "a test"}', f"learned: {learned}")
    _, summary = run_checked(tmp_path, declaration)
    main = summary["budgets"][0]
    assert main["preconditions"][-1]["holds"] is holds
    if holds:
        assert main["counts"] == {"agrees": 0, "disagrees": 1, "inconclusive": 0}
    else:
        assert summary["verdict"] == main["verdict"] == "precondition failed"
        assert main["counts"] == summary["counts"] == {"agrees": 0, "disagrees": 0, "inconclusive": 0}
        assert main["comparisons"][1]["verdict"] == "disagrees"  # still shown in the report, not counted
        assert ("| precondition failed: learned (no comparison counted) | agrees (0.5 of the budget) | 0 / 0 / 0 |"
                in index_row(tmp_path))


def test_a_failed_stand_in_precondition_counts_no_comparison_either(tmp_path, calls, monkeypatch):
    monkeypatch.setattr(FakeClaim, "precondition", False)
    _, summary = run(tmp_path)
    assert summary["counts"] == {"agrees": 0, "disagrees": 0, "inconclusive": 0}
    assert [c["verdict"] for c in summary["budgets"][0]["comparisons"]][:2] == ["agrees", "disagrees"]
    assert report.qualifier(summary) == "precondition failed: the fake task is learned (no comparison counted)"


def test_results_record_the_commit_the_machine_and_the_load(tmp_path, calls):
    import os
    import subprocess

    _, summary = run_checked(tmp_path)
    saved = json.loads((tmp_path / "fake" / "results.json").read_text())
    head = subprocess.run(["git", "-C", os.path.dirname(report.__file__), "rev-parse", "HEAD"], capture_output=True,
                          text=True)
    assert saved["commit"] == (head.stdout.strip() if head.returncode == 0 else "unknown")
    assert saved["machine"]["cores"] == os.cpu_count() and saved["machine"]["cpu"]
    settings = saved["budgets"][0]["settings"]
    assert len(settings["load_start"]) == len(settings["load_end"]) == 3  # 1-, 5- and 15-minute load averages


def test_outside_a_checkout_the_commit_is_unknown(monkeypatch):
    def no_git(*args, **kw):
        raise FileNotFoundError("git")

    monkeypatch.setattr(report.subprocess, "run", no_git)
    found = report.provenance()
    assert found["commit"] == "unknown" and found["changed_files"] is None and found["machine"]["cores"]


def test_a_speed_ratio_is_judged_only_against_a_bound_on_comparable_hardware():
    with pytest.raises(ValueError, match="hardware comparable"):
        Comparison("t", "a", "b", "faster", "over six times faster (JAX, GPU)", margin=6.0, role="speed")
    judged = Comparison("t", "a", "b", "faster", "2x", margin=2.0, role="speed", hardware="one CPU thread")
    reported = Comparison("t", "a", "b", "faster", "measured on a GPU", role="speed")
    assert judged.counted and not reported.counted and reported.margin == 1.0


def test_the_index_is_rebuilt_from_claims_reported_one_call_at_a_time(tmp_path, calls):
    claim, _ = run_checked(tmp_path)
    first = (tmp_path / "report.md").read_text()
    (tmp_path / "report.md").unlink()
    claims, summaries = report.reported([claim])
    report.write_index(claims, summaries)
    assert (tmp_path / "report.md").read_text() == first  # the same index as the call that ran the claim wrote
    empty = FakeClaim(Settings(out=tmp_path / "elsewhere", recipes=tmp_path / "recipes"))
    with pytest.raises(ReproduceError, match="no claim has been reported in .*elsewhere.*run `seqssm reproduce"):
        report.reported([empty])
