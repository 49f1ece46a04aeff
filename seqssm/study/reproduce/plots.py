"""The figure shapes the claims share: learning curves with a standard-error band, bars with error bars, and a
metric against a setting (corridor length, memory length) with error bars. matplotlib, Agg backend."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from .stats import mean, standard_error


def pyplot():
    """matplotlib.pyplot on the Agg backend (the report checks for matplotlib before any run starts)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def mean_band(curves: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error over seeds of equally spaced curves, cut to the shortest (seed = row)."""
    n = min(len(c) for c in curves)
    rows = np.array([list(c)[:n] for c in curves], dtype=float)
    se = rows.std(axis=0, ddof=1) / np.sqrt(len(rows)) if len(rows) > 1 else np.zeros(n)
    return rows.mean(axis=0), se


def curves(ax, data: dict[str, tuple[Sequence[float], Sequence[Sequence[float]]]], xlabel: str, ylabel: str) -> None:
    """One line per arm, data[arm] = (x, [y per seed]), with a shaded ±1 standard-error band."""
    for arm, (x, ys) in data.items():
        if not ys:
            continue
        m, se = mean_band(ys)
        xs = np.asarray(x[: len(m)], dtype=float)
        ax.plot(xs, m, label=arm)
        ax.fill_between(xs, m - se, m + se, alpha=0.25)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def bars(ax, values: dict[str, list[float]], ylabel: str) -> None:
    """One bar per arm: the seed mean with a ±1 standard-error bar."""
    arms = [a for a, v in values.items() if v]
    means = [mean(values[a]) for a in arms]
    errors = [0.0 if len(values[a]) < 2 else standard_error(values[a]) for a in arms]
    ax.bar(arms, means, yerr=errors, capsize=4, color=[f"C{i}" for i in range(len(arms))])
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, axis="y")


def against(ax, data: dict[str, dict[float, list[float]]], xlabel: str, ylabel: str) -> None:
    """One line per arm of a metric against a setting, data[arm] = {x: [value per seed]}, ±1 SE error bars."""
    for arm, by_x in data.items():
        xs = sorted(by_x)
        ys = [mean(by_x[x]) for x in xs]
        errors = [0.0 if len(by_x[x]) < 2 else standard_error(by_x[x]) for x in xs]
        ax.errorbar(xs, ys, yerr=errors, marker="o", capsize=3, label=arm)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def save(fig, path: Path) -> Path:
    """Save `fig` as a PNG and close it -> path."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path
