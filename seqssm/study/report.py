"""The study's report: results.json, a markdown table per arm and length, and the accuracy-vs-length plot."""

from __future__ import annotations

import json
from pathlib import Path

PLOT = "val_acc_vs_length.png"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def arm_table(summary: dict) -> list[tuple[str, dict[int, float]]]:
    """[(arm, {length: final validation accuracy})], best mean accuracy first (the legend order of Ulbaek 2024 thesis,
    fig. 21)."""
    rows = [(arm, {int(length): r["final"] for length, r in by_length.items()})
            for arm, by_length in summary["finetune"].items()]
    return sorted(rows, key=lambda row: -_mean(list(row[1].values())))


def arm_parameters(summary: dict, arm: str) -> str:
    """The finetuned model's parameter count of `arm` (the same at every length), or the counts if they differ."""
    counts = sorted({r["n_params"] for r in summary["finetune"][arm].values()})
    return " / ".join(f"{n:,}" for n in counts)


def markdown(summary: dict) -> str:
    """The results as markdown: validation accuracy and parameters per arm and length, then pretraining times."""
    lengths, widths = summary["lengths"], summary["widths"]
    lines = [f"Species study, preset `{summary['preset']}` (widths: causal d={widths['causal']}, bidirectional "
             f"d={widths['bidirectional']}; F1/F1R1 pretrained at the {summary['f1_width']} width, d={widths['f1']}).",
             "", "Final validation accuracy (%), finetuning arms, best mean first; parameters of the finetuned model:",
             "", "| arm | d | parameters | " + " | ".join(f"L={n}" for n in lengths) + " | mean |",
             "|---|---:|---:|" + "---:|" * (len(lengths) + 1)]
    for arm, accs in arm_table(summary):
        cells = [f"{100 * accs[n]:.1f}" if n in accs else "–" for n in lengths]
        lines.append(f"| {arm} | {summary['arm_widths'][arm]} | {arm_parameters(summary, arm)} | " + " | ".join(cells)
                     + f" | {100 * _mean(list(accs.values())):.1f} |")
    if summary["pretrain"]:
        lines += ["", "Pretraining wall-clock: whole fit incl. validation (s) / training steps only (s) / "
                      "median step (ms):", "",
                  "| stage | " + " | ".join(f"L={n}" for n in lengths) + " |", "|---|" + "---:|" * len(lengths)]
        for stage, by_length in summary["pretrain"].items():
            cells = [f"{r['fit_s']:.0f} / {r['step_s']:.0f} / {1000 * r['median_step_s']:.0f}"
                     if (r := by_length.get(str(n))) else "–" for n in lengths]
            lines.append(f"| {stage} | " + " | ".join(cells) + " |")
        pretrain = summary["pretrain"]
        ntp, mlm = pretrain.get("ntp-f1", pretrain.get("ntp", {})), pretrain.get("mlm-bi", {})
        both = [n for n in map(str, lengths) if n in ntp and n in mlm]
        if both:
            ratios = ", ".join(f"L={n}: {ntp[n]['median_step_s'] / mlm[n]['median_step_s']:.2f}" for n in both)
            lines += ["", "F1's pretraining (causal NTP) / MLM-bidirectional pretraining, median step time (same "
                          f"number of steps): {ratios} (Ulbaek 2024 thesis, 16.7.2: about 0.5)."]
    return "\n".join(lines) + "\n"


def plot(summary: dict, path: Path) -> Path:
    """Validation accuracy against length, one line per arm: dashed = bidirectional, markers = pretrained."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("the study's plot needs matplotlib: pip install 'seqssm[plot]'") from None
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for arm, accs in arm_table(summary):
        kind = summary["arm_kinds"][arm]
        lengths = sorted(accs)
        ax.plot(lengths, [100 * accs[n] for n in lengths], label=arm, linestyle="--" if kind["bidirectional"] else "-",
                marker="o" if kind["pretrained"] else None)
    ax.set_xscale("log", base=2)
    ax.set_xticks(summary["lengths"], [str(n) for n in summary["lengths"]])
    ax.minorticks_off()
    ax.set_xlabel("sequence length L")
    ax.set_ylabel("validation accuracy (%)")
    ax.set_title(f"Species, limited finetuning ({summary['preset']})")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(summary: dict, out: Path) -> None:
    """Write results.json, results.md and the plot into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "results.md").write_text(markdown(summary))
    plot(summary, out / PLOT)
