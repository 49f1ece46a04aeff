"""Off-policy outcomes (issue 10) on CPU budgets: runs the SAC recipes, then writes JSON results and PNG plots.

    python scripts/rl_outcomes_offpolicy.py best_arm --cores kalman vssm gru   # rl/sac/best_arm/<core>
    python scripts/rl_outcomes_offpolicy.py in_context --cores s5 gru          # rl/sac/in_context_cartpole/
    python scripts/rl_outcomes_offpolicy.py memory_length --lengths 8 16 32 64 # rl/sac/memory_length/s5
    python scripts/rl_outcomes_offpolicy.py report                             # JSON + PNG from finished runs only

A run whose summary.json exists is not repeated (--force repeats it). Results go to
runs/rl/sac/outcomes/<experiment>.json and .png.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from seqssm.recipes import recipes_root

RUNS = Path("runs/rl/sac")
RECIPES = recipes_root() / "rl" / "sac"
OUT = RUNS / "outcomes"
SOLVED = 0.9  # memory length: greedy accuracy over the evaluation episodes


def run(recipe: Path, out_dir: Path, extra: list[str], force: bool) -> dict:
    """Train one recipe (unless out_dir has a summary; a stopped run's files are replaced) -> its summary."""
    from seqssm.rl.cli import main as rl_main

    summary = out_dir / "summary.json"
    if force or not summary.exists():
        rl_main(["rl", "--config", str(recipe), "--out_dir", str(out_dir), "--overwrite", *extra])
    return json.loads(summary.read_text())


def metrics(out_dir: Path) -> list[dict]:
    """The evaluation records of a run."""
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def best_arm(cores: list[str], force: bool, train: bool) -> dict:
    """Win rate, normalised return and episode length in and out of distribution per core, by training step."""
    results = {}
    for core in cores:
        out_dir = RUNS / "best_arm" / core
        if train:
            run(RECIPES / "best_arm" / f"{core}.yaml", out_dir, [], force)
        if not (out_dir / "summary.json").exists():
            continue
        records = metrics(out_dir)
        results[core] = {
            "final": {split: {"win_rate": records[-1]["eval"][split]["win"],
                              "episode_length": records[-1]["eval"][split]["length_mean"],
                              "normalized_return": records[-1]["eval"][split]["return_mean"] / 10.0}
                      for split in ("in_dist", "ood")},
            "curve": [{"steps": r["steps"], **{f"{s}_{k}": r["eval"][s][key] for s in ("in_dist", "ood")
                                               for k, key in (("win", "win"), ("length", "length_mean"))}}
                      for r in records],
            "wall_s": records[-1]["wall_s"], "steps": records[-1]["steps"],
            "parameters": json.loads((out_dir / "summary.json").read_text())["parameters"],
        }
    if results:
        plt = _plt()
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        for core, r in results.items():
            steps = [c["steps"] for c in r["curve"]]
            for split, style in (("in_dist", "-"), ("ood", "--")):
                axes[0].plot(steps, [c[f"{split}_win"] for c in r["curve"]], style, marker="o", label=f"{core} {split}")
                axes[1].plot(steps, [c[f"{split}_length"] for c in r["curve"]], style, marker="o",
                             label=f"{core} {split}")
        axes[0].set(xlabel="environment steps", ylabel="win rate", title="Best Arm Identification")
        axes[1].set(xlabel="environment steps", ylabel="episode length", yscale="log")
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(OUT / "best_arm.png", dpi=120)
    return results


def in_context(cores: list[str], force: bool, train: bool) -> dict:
    """Return per trial index over 32-trial evaluation episodes (trained on 16) per core."""
    results = {}
    for core in cores:
        out_dir = RUNS / "in_context_cartpole" / core
        if train:
            run(RECIPES / "in_context_cartpole" / f"{core}.yaml", out_dir, [], force)
        if not (out_dir / "summary.json").exists():
            continue
        summary = json.loads((out_dir / "summary.json").read_text())
        per_trial = summary["eval"]["trials32"]["trial_returns"]
        results[core] = {"return_per_trial": per_trial, "first_4_mean": sum(per_trial[:4]) / 4,
                         "trials_13_16_mean": sum(per_trial[12:16]) / 4, "trials_29_32_mean": sum(per_trial[28:]) / 4,
                         "episodes": summary["eval"]["trials32"]["episodes"], "steps": summary["steps"],
                         "wall_s": summary["wall_s"]}
    if results:
        plt = _plt()
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for core, r in results.items():
            ax.plot(range(1, len(r["return_per_trial"]) + 1), r["return_per_trial"], marker=".", label=core)
        ax.axvline(16.5, color="gray", linestyle=":", label="training horizon")
        ax.set(xlabel="trial", ylabel="return (max 1)", title="In-context StatelessCartPole, 32 trials")
        ax.legend()
        fig.tight_layout()
        fig.savefig(OUT / "in_context.png", dpi=120)
    return results


def memory_length(lengths: list[int], force: bool, train: bool) -> dict:
    """S5's greedy accuracy per memory length (the budget of the recipe at each length); stops after a failure."""
    if not train:  # report every length that was run
        lengths = sorted(int(p.name.removeprefix("s5_len")) for p in (RUNS / "memory_length").glob("s5_len*"))
    results = {}
    for n in lengths:
        out_dir = RUNS / "memory_length" / f"s5_len{n}"
        if train:
            run(RECIPES / "memory_length" / "s5.yaml", out_dir,
                ["--env.kwargs.memory_length", str(n), "--sac.context", str(n + 1)], force)
        if not (out_dir / "summary.json").exists():
            continue
        summary = json.loads((out_dir / "summary.json").read_text())
        evaluation = summary["eval"]["eval"]
        results[n] = {"accuracy": evaluation["correct"], "return": evaluation["return_mean"],
                      "solved": evaluation["correct"] >= SOLVED, "steps": summary["steps"],
                      "wall_s": summary["wall_s"]}
        if train and not results[n]["solved"]:
            break
    solved = [n for n, r in results.items() if r["solved"]]
    out = {"per_length": results, "longest_solved": max(solved) if solved else None, "solved_threshold": SOLVED}
    if results:
        plt = _plt()
        fig, ax = plt.subplots(figsize=(5, 3.4))
        ax.plot(list(results), [r["accuracy"] for r in results.values()], marker="o")
        ax.axhline(SOLVED, color="gray", linestyle=":")
        ax.set(xscale="log", xlabel="memory length", ylabel="greedy accuracy", title="S5 memory length (SAC)")
        fig.tight_layout()
        fig.savefig(OUT / "memory_length.png", dpi=120)
    return out


def main(argv: list[str] | None = None) -> None:
    """Run one experiment (or only `report`) and write its JSON and PNG under runs/rl/sac/outcomes/."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment", choices=("best_arm", "in_context", "memory_length", "report"))
    parser.add_argument("--cores", nargs="+", default=None)
    parser.add_argument("--lengths", nargs="+", type=int, default=[8, 16, 32, 64])
    parser.add_argument("--force", action="store_true", help="train again even if a summary exists")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    train = args.experiment != "report"
    todo = ("best_arm", "in_context", "memory_length") if args.experiment == "report" else (args.experiment,)
    for name in todo:
        if name == "best_arm":
            result = best_arm(args.cores or ["kalman", "vssm", "gru"], args.force, train)
        elif name == "in_context":
            result = in_context(args.cores or ["s5", "gru"], args.force, train)
        else:
            result = memory_length(args.lengths, args.force, train)
        (OUT / f"{name}.json").write_text(json.dumps(result, indent=2))
        print(f"{name}: {json.dumps(result)[:2000]}")


if __name__ == "__main__":
    main()
