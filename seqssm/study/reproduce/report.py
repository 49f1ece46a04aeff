"""A claim's report: results.json, report.md and the claim's figures. For its budget and for the check (the same runs
read at a fraction of it, or a second run budget): the table of mean ± standard error over seeds with the wall time
per arm and the paper's numbers beside ours, every seed's value, the preconditions (the stand-in's and "learned"),
and one line per declared comparison (its role, the difference with its 95% interval, the p-value, the verdict);
above them the source's metric and baseline, the seeds with their power and the full-scale plan with its estimated
H100 time. results.json also records the commit, the machine and its load."""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from seqssm.errors import MissingExtraError

from .claim import LAST_FIFTH, Claim, Comparison, Measurements, ReproduceError, Run, learned_precondition
from .stats import ALPHA, holm, judge, mean, standard_error, welch_test

REPORT, RESULTS = "report.md", "results.json"


@dataclass(frozen=True)
class Timing:
    """How long the call that ran a claim's runs took (wall seconds, the 1-, 5- and 15-minute load averages at its
    start and end) and how many of the `total` runs had finished before it (`reused`); `earlier`: these are an
    earlier call's numbers, read back because this call ran nothing."""
    elapsed_s: float
    load_start: tuple[float, ...]
    load_end: tuple[float, ...]
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
            return Timing(previous["elapsed_s"], tuple(settings["load_start"]), tuple(settings["load_end"]),
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
    """Raise MissingExtraError (one line and exit 2 from the CLI) with the install command unless matplotlib can be
    imported (the figures need it)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingExtraError("seqssm reproduce draws its figures with matplotlib, which is not installed: "
                                "pip install 'seqssm[plot]'") from None


# the H100's throughput over one CPU thread's on these small models: an estimate, not a measurement of these
# models: the fp32 peak ratio, ~67 TFLOP/s over the ~50 GFLOP/s a 512x512 matmul reaches on one thread of the
# 2-core machine the miniatures were timed on, times 0.2 for small kernels' lower utilisation on a GPU
H100_OVER_CPU_THREAD = 250


@dataclass
class Part:
    """One budget's runs of a claim: the claim at that budget, its runs, their records, failures and timing, read at
    fraction `at` of their training (1: the end; less: the check of a declared budget, from the same runs)."""

    claim: Claim
    runs: list[Run]
    records: dict[str, dict]
    errors: dict[str, str]
    timing: Timing
    at: float = 1.0


def provenance() -> dict:
    """The commit the package runs from (git rev-parse HEAD; "unknown" outside a checkout), whether its tracked files
    differ from it, and the machine: CPU model and cores."""
    here = Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(here), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    cpu = platform.processor() or platform.machine() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass  # not Linux: platform's name stands
    return {"commit": commit or "unknown", "changed_files": None if status is None else bool(status),
            "machine": {"cpu": cpu, "cores": os.cpu_count()}}


def fmt(values: list[float], spec: str) -> str:
    """"mean ± SE" of the seed values (just the value for one seed; "–" for none)."""
    if not values:
        return "–"
    m, se = mean(values), standard_error(values)
    return f"{m:{spec}}" if math.isnan(se) else f"{m:{spec}} ± {se:{spec}}"


def compare(comparisons: tuple[Comparison, ...], values: dict[str, dict[str, list[float]]]) -> list[dict]:
    """Every declared comparison tested on the seed values: the numbers and the verdict ("no data" when an arm has no
    values for the metric). The primary one is judged at ALPHA, the other counted ones at ALPHA after Holm's
    correction, sanity checks at ALPHA without counting; speed ratios without a source ratio are "reported"."""
    rows = []
    for c in comparisons:
        a, b = values.get(c.a, {}).get(c.metric, []), values.get(c.b, {}).get(c.metric, [])
        row = {"metric": c.metric, "a": c.a, "b": c.b, "relation": c.relation, "margin": c.margin, "role": c.role,
               "counted": c.counted, "paper": c.paper, "why": c.why, "a_values": a, "b_values": b}
        if a and b:
            o = welch_test(c.relation, a, b, c.margin)
            # a time ratio is tested on log times: its means are the geometric means
            back = math.exp if c.relation == "faster" else float
            row.update(a_mean=back(o.welch.a_mean), b_mean=back(o.welch.b_mean), estimate=o.estimate,
                       interval=list(o.interval), p=o.p, p_against=o.p_against, df=o.welch.df, n=[len(a), len(b)])
        rows.append(row)
    family = [r for r in rows if r["counted"] and r["role"] != "primary" and "p" in r]
    for r, p, q in zip(family, holm([r["p"] for r in family]), holm([r["p_against"] for r in family])):
        r["p_holm"], r["p_against_holm"] = p, q
    for r in rows:
        if "p" not in r:
            r["verdict"] = "no data"
        elif r["role"] == "speed" and not r["counted"]:
            r["verdict"] = "reported"
        else:
            r["verdict"] = judge(r.get("p_holm", r["p"]), r.get("p_against_holm", r["p_against"]), ALPHA)
    return rows


SYMBOL = {"greater": ">", "less": "<", "not_greater": "not better than", "equivalent": "equivalent to",
          "faster": "faster than"}


def pvalue(p: float) -> str:
    """A p-value as the report prints it."""
    return "n/a (one seed)" if p is None or math.isnan(p) else "< 0.0001" if p < 1e-4 else f"{p:.4f}"


def seeds_text(values: list[float], spec: str) -> str:
    return ", ".join(f"{v:{spec}}" for v in values)


def verdict_line(c: dict, claim: Claim) -> str:
    """"- **agrees** (primary): A > B on metric: means, seeds, difference [95% CI], p. Paper: ..." for one
    comparison."""
    spec = next((m.fmt for m in claim.metrics if m.name == c["metric"]), ".3f")
    label = next((m.label for m in claim.metrics if m.name == c["metric"]), c["metric"])
    role = {"primary": "primary", "secondary": "Holm-corrected", "sanity": "sanity check, not counted",
            "speed": "speed" if c["counted"] else "speed, reported: the source states no bound on comparable hardware"}[c["role"]]
    margin = f" (margin {c['margin']:{spec}})" if c["relation"] in ("equivalent", "not_greater") else ""
    if c["relation"] == "faster" and c["counted"]:
        margin = f" by over {c['margin']:g}x"
    head = f"- **{c['verdict']}** ({role}): {c['a']} {SYMBOL[c['relation']]} {c['b']}{margin} on {label}"
    paper = f" Paper: {c['paper']}" + (f" Why it holds by construction: {c['why']}" if c["why"] else "")
    if c["verdict"] == "no data":
        return f"{head}: no finished runs to compare.{paper}"
    means = (f"{c['a_mean']:{spec}} vs {c['b_mean']:{spec}} (seeds {seeds_text(c['a_values'], spec)} | "
             f"{seeds_text(c['b_values'], spec)})")
    lo, hi = c["interval"]
    if c["relation"] == "faster":
        effect = f"time ratio {c['b']} / {c['a']} {c['estimate']:.2f}x, 95% CI [{lo:.2f}, {hi:.2f}]"
    else:
        effect = f"difference {c['estimate']:+{spec}}, 95% CI [{lo:+{spec}}, {hi:+{spec}}]"
    test = "TOST" if c["relation"] == "equivalent" else "one-sided Welch"
    p = f"{test} p = {pvalue(c['p'])}"
    if "p_holm" in c:
        p += f" (Holm {pvalue(c['p_holm'])})"
    if c["verdict"] == "disagrees":
        p += f"; against the claim p = {pvalue(c.get('p_against_holm', c['p_against']))}"
    if c["verdict"] == "reported":
        p = "no test"
    return f"{head}: {means}; {effect}; {p}.{paper}"


def overall(comparisons: list[dict], preconditions: list[tuple[str, bool]]) -> str:
    """The claim's verdict: "precondition failed" if its stand-in lacks a property the claim needs or its arms have
    not learned, else the primary comparison's verdict."""
    if not all(holds for _, holds in preconditions):
        return "precondition failed"
    return next(c["verdict"] for c in comparisons if c["role"] == "primary")


def counts(comparisons: list[dict], verdict: str) -> dict[str, int]:
    """How many counted comparisons besides the primary one agree / disagree / are inconclusive; none after a failed
    precondition, where no comparison means anything."""
    return {v: 0 if verdict == "precondition failed" else
            sum(c["counted"] and c["role"] != "primary" and c["verdict"] == v for c in comparisons)
            for v in ("agrees", "disagrees", "inconclusive")}


OPPOSITE = {"agrees": "disagrees", "disagrees": "agrees"}


def stable(verdict: str, check: str) -> str:
    """The claim's verdict given the verdict at its check: "unstable" where the check says the opposite."""
    return "unstable" if OPPOSITE.get(verdict) == check else verdict


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


def seed_table(claim: Claim, m: Measurements) -> list[str]:
    """Every seed's value per arm and metric (seed 0 first)."""
    lines = ["| arm | metric | per seed |", "|---|---|---|"]
    for arm in claim.arms:
        for metric in claim.metrics:
            values = m.values.get(arm, {}).get(metric.name)
            if values:
                lines.append(f"| {arm} | {metric.label} | {seeds_text(values, metric.fmt)} |")
    return lines


def pooled_sd(c: dict) -> float:
    """The seed-to-seed standard deviation of a comparison's two arms, pooled (nan with a single seed)."""
    a, b = c["a_values"], c["b_values"]
    if len(a) < 2 or len(b) < 2:
        return math.nan
    va = sum((v - mean(a)) ** 2 for v in a)
    vb = sum((v - mean(b)) ** 2 for v in b)
    return math.sqrt((va + vb) / (len(a) + len(b) - 2))


def full_scale_s_per_unit(full: dict) -> float:
    """The expected seconds per unit (training or environment step) on one H100 of a claim.yaml's `full_scale`
    plan: the miniature's measured seconds per unit, of which the model's part (all but `env_s_per_unit`, the
    environment stepping on the CPU) grows by the FLOP ratio and shrinks by H100_OVER_CPU_THREAD."""
    env = float(full.get("env_s_per_unit", 0.0))
    return env + (float(full["s_per_unit_here"]) - env) * float(full["flop_ratio"]) / H100_OVER_CPU_THREAD


def full_scale_estimate(claim: Claim) -> tuple[float, int]:
    """(the expected hours of the full-scale runs on one H100, how many runs): every full-scale run's units times
    `full_scale_s_per_unit`."""
    from dataclasses import replace

    runs = type(claim)(replace(claim.settings, scale="full", smoke=False, seeds=None)).runs()
    return sum(r.units for r in runs) * full_scale_s_per_unit(claim.declaration.full) / 3600, len(runs)


def plan(claim: Claim, comparisons: list[dict]) -> list[str]:
    """The lines on the source's metric, the seeds and their power, the budgets and the full-scale plan."""
    d, s = claim.declaration, claim.settings
    seeds = claim.seeds()
    n = len(seeds)
    fresh = "" if not d.first_seed else f" (seeds {seeds[0]} to {seeds[-1]}, which no earlier run used)"
    primary = next(c for c in comparisons if c["role"] == "primary")
    measured = pooled_sd(primary) if primary["verdict"] != "no data" else math.nan
    at_measured = "" if math.isnan(measured) else (f"; at the seed-to-seed sd measured here ({measured:.3g}) it is "
                                                    f"{d.power(n, measured):.2f}")
    hours, count = full_scale_estimate(claim)
    full = d.full
    needed = d.seeds_needed()
    short = "" if needed == d.seeds else (f" **80% power needs {needed} seeds**;" if needed else
                                           " **no count up to 64 seeds reaches 80% power**;")
    if d.check is None:
        budgets = f"Budgets, fixed before running: {d.budgets[0]:g}x and {d.budgets[1]:g}x the recipes' steps"
    else:
        budgets = (f"Budget, fixed before running: {d.budgets[0]:g}x the recipes' steps, with the verdict checked at "
                   f"{d.check:g} of it in the same runs' curves")
    return [f"Source's metric and baseline: {d.metric}", "",
            f"Seeds: {n} per arm{fresh}. Planned ({d.seeds} seeds): power {d.power():.2f} for the primary comparison "
            f"at the declared effect {d.effect:g} with seed-to-seed sd {d.sd:g} ({d.seeds_why});{short} with the {n} "
            f"seeds run, {d.power(n):.2f}{at_measured}.", "",
            f"{budgets}{'' if s.budget == 1 else f', times --budget {s.budget:g} (not the declared budget)'}: "
            f"{d.budgets_why}",
            "", f"Full scale: `seqssm reproduce {claim.name} --scale full` ({full['settings']}; {count} runs, "
            f"{full['seeds']} seeds): about {hours:.1f} h on one H100, estimated from "
            f"{float(full['s_per_unit_here']):.3g} s per {full['unit']} measured here, a FLOP ratio of "
            f"{float(full['flop_ratio']):g} per {full['unit']} ({full['flop_why']}) and an assumed "
            f"{H100_OVER_CPU_THREAD}x H100 throughput over one CPU thread"
            + (f"; {float(full['env_s_per_unit']):.3g} s per {full['unit']} of it is the environment's, not sped up"
               if full.get("env_s_per_unit") else "") + ".", ""]


def part_lines(part: Part, summary: dict, m: Measurements, walls: dict, label: str) -> list[str]:
    """One budget's section: setting, table, per-seed values, notes and the comparisons."""
    claim, s = part.claim, summary["settings"]
    budget = "smoke sizes (smoke.yaml)" if s["smoke"] else ("the source's settings (full.yaml)" if s["scale"] == "full"
                                                            else f"{claim.factor:g} x the recipes' steps")
    if part.at < 1:
        budget += f", read at {part.at:g} of their training from the same runs' curves"
    lines = [f"### {label}", "", f"Setting: {s['seeds']} seeds, {budget} (recipes/reproduce/{claim.recipe_dir.name}/), "
             f"{s['jobs']} runs side by side; {part.timing.phrase()} on {s['cpus']} CPUs, load average "
             f"{s['load_start'][0]:.1f} at the start and {s['load_end'][0]:.1f} at the end.", ""]
    lines += ["Mean ± standard error over seeds:", "", *table(claim, m, walls), "", "Every seed:", "",
              *seed_table(claim, m), ""]
    lines += [f"- {note}" for note in m.notes]
    lines += [f"- Precondition {'holds' if holds else 'FAILS'}: {text}" for text, holds in m.preconditions]
    c = summary["counts"]
    lines += ["", f"**Verdict: {summary['verdict']}** (the primary comparison, one-sided tests at {ALPHA:g}; the "
              f"other counted comparisons Holm-corrected: {c['agrees']} agree, {c['disagrees']} disagree, "
              f"{c['inconclusive']} inconclusive):", ""]
    lines += [verdict_line(row, claim) for row in summary["comparisons"]]
    if part.at < 1 and any(c.role == "speed" for c in claim.comparisons):
        lines.append("- Speed is read over whole runs (median step times), so the check does not compare it.")
    if summary["failed"]:
        lines += ["", "Runs that failed (their seeds are missing above):", ""]
        lines += [f"- `{key}`: {error.strip().splitlines()[-1]}" for key, error in summary["failed"].items()]
    return lines


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


def budget_summary(part: Part, m: Measurements) -> dict:
    """One budget's results: settings, timing, every seed's values, the comparisons and the verdict."""
    claim, s, timing = part.claim, part.claim.settings, part.timing
    # step times are medians over whole runs, so a check read earlier in the curves has none to compare
    declared = claim.comparisons if part.at == 1 else tuple(c for c in claim.comparisons if c.role != "speed")
    comparisons = compare(declared, m.values)
    verdict = overall(comparisons, m.preconditions)
    seeds = claim.seeds()
    return {
        "factor": claim.factor, "at": part.at, "folder": str(part.claim.folder),
        "settings": {"seeds": len(seeds), "first_seed": seeds[0], "budget": claim.factor,
                     "smoke": s.smoke, "scale": s.scale, "jobs": s.jobs, "cpus": os.cpu_count(),
                     "load_start": timing.load_start, "load_end": timing.load_end},
        "elapsed_s": round(timing.elapsed_s, 1), "reused_runs": timing.reused,
        "timing_from_earlier_call": timing.earlier,
        "arms": {arm: {name: {"values": v, "mean": mean(v), "se": standard_error(v)} for name, v in metrics.items()}
                 for arm, metrics in m.values.items()},
        "wall_s": wall_times(part.runs, part.records), "notes": m.notes,
        "preconditions": [{"check": text, "holds": holds} for text, holds in m.preconditions],
        "comparisons": comparisons, "verdict": verdict, "counts": counts(comparisons, verdict),
        "failed": part.errors,
        "runs": {key: {"arm": r["arm"], "seed": r["seed"], "wall_s": r["wall_s"]} for key, r in part.records.items()},
    }


def measured(part: Part) -> Measurements:
    """The part's measurements, with the "learned" precondition where the claim declares one and the part is read
    at the end of its budget."""
    claim, d = part.claim, part.claim.declaration
    if part.at < 1:
        return claim.measure(part.records, at=part.at)
    m = claim.measure(part.records)
    if d.learned is not None and m.values:
        fifth = claim.measure(part.records, at=LAST_FIFTH).values if d.learned.ceiling is None else None
        m.preconditions.append(learned_precondition(d.learned, d.primary, m.values, fifth))
    return m


def steps_share(claim: Claim) -> float | None:
    """The primary arm's training steps per run at this budget over those of the full-scale plan (full.yaml)."""
    arm = claim.declaration.primary.a
    mini = next((r.units for r in claim.runs() if r.arm == arm), None)
    full = type(claim)(replace(claim.settings, scale="full", smoke=False, seeds=None))
    large = next((r.units for r in full.runs() if r.arm == arm), None)
    return mini / large if mini and large else None


def qualifier(summary: dict) -> str:
    """The claim's verdict with what bounds it, for the index: the failed precondition, or the share of the full-scale
    plan's steps it was reached at and what the check said."""
    verdict, main = summary["verdict"], summary["budgets"][0]
    if main["verdict"] == "precondition failed":
        failed = [p["check"].split(":")[0] for p in main["preconditions"] if not p["holds"]]
        return f"precondition failed: {'; '.join(failed)} (no comparison counted)"
    words = [verdict]
    if verdict == "unstable":
        words = [f"unstable: {main['verdict']} at the budget, {summary['budgets'][1]['verdict']} at the check"]
    if summary.get("steps_share") is not None:
        words.append(f"at {100 * summary['steps_share']:.3g}% of the full-scale plan's steps")
    return ", ".join(words)


def write_report(claim: Claim, parts: list[Part], prepare_notes: list[str]) -> dict:
    """Measure each part (the budget, the check), judge the comparisons, write each budget folder's results.json, the
    figures (of the first part) and the claim's results.json and report.md -> the claim's summary."""
    require_matplotlib()
    budgets, sections, figures = [], [], []
    for i, part in enumerate(parts):
        m = measured(part)
        summary = budget_summary(part, m)
        if part.at == 1:
            (part.claim.folder / RESULTS).write_text(json.dumps(plain(summary), indent=2) + "\n")
        if i == 0 and m.values:
            figures = part.claim.plot(m, claim.root)
        if len(parts) == 1:
            label = "Results"
        elif i == 0:
            label = f"At the budget ({part.claim.folder.name})"
        elif part.at < 1:
            label = f"The check: the same runs at {part.at:g} of their training"
        else:
            label = f"At twice the budget ({part.claim.folder.name})"
        sections += ["", *part_lines(part, summary, m, summary["wall_s"], label)]
        budgets.append(summary)
    main = budgets[0]
    verdict = stable(main["verdict"], budgets[1]["verdict"]) if len(budgets) > 1 else main["verdict"]
    summary = {"claim": claim.name, "title": claim.title, "source": claim.source, "paper_claim": claim.claim,
               "metric": claim.declaration.metric, "paper": claim.paper_values, "prepare_notes": prepare_notes,
               **provenance(), "verdict": verdict, "verdicts": [b["verdict"] for b in budgets],
               "counts": main["counts"] if verdict != "unstable" else counts([], "precondition failed"),
               "steps_share": steps_share(parts[0].claim) if claim.settings.scale == "mini" else None,
               "elapsed_s": sum(b["elapsed_s"] for b in budgets if b["at"] == 1),
               "reused_runs": sum(b["reused_runs"] for b in budgets if b["at"] == 1), "budgets": budgets}
    summary["qualified"] = qualifier(summary)
    lines = [f"## {claim.title}", "", f"Source: {claim.source}.", "", f"Claim: {claim.claim}", "",
             *plan(claim, main["comparisons"])]
    lines += [f"- {note}" for note in prepare_notes]
    if len(budgets) > 1:
        second = "at the check" if budgets[1]["at"] < 1 else "at twice it"
        lines += ["", f"Verdict at the budget: **{budgets[0]['verdict']}**; {second}: **{budgets[1]['verdict']}**. "
                  f"The claim's verdict: **{summary['qualified']}**."]
    lines += sections + [""] + [f"![{p.stem}]({p.name})" for p in figures]
    (claim.root / RESULTS).write_text(json.dumps(plain(summary), indent=2) + "\n")
    (claim.root / REPORT).write_text("\n".join(lines).rstrip() + "\n")
    return summary


def reuse_mark(summary: dict) -> str:
    """"*" for a claim whose minutes do not cover all of its runs (some had finished before the call timed)."""
    return "\\*" if summary.get("reused_runs", 0) else ""


def reported(claims: list[Claim]) -> tuple[list[Claim], list[dict]]:
    """The claims that have been reported in their results folder, with their summaries (each claim's
    results.json), in the order given; a clear error when none has."""
    found = [(c, json.loads((c.root / RESULTS).read_text())) for c in claims if (c.root / RESULTS).is_file()]
    if not found:
        out = claims[0].settings.out if claims else "the results folder"
        raise ReproduceError(f"no claim has been reported in {out} yet (no <claim>/{RESULTS}): run "
                             "`seqssm reproduce CLAIM --out ...` first, then build the index")
    return [c for c, _ in found], [s for _, s in found]


def write_index(claims: list[Claim], summaries: list[dict]) -> Path:
    """<out>/report.md: one line per claim (its verdict with what bounds it, the verdict at its check or second
    budget, the counted comparisons, minutes), then every claim's report with its figure links pointing into the
    claim's folder."""
    out = claims[0].settings.out
    lines = ["# Reproductions", "", "| claim | source | verdict (primary) | at the check | other comparisons: "
             "agree / disagree / inconclusive | minutes |", "|---|---|---|---|---|---:|"]
    for claim, s in zip(claims, summaries):
        check = "–"
        if len(s["budgets"]) > 1:
            second = s["budgets"][1]
            at = f"{second['at']:g} of the budget" if second["at"] < 1 else f"{second['factor']:g}x"
            check = f"{second['verdict']} ({at})"
        c = s["counts"]
        lines.append(f"| [{claim.name}]({claim.name}/{REPORT}) | {claim.source} | {s['qualified']} | {check} | "
                     f"{c['agrees']} / {c['disagrees']} / {c['inconclusive']} | {s['elapsed_s'] / 60:.1f}"
                     f"{reuse_mark(s)} |")
    total = sum(s["elapsed_s"] for s in summaries) / 60
    lines += ["", f"{total:.0f} minutes in all: the sum of the claims' minutes, each from the call that ran its runs.",
              ""]
    if any(reuse_mark(s) for s in summaries):
        lines += ["\\* runs reused from an earlier call: those minutes cover only the call that ran the rest "
                  "(the claim's report says how many).", ""]
    for claim in claims:
        text = (claim.root / REPORT).read_text()
        lines.append(text.replace("](", f"]({claim.name}/").replace(f"]({claim.name}/http", "](http"))
    path = out / REPORT
    path.write_text("\n".join(lines))
    return path
