"""A claim's report: results.json, report.md (the table of mean ± standard error over seeds with the wall time per
arm, the paper's numbers beside ours, one verdict line per comparison) and the claim's figures."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from .claim import Claim, Comparison, Measurements, Run
from .stats import Difference, mean, standard_error, verdict

REPORT, RESULTS = "report.md", "results.json"


@dataclass(frozen=True)
class Timing:
    """How long the call that ran a claim's runs took (wall seconds, load average at its start and end) and how many
    of the `total` runs had finished before it (`reused`); `earlier`: these are an earlier call's numbers, read back
    because this call ran nothing."""
    elapsed_s: float
    load_start: float
    load_end: float
    reused: int
    total: int
    earlier: bool = False

    def or_earlier(self, folder: Path, records: dict[str, dict]) -> Timing:
        """This call's timing, or, when it ran nothing, the timing in the results.json of the call that ran these
        very runs (same keys and wall times); this call's if there is none."""
        if self.reused < self.total:
            return self
        try:
            previous = json.loads((folder / RESULTS).read_text())
            ran = {key: run["wall_s"] for key, run in previous["runs"].items()}
            if ran != {key: record["wall_s"] for key, record in records.items()}:
                return self
            settings = previous["settings"]
            return Timing(previous["elapsed_s"], settings["load_start"], settings["load_end"],
                          previous.get("reused_runs", 0), self.total, earlier=True)
        except (OSError, ValueError, KeyError, TypeError):
            return self

    def phrase(self) -> str:
        """The report's words for it, e.g. "12.7 min in all"."""
        minutes = f"{self.elapsed_s / 60:.1f} min"
        ran = f"{self.total - self.reused} of the {self.total} runs ({self.reused} had finished before)"
        if self.earlier:
            rebuilt = "this report is rebuilt from the finished runs"
            return (f"{minutes} in the call that ran them ({rebuilt})" if not self.reused else
                    f"{minutes} in the call that ran {ran}; {rebuilt}")
        return f"{minutes} in all" if not self.reused else f"{minutes} in this call, which ran {ran}"


def require_matplotlib() -> None:
    """Raise SystemExit with the install command unless matplotlib can be imported (the figures need it)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit("seqssm reproduce draws its figures with matplotlib, which is not installed: "
                         "pip install 'seqssm[plot]'") from None


def fmt(values: list[float], spec: str) -> str:
    """"mean ± SE" of the seed values (just the value for one seed; "–" for none)."""
    if not values:
        return "–"
    m, se = mean(values), standard_error(values)
    return f"{m:{spec}}" if math.isnan(se) else f"{m:{spec}} ± {se:{spec}}"


def compare(c: Comparison, values: dict[str, dict[str, list[float]]]) -> dict:
    """One comparison's numbers and verdict ("no data" when an arm has no values for the metric)."""
    a, b = values.get(c.a, {}).get(c.metric, []), values.get(c.b, {}).get(c.metric, [])
    out = {"metric": c.metric, "a": c.a, "b": c.b, "relation": c.relation, "margin": c.margin, "paper": c.paper}
    if not a or not b:
        return {**out, "verdict": "no data"}
    d = Difference.of(a, b)
    return {**out, "a_mean": d.a_mean, "b_mean": d.b_mean, "diff": d.diff, "se": d.se, "n": [len(a), len(b)],
            "verdict": verdict(c.relation, d, c.margin)}


SYMBOL = {"greater": ">", "less": "<", "not_greater": "not better than", "close": "close to"}


def verdict_line(c: dict, claim: Claim) -> str:
    """"- **agrees**: A > B on metric: ours ... Paper: ..." for one comparison."""
    spec = next((m.fmt for m in claim.metrics if m.name == c["metric"]), ".3f")
    label = next((m.label for m in claim.metrics if m.name == c["metric"]), c["metric"])
    margin = f" (margin {c['margin']:{spec}})" if c["relation"] in ("close", "not_greater") and c["margin"] else ""
    head = f"- **{c['verdict']}**: {c['a']} {SYMBOL[c['relation']]} {c['b']}{margin} on {label}"
    if c["verdict"] == "no data":
        return f"{head}: no finished runs to compare. Paper: {c['paper']}"
    se = "n/a (one seed)" if math.isnan(c["se"]) else f"{c['se']:{spec}}"
    return (f"{head}: ours {c['a_mean']:{spec}} vs {c['b_mean']:{spec}}, difference {c['diff']:+{spec}} "
            f"(standard error {se}). Paper: {c['paper']}")


def overall(verdicts: list[str]) -> str:
    """The claim's verdict: disagrees if any comparison disagrees, agrees if all agree, else inconclusive."""
    counted = [v for v in verdicts if v != "no data"]
    if not counted:
        return "no data"
    if "disagrees" in counted:
        return "disagrees"
    return "agrees" if all(v == "agrees" for v in counted) else "inconclusive"


def wall_times(runs: list[Run], records: dict[str, dict]) -> dict[str, list[float]]:
    """Per arm, the seconds its runs took per seed (summed over the arm's runs of one seed)."""
    per: dict[str, dict[int, float]] = {}
    for run in runs:
        if run.key in records:
            seeds = per.setdefault(run.arm, {})
            seeds[run.seed] = seeds.get(run.seed, 0.0) + records[run.key]["wall_s"]
    return {arm: [seeds[s] for s in sorted(seeds)] for arm, seeds in per.items()}


