"""What a claim is: its runs (one per arm, seed and setting), what it measures in them, and the comparisons that
decide its verdict, with the paper's own numbers beside them.

A claim module builds `Run`s from its recipes (recipes/reproduce/<claim>/), turns the finished runs' results
into `Measurements` (per arm and metric: one value per seed) and names its `Comparison`s; the shared runner
(`seqssm.study.reproduce.runner`) trains, skips what is done and writes the report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqssm.errors import ReproduceError
from seqssm.recipes import merge, read_recipe

from .stats import RELATIONS

RECIPES = Path(__file__).resolve().parents[3] / "recipes" / "reproduce"
# per claim folder: with --smoke, its `run:` section is merged into every run's config, its `prepare:` section
# into the claim's data settings and its `sweep:` section into the swept values, for a seconds-long run
SMOKE_RECIPE = "smoke.yaml"


@dataclass(frozen=True)
class Settings:
    """How a claim is run: seeds 0..seeds-1, `budget` times the recipes' training steps (`smoke`: the claim's
    smoke.yaml sizes instead), results under `out`, `jobs` runs side by side."""

    out: Path
    seeds: int = 3
    budget: float = 1.0
    smoke: bool = False
    jobs: int = 2
    recipes: Path = RECIPES

    def __post_init__(self):
        if self.seeds < 1:
            raise ReproduceError(f"--seeds must be >= 1, got {self.seeds}")
        if not (self.budget > 0 and math.isfinite(self.budget)):
            raise ReproduceError(f"--budget must be a positive factor of the recipes' training steps, "
                                 f"got {self.budget}")
        if self.jobs < 1:
            raise ReproduceError(f"--jobs must be >= 1, got {self.jobs}")


@dataclass(frozen=True)
class Run:
    """One training run: `kind` (a worker of `seqssm.study.reproduce.work`) on `config`, in <claim folder>/<key>.

    arm: the arm it belongs to (its progress bar); units: its budget in progress units (training steps or
    environment steps); needs: keys of the runs it reads (a pretraining it starts from).
    """

    key: str
    arm: str
    seed: int
    kind: str
    config: dict[str, Any]
    units: int
    needs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Metric:
    """A measured quantity: its name in Measurements, how the table heads it, and its number format."""

    name: str
    label: str
    fmt: str = ".3f"


@dataclass(frozen=True)
class Comparison:
    """The claim that arm `a` stands to arm `b` as `relation` on `metric` (see `stats.verdict`), and what the paper
    reports for it."""

    metric: str
    a: str
    b: str
    relation: str
    paper: str
    margin: float = 0.0

    def __post_init__(self):
        if self.relation not in RELATIONS:
            raise ValueError(f"unknown relation {self.relation!r}; choose one of {RELATIONS}")


@dataclass
class Measurements:
    """Per arm and metric, one value per seed (in seed order); `curves`: data for the plots; `notes`: lines the
    report prints under the table (checks, caveats measured in this run)."""

    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    curves: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, arm: str, metric: str, value: float | None) -> None:
        """Append one seed's value of `metric` for `arm`; None (a run that never measured it, e.g. no episode
        ended) adds nothing, so that arm's count of values shows it."""
        if value is not None:
            self.values.setdefault(arm, {}).setdefault(metric, []).append(float(value))


class Claim:
    """A paper's claim in miniature. Subclasses set the class attributes and implement `runs` and `measure`
    (and `prepare` when their runs need data written first, `plot` for the figure)."""

    name: str = ""  # command-line name and folder: recipes/reproduce/<name>, <out>/<name>
    title: str = ""
    source: str = ""  # the paper and section, as a reader finds it
    claim: str = ""  # what the paper says, with its numbers
    arms: tuple[str, ...] = ()  # in table order
    metrics: tuple[Metric, ...] = ()
    comparisons: tuple[Comparison, ...] = ()
    paper_values: dict[str, dict[str, str]] = {}  # arm -> metric -> the paper's number, as text

    def __init__(self, settings: Settings):
        self.settings = settings
        self.folder = settings.out / self.name
        self.recipe_dir = settings.recipes / self.name

    # -- recipes -----------------------------------------------------------------------------------------------
    def recipe(self, name: str, part: str = "run") -> dict:
        """recipes/reproduce/<claim>/<name> with its bases merged, and when smoke-testing the `part` section ("run",
        "prepare" or "sweep") of the claim's smoke.yaml merged in."""
        return self.smoked(self.read(name), part)

    def read(self, name: str) -> dict:
        """recipes/reproduce/<claim>/<name> with its bases merged."""
        path = self.recipe_dir / name
        if not path.is_file():
            raise ReproduceError(f"recipe {path} not found; is --recipes the repository's recipes/reproduce?")
        return read_recipe(path)

    def smoked(self, config: dict, part: str = "run") -> dict:
        """`config` with the `part` section of the claim's smoke.yaml merged in when smoke-testing."""
        if not self.settings.smoke:
            return config
        smoke = self.recipe_dir / SMOKE_RECIPE
        if not smoke.is_file():
            raise ReproduceError(f"claim {self.name} has no {smoke} for --smoke")
        return merge(config, read_recipe(smoke).get(part) or {})

    def seeds(self) -> range:
        """The seeds every arm runs."""
        return range(self.settings.seeds)

    def scaled(self, steps: int, multiple: int = 1) -> int:
        """`steps` times the budget factor, rounded to a positive multiple of `multiple` (smoke runs are not scaled)."""
        factor = 1.0 if self.settings.smoke else self.settings.budget
        return max(multiple, round(steps * factor / multiple) * multiple)

    def results(self, records: dict[str, dict], arm: str) -> list[dict]:
        """The finished results of `arm` (runs keyed <arm>/seed<seed>), in seed order."""
        return [records[k]["result"] for k in (f"{arm}/seed{s}" for s in self.seeds()) if k in records]

    # -- what subclasses implement -------------------------------------------------------------------------------
    def prepare(self) -> list[str]:
        """Write what the runs read (generated data) -> lines for the report; nothing by default."""
        return []

    def runs(self) -> list[Run]:
        """Every run of the claim at these settings."""
        raise NotImplementedError

    def measure(self, results: dict[str, dict]) -> Measurements:
        """Measurements from the finished runs' results (by run key)."""
        raise NotImplementedError

    def plot(self, measurements: Measurements, folder: Path) -> list[Path]:
        """Write the claim's figure(s) into `folder` -> their paths; none by default."""
        return []
