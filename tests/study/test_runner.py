"""The shared runner and report on fake arms: runs in dependency order, skip on rerun, refuse changed settings,
report failures, and write results.json, report.md (table of mean ± SE, paper values, verdict lines) and figures."""

import json

import pytest

from seqssm.study.reproduce import report, runner, work
from seqssm.study.reproduce.claim import Claim, Comparison, Measurements, Metric, ReproduceError, Run, Settings

pytest.importorskip("matplotlib", reason="needs the plot extra: pip install 'seqssm[plot]'")


class FakeClaim(Claim):
    """Arms a (scores 1.0, 1.2, 1.4 by seed) and b (0.0, 0.1, 0.2), a 'pre' stage b's runs need."""

    name = "fake"
    title = "a fake claim"
    source = "nobody, 1.1"
    claim = "a beats b"
    arms = ("a", "b", "pre")
    metrics = (Metric("score", "score"),)
    paper_values = {"a": {"score": "0.9"}}
    comparisons = (Comparison("score", "a", "b", "greater", "a 0.9 vs b 0.1"),
                   Comparison("score", "b", "a", "close", "nothing", margin=0.1))
    level = {"a": 1.0, "b": 0.0, "pre": 0.0}

    def runs(self):
        runs = []
        for seed in self.seeds():
            runs.append(Run(f"pre/seed{seed}", "pre", seed, "fake", {"value": self.level["pre"]}, 10))
            for arm in ("a", "b"):
                needs = (f"pre/seed{seed}",) if arm == "b" else ()
                value = self.level[arm] + self.settings.budget * 0.1 * seed * (2 if arm == "a" else 1)
                runs.append(Run(f"{arm}/seed{seed}", arm, seed, "fake", {"value": value}, 10, needs))
        return runs

    def measure(self, records):
        m = Measurements()
        for key, record in sorted(records.items()):
            if record["arm"] != "pre":
                m.add(record["arm"], "score", record["result"]["score"])
        m.notes.append("a note")
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


def run(tmp_path, **kw):
    claim = FakeClaim(Settings(out=tmp_path, jobs=1, **kw))
    return claim, runner.run_claim(claim, log=lambda line: None, bars=False)


def test_runs_in_dependency_order_and_reports(tmp_path, calls):
    claim, summary = run(tmp_path)
    assert len(calls) == 9
    for seed in range(3):
        assert calls.index(f"pre/seed{seed}") < calls.index(f"b/seed{seed}")
    assert summary["verdict"] == "disagrees"  # a > b agrees; b close to a (margin 0.1) disagrees
    assert [c["verdict"] for c in summary["comparisons"]] == ["agrees", "disagrees"]
    a = summary["arms"]["a"]["score"]
    assert a["values"] == pytest.approx([1.0, 1.2, 1.4]) and a["mean"] == pytest.approx(1.2)
    assert a["se"] == pytest.approx(0.2 / 3**0.5)
    saved = json.loads((tmp_path / "fake" / "results.json").read_text())
    assert saved["verdict"] == "disagrees" and set(saved["runs"]) == {r.key for r in claim.runs()}
    md = (tmp_path / "fake" / "report.md").read_text()
    assert "| a | 1.200 ± 0.115 | 0.9 |" in md  # mean ± SE, the paper's value beside it
    assert "**agrees**: a > b on score: ours 1.200 vs 0.100, difference +1.100" in md
    assert "- a note" in md and "![fake](fake.png)" in md
    assert (tmp_path / "fake" / "fake.png").stat().st_size > 0
    assert json.loads((tmp_path / "fake" / "a" / "seed1" / "result.json").read_text())["result"] == {"score": 1.2}


def test_finished_runs_are_skipped_on_a_second_call(tmp_path, calls):
    run(tmp_path)
    calls.clear()
    (tmp_path / "fake" / "b" / "seed2" / "result.json").unlink()  # as if interrupted there
    _, summary = run(tmp_path)
    assert calls == ["b/seed2"]
    assert summary["arms"]["b"]["score"]["values"] == pytest.approx([0.0, 0.1, 0.2])


def test_runs_made_with_other_settings_are_not_reused(tmp_path, calls):
    run(tmp_path)
    with pytest.raises(ReproduceError, match=r"was made with other settings \(value: 1.2 -> 1.4\)"):
        run(tmp_path, budget=2.0)


def test_a_failed_run_is_reported_and_skips_what_needs_it(tmp_path, calls, monkeypatch):
    monkeypatch.setitem(FakeClaim.level, "pre", -1.0)
    _, summary = run(tmp_path)
    assert set(summary["failed"]) == {f"{arm}/seed{s}" for arm in ("pre", "b") for s in range(3)}
    assert "negative value" in summary["failed"]["pre/seed0"]
    assert "skipped: a run it needs failed" in summary["failed"]["b/seed0"]
    assert [c["verdict"] for c in summary["comparisons"]] == ["no data", "no data"]
    md = (tmp_path / "fake" / "report.md").read_text()
    assert "Runs that failed" in md and "`pre/seed0`: RuntimeError: negative value" in md
    assert "| a | 1.200 ± 0.115 |" in md  # the arm that ran is still reported


def test_one_seed_gives_values_without_standard_errors(tmp_path, calls):
    _, summary = run(tmp_path, seeds=1)
    assert summary["verdict"] == "inconclusive"
    saved = json.loads((tmp_path / "fake" / "results.json").read_text())
    assert saved["arms"]["a"]["score"]["se"] is None  # strict JSON: NaN written as null
    assert "| a | 1.000 | 0.9 |" in (tmp_path / "fake" / "report.md").read_text()


def test_the_index_report_links_every_claim(tmp_path, calls):
    claim = FakeClaim(Settings(out=tmp_path, jobs=1))
    summaries = runner.run_all([claim], log=lambda line: None, bars=False)
    index = (tmp_path / "report.md").read_text()
    assert "| [fake](fake/report.md) | nobody, 1.1 | disagrees | 1 / 1 / 0 |" in index
    assert "![fake](fake/fake.png)" in index and summaries[0]["claim"] == "fake"


def test_bad_settings_are_refused():
    for kw, message in (({"seeds": 0}, "--seeds must be >= 1"), ({"budget": 0.0}, "--budget must be a positive"),
                        ({"jobs": 0}, "--jobs must be >= 1")):
        with pytest.raises(ReproduceError, match=message):
            Settings(out=".", **kw)


def test_fmt_and_overall():
    assert report.fmt([], ".2f") == "–"
    assert report.fmt([1.0], ".2f") == "1.00"
    assert report.overall(["agrees", "inconclusive"]) == "inconclusive"
    assert report.overall(["agrees", "no data"]) == "agrees"
    assert report.overall(["no data"]) == "no data"