def table(claim: Claim, m: Measurements, walls: dict[str, list[float]]) -> list[str]:
    """The markdown table: one row per arm, each metric as mean ± SE with the paper's value beside it if it has one."""
    arms = [a for a in claim.arms if a in m.values or a in walls]
    columns = []
    for metric in claim.metrics:
        columns.append((metric.label, lambda arm, metric=metric: fmt(m.values.get(arm, {}).get(metric.name, []),
                                                                      metric.fmt)))
        if any(metric.name in claim.paper_values.get(arm, {}) for arm in arms):
            columns.append(("paper", lambda arm, metric=metric:
                            claim.paper_values.get(arm, {}).get(metric.name, "–")))
    columns.append(("wall time per seed (s)", lambda arm: fmt(walls.get(arm, []), ".0f")))
    lines = ["| arm | " + " | ".join(name for name, _ in columns) + " |", "|---|" + "---:|" * len(columns)]
    lines += [f"| {arm} | " + " | ".join(cell(arm) for _, cell in columns) + " |" for arm in arms]
    return lines


def markdown(claim: Claim, summary: dict, timing: Timing, figures: list[Path], m: Measurements, walls: dict) -> str:
    """The claim's report.md."""
    s = summary["settings"]
    budget = "smoke sizes (smoke.yaml)" if s["smoke"] else f"{s['budget']:g} x the recipes' steps"
    lines = [f"## {claim.title}", "", f"Source: {claim.source}.", "", f"Claim: {claim.claim}", "",
             f"Setting: {s['seeds']} seeds, {budget} (recipes/reproduce/{claim.name}/), {s['jobs']} runs side by "
             f"side; {timing.phrase()} on {s['cpus']} CPUs, load average "
             f"{s['load_start']:.1f} at the start and {s['load_end']:.1f} at the end.", ""]
    lines += [f"- {note}" for note in summary["prepare_notes"]]
    lines += ["", "Mean ± standard error over seeds:", "", *table(claim, m, walls), ""]
    lines += [f"- {note}" for note in m.notes]
    lines += ["", f"**Verdict: {summary['verdict']}** (difference against two standard errors):", ""]
    lines += [verdict_line(c, claim) for c in summary["comparisons"]]
    if summary["failed"]:
        lines += ["", "Runs that failed (their seeds are missing above):", ""]
        lines += [f"- `{key}`: {error.strip().splitlines()[-1]}" for key, error in summary["failed"].items()]
    lines += [""] + [f"![{p.stem}]({p.name})" for p in figures]
    return "\n".join(lines).rstrip() + "\n"


def plain(value):
    """`value` with NaN and infinities as None (strict JSON) and numpy numbers as Python ones."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_report(claim: Claim, runs: list[Run], records: dict[str, dict], errors: dict[str, str],
                 prepare_notes: list[str], timing: Timing) -> dict:
    """Measure the finished runs, judge the comparisons, write results.json, the figures and report.md -> summary."""
    require_matplotlib()
    m = claim.measure(records)
    walls = wall_times(runs, records)
    comparisons = [compare(c, m.values) for c in claim.comparisons]
    s = claim.settings
    summary = {
        "claim": claim.name, "title": claim.title, "source": claim.source, "paper_claim": claim.claim,
        "settings": {"seeds": s.seeds, "budget": s.budget, "smoke": s.smoke, "jobs": s.jobs, "cpus": os.cpu_count(),
                     "load_start": timing.load_start, "load_end": timing.load_end},
        "elapsed_s": round(timing.elapsed_s, 1), "reused_runs": timing.reused,
        "timing_from_earlier_call": timing.earlier, "prepare_notes": prepare_notes,
        "arms": {arm: {name: {"values": v, "mean": mean(v), "se": standard_error(v)} for name, v in metrics.items()}
                 for arm, metrics in m.values.items()},
        "wall_s": walls, "paper": claim.paper_values, "notes": m.notes, "comparisons": comparisons,
        "verdict": overall([c["verdict"] for c in comparisons]), "failed": errors,
        "runs": {key: {"arm": r["arm"], "seed": r["seed"], "wall_s": r["wall_s"]} for key, r in records.items()},
    }
    figures = claim.plot(m, claim.folder) if m.values else []
    (claim.folder / RESULTS).write_text(json.dumps(plain(summary), indent=2) + "\n")
    (claim.folder / REPORT).write_text(markdown(claim, summary, timing, figures, m, walls))
    return summary


def reuse_mark(summary: dict) -> str:
    """"*" for a claim whose minutes do not cover all of its runs (some had finished before the call timed)."""
    return "\\*" if summary.get("reused_runs", 0) else ""


def write_index(claims: list[Claim], summaries: list[dict]) -> Path:
    """<out>/report.md: one line per claim (verdict, comparisons, minutes), then every claim's report with its
    figure links pointing into the claim's folder."""
    out = claims[0].settings.out
    lines = ["# Reproductions", "", "| claim | source | verdict | agrees / disagrees / inconclusive | minutes |",
             "|---|---|---|---|---:|"]
    for claim, s in zip(claims, summaries):
        counts = [sum(c["verdict"] == v for c in s["comparisons"]) for v in ("agrees", "disagrees", "inconclusive")]
        lines.append(f"| [{claim.name}]({claim.name}/{REPORT}) | {claim.source} | {s['verdict']} | "
                     f"{' / '.join(map(str, counts))} | {s['elapsed_s'] / 60:.1f}{reuse_mark(s)} |")
    total = sum(s["elapsed_s"] for s in summaries) / 60
    lines += ["", f"{total:.0f} minutes in all: the sum of the claims' minutes, each from the call that ran its runs.",
              ""]
    if any(reuse_mark(s) for s in summaries):
        lines += ["\\* runs reused from an earlier call: those minutes cover only the call that ran the rest "
                  "(the claim's report says how many).", ""]
    for claim in claims:
        text = (claim.folder / REPORT).read_text()
        lines.append(text.replace("](", f"]({claim.name}/").replace(f"]({claim.name}/http", "](http"))
    path = out / REPORT
    path.write_text("\n".join(lines))
    return path
