"""What a claim is: its runs (one per arm, seed and setting), what it measures in them, and the comparisons that
decide its verdict, with the paper's own numbers beside them.

A claim module builds `Run`s from its recipes (the packaged recipes' reproduce/<claim>/) and turns the finished
runs' results into `Measurements` (per arm and metric: one value per seed, and the preconditions its stand-in must
meet), at the end of training or, read from the same runs' curves, at a fraction of it. What is compared, how
(`stats.RELATIONS`), which comparison is primary, the arms the miniature runs, the seeds with the power behind them,
the budget with the fraction at which the verdict is checked again, the "learned" precondition and the full-scale
plan (with the secondary comparisons) are declared before any run in the claim's claim.yaml (`Declaration`); the
shared runner (`seqssm.study.reproduce.runner`) trains, skips what is done and writes the report.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqssm.errors import ReproduceError
from seqssm.recipes import merge, read_recipe, recipes_root

from .stats import check_margin, power, seeds_for_power

RECIPES = recipes_root() / "reproduce"  # the packaged recipes' reproduce/
# per claim folder: an overlay whose `run:` section is merged into every run's config, its `prepare:` section
# into the claim's data settings and its `sweep:` section into the swept values: smoke.yaml for a seconds-long
# run (--smoke), full.yaml for the source's own settings (--scale full)
SMOKE_RECIPE, FULL_RECIPE = "smoke.yaml", "full.yaml"
DECLARATION = "claim.yaml"
SCALES = ("mini", "full")
ROLES = ("primary", "secondary", "sanity", "speed")
LAST_FIFTH = 0.8  # the "learned" precondition's plateau: the metric at the end against its value at 4/5 of the budget

@dataclass(frozen=True)
class Settings:
    """How a claim is run: `seeds` seeds from its declared first one (None: as many as its claim.yaml declares), its
    declared budgets times `budget` (1: as declared), at `scale` "mini" (this machine) or "full" (the source's
    settings, full.yaml), or at the claim's smoke.yaml sizes (`smoke`: seconds, one budget); results under `out`,
    `jobs` runs side by side."""

    out: Path
    seeds: int | None = None
    budget: float = 1.0
    smoke: bool = False
    jobs: int = 2
    recipes: Path = RECIPES
    scale: str = "mini"

    def __post_init__(self):
        if self.seeds is not None and self.seeds < 1:
            raise ReproduceError(f"--seeds must be >= 1, got {self.seeds}")
        if self.scale not in SCALES:
            raise ReproduceError(f"--scale must be one of {', '.join(SCALES)}, got {self.scale!r}")
        if self.smoke and self.scale != "mini":
            raise ReproduceError("--smoke shrinks the miniature; it does not go with --scale full")
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
class TokenShape:
    """The tokens a supervised claim's full-scale models read, as its data module gives them: vocabulary size,
    classes (ignored by the language-model tasks) and tokens per sequence."""

    vocab: int
    classes: int
    length: int


@dataclass(frozen=True)
class Metric:
    """A measured quantity: its name in Measurements, how the table heads it, and its number format."""

    name: str
    label: str
    fmt: str = ".3f"


@dataclass(frozen=True)
class Comparison:
    """The claim that arm `a` stands to arm `b` as `relation` on `metric` (see `stats`), what the paper reports for
    it and its role: the claim's one "primary" comparison decides the verdict; "secondary" ones are tested with
    Holm's correction; "sanity" ones hold by construction (`why`) and are shown, not counted; "speed" ones report
    a time ratio with its interval (a = the fast arm) and are judged only against a bound the source states
    (`margin`) on hardware comparable to this run's (`hardware`: which)."""

    metric: str
    a: str
    b: str
    relation: str
    paper: str
    margin: float = 0.0
    role: str = "secondary"
    why: str = ""
    hardware: str = ""

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"unknown role {self.role!r}; choose one of {ROLES}")
        if self.role == "speed" and self.relation != "faster":
            raise ValueError(f"a speed comparison is a time ratio: relation faster, not {self.relation!r}")
        if self.role == "speed" and not self.margin:
            object.__setattr__(self, "margin", 1.0)  # no ratio stated: the ratio is reported, not judged
        if self.role == "speed" and self.margin > 1 and not self.hardware:
            # a ratio measured on other hardware (JAX on a GPU) says nothing about one CPU thread
            raise ValueError(f"speed comparison {self.a} vs {self.b} is judged against {self.margin:g}x only if the "
                             f"source states that bound on hardware comparable to this run's: name it (hardware:) "
                             f"or drop the margin to report the ratio")
        check_margin(self.relation, self.margin)
        if self.role == "sanity" and not self.why:
            raise ValueError(f"sanity comparison {self.a} vs {self.b} must say why it holds by construction")

    @property
    def counted(self) -> bool:
        """Whether its verdict counts: primary and secondary ones, and speed ones against a ratio the source states."""
        return self.role in ("primary", "secondary") or (self.role == "speed" and self.margin > 1)


@dataclass(frozen=True)
class Learned:
    """The "learned" precondition: the better arm of the primary pair reaches `level` on the primary metric (seed
    mean, higher is better) and rose by less than `plateau` over the last fifth of its budget; or, where the claim
    has a ceiling arm (`ceiling`, e.g. an oracle), that arm leads both arms of the pair."""

    why: str
    level: float | None = None
    plateau: float | None = None
    ceiling: str | None = None

    def __post_init__(self):
        if (self.ceiling is None) == (self.level is None or self.plateau is None):
            raise ValueError("learned: declare either level and plateau, or a ceiling arm")
        if self.plateau is not None and not self.plateau > 0:
            raise ValueError(f"learned.plateau must be > 0, got {self.plateau}")


def learned_precondition(learned: Learned, primary: Comparison, end: dict[str, dict[str, list[float]]],
                         fifth: dict[str, dict[str, list[float]]] | None) -> tuple[str, bool]:
    """(what the "learned" precondition asks, whether it holds) from the seed values at the end of the budget (`end`)
    and at its last fifth's start (`fifth`; unused with a ceiling arm)."""
    def mean_of(values, arm):
        seeds = values.get(arm, {}).get(primary.metric, [])
        return sum(seeds) / len(seeds) if seeds else None

    pair = {arm: mean_of(end, arm) for arm in (primary.a, primary.b)}
    if None in pair.values():
        return f"learned: no values of {primary.metric} for both arms of the pair", False
    if learned.ceiling is not None:
        top = mean_of(end, learned.ceiling)
        holds = top is not None and top > max(pair.values())
        shown = "no values" if top is None else f"{top:.3g}"
        return (f"learned: the ceiling arm ({learned.ceiling}, {shown}) leads both arms of the pair "
                f"({', '.join(f'{a} {v:.3g}' for a, v in pair.items())}) on {primary.metric}", holds)
    better = max(pair, key=pair.get)
    before = None if fifth is None else mean_of(fifth, better)
    rise = math.nan if before is None else pair[better] - before
    holds = pair[better] >= learned.level and rise < learned.plateau
    return (f"learned: the better arm ({better}) reaches {pair[better]:.3g} on {primary.metric} (at least "
            f"{learned.level:g} asked) and rose by {rise:+.3g} over the last fifth of its budget (less than "
            f"{learned.plateau:g} asked: stopped improving)", holds)


@dataclass(frozen=True)
class Declaration:
    """A claim's claim.yaml: the source's metric and baseline (`metric`, words), the arms the miniature runs and its
    comparisons, the seeds with the planning numbers behind them (the smallest effect that matters in the miniature
    and the seed-to-seed sd measured before; `first_seed`: a replication starts past the seeds earlier runs used), the
    budget: either one run budget (`factors`, one factor) with the fraction of it at which the same runs' curves
    check the verdict (`check`), or two run budgets (`factors`); the expected minutes on two cores, the "learned"
    precondition, and the full-scale plan with its own comparisons."""

    metric: str
    comparisons: tuple[Comparison, ...]
    seeds: int
    sd: float
    effect: float
    seeds_why: str
    budgets: tuple[float, ...]
    budgets_why: str
    full: dict[str, Any]
    arms: tuple[str, ...] = ()
    check: float | None = None
    minutes: float | None = None
    learned: Learned | None = None
    first_seed: int = 0

    @classmethod
    def load(cls, path: Path, arms: tuple[str, ...], metrics: tuple[str, ...], scale: str = "mini") -> Declaration:
        """Read and check a claim.yaml against the claim's arms and metrics; at `scale` "full" the comparisons include
        the full-scale plan's and every arm runs."""
        if not path.is_file():
            raise ReproduceError(f"{path} not found: every claim declares its comparisons there before running")
        raw = read_recipe(path)
        try:
            seeds, budgets, full = raw["seeds"], raw["budgets"], dict(raw["full_scale"])
            extra = full.get("comparisons", []) if scale == "full" else []
            comparisons = tuple(Comparison(**c) for c in [*raw["comparisons"], *extra])
            learned = Learned(**raw["learned"]) if "learned" in raw else None
            run = tuple(raw.get("arms") or arms) if scale == "mini" else arms
            declaration = cls(raw["metric"], comparisons, int(seeds["n"]), float(seeds["sd"]), float(seeds["effect"]),
                              seeds["why"], tuple(float(b) for b in budgets["factors"]), budgets["why"], full,
                              tuple(a for a in arms if a in run), budgets.get("check"), budgets.get("minutes"),
                              learned, int(seeds.get("first", 0)))
        except (KeyError, TypeError, ValueError) as e:
            raise ReproduceError(f"{path}: {e}") from None
        primaries = [c for c in comparisons if c.role == "primary"]
        named = {x for c in comparisons for x in (c.a, c.b)} | ({learned.ceiling} - {None} if learned else set())
        unknown = sorted(named - set(declaration.arms) | set(raw.get("arms") or ()) - set(arms))
        unmeasured = sorted({c.metric for c in comparisons} - set(metrics))
        if len(primaries) != 1 or unknown or unmeasured:
            raise ReproduceError(f"{path}: needs exactly one primary comparison (has {len(primaries)}) over the "
                                 f"arms it runs and the claim's metrics (unknown or not run: arms {unknown}, "
                                 f"metrics {unmeasured})")
        if declaration.first_seed < 0:
            raise ReproduceError(f"{path}: seeds.first must be >= 0, got {declaration.first_seed}")
        b = declaration.budgets
        if declaration.check is not None:
            if len(b) != 1 or not b[0] > 0 or not 0 < declaration.check < LAST_FIFTH:
                raise ReproduceError(f"{path}: with a check, budgets.factors is one factor > 0 and budgets.check a "
                                     f"fraction of it below {LAST_FIFTH}, got {budgets['factors']} and "
                                     f"{declaration.check}")
        elif len(b) != 2 or not 0 < b[0] < b[1]:
            raise ReproduceError(f"{path}: budgets.factors must be two increasing factors (or one with a check), "
                                 f"got {budgets['factors']}")
        return declaration

    def budget_text(self) -> str:
        """The budget in words, e.g. "budget 1x, checked at 0.5 of it" or "budgets 1x and 2x"."""
        if self.check is None:
            return f"budgets {self.budgets[0]:g}x and {self.budgets[1]:g}x"
        return f"budget {self.budgets[0]:g}x, checked at {self.check:g} of it"

    @property
    def primary(self) -> Comparison:
        """The comparison that decides the claim."""
        return next(c for c in self.comparisons if c.role == "primary")

    def power(self, n: int | None = None, sd: float | None = None) -> float:
        """The primary comparison's power at the declared effect with n seeds (default: the declared ones) and
        seed-to-seed sd `sd` (default: the declared one)."""
        p = self.primary
        return power(p.relation, self.effect, self.sd if sd is None else sd, n or self.seeds, p.margin)

    def seeds_needed(self) -> int | None:
        """The fewest seeds (at least 3) that give the primary comparison 80% power at the declared effect and sd;
        None if no count up to 64 does."""
        p = self.primary
        n = seeds_for_power(p.relation, self.effect, self.sd, p.margin)
        return None if n is None else max(3, n)


@dataclass
class Measurements:
    """Per arm and metric, one value per seed (in seed order); `curves`: data for the plots; `notes`: lines the
    report prints under the table (caveats measured in this run); `preconditions`: (what the stand-in must show,
    whether it does): one that fails fails the claim."""

    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    curves: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    preconditions: list[tuple[str, bool]] = field(default_factory=list)

    def add(self, arm: str, metric: str, value: float | None) -> None:
        """Append one seed's value of `metric` for `arm`; None (a run that never measured it, e.g. no episode
        ended) adds nothing, so that arm's count of values shows it."""
        if value is not None:
            self.values.setdefault(arm, {}).setdefault(metric, []).append(float(value))


class Claim:
    """A paper's claim in miniature. Subclasses set the class attributes and implement `runs` and `measure`
    (and `prepare` when their runs need data written first, `plot` for the figure)."""

    name: str = ""  # command-line name and folder: seqssm/recipes/reproduce/<name>, <out>/<name>
    # the claim whose runs (its recipes) a replication repeats on fresh seeds, declared anew
    replicates: str = ""
    title: str = ""
    source: str = ""  # the paper and section, as a reader finds it
    claim: str = ""  # what the paper says, with its numbers
    arms: tuple[str, ...] = ()  # every arm, in table order; an instance has those its settings run (claim.yaml)
    metrics: tuple[Metric, ...] = ()
    paper_values: dict[str, dict[str, str]] = {}  # arm -> metric -> the paper's number, as text
    # the full-scale data's shape, for the claims of `seqssm fit` runs whose step time on a GPU
    # scripts/full_scale_step_time.py measures (None: not timed there)
    full_scale_tokens: TokenShape | None = None

    def __init__(self, settings: Settings):
        self.settings = settings
        self.root = settings.out / self.name
        self.recipe_dir = settings.recipes / (self.replicates or self.name)
        self.declaration = Declaration.load(settings.recipes / self.name / DECLARATION, self.arms,
                                            tuple(m.name for m in self.metrics), settings.scale)
        self.comparisons = self.declaration.comparisons
        self.arms = self.declaration.arms  # the arms these settings run (the miniature: the primary pair's)
        self.factor, self.folder = self.budgets()[0]

    def budgets(self) -> list[tuple[float, Path]]:
        """(factor on the recipes' steps, runs folder) per budget run: the declared one (or two); one at smoke size
        (not scaled) and at full scale (the source's steps, in full.yaml)."""
        if self.settings.smoke:
            return [(1.0, self.root / "smoke")]
        if self.settings.scale == "full":
            return [(1.0, self.root / "full")]
        return [(f * self.settings.budget, self.root / f"budget-{f * self.settings.budget:g}x")
                for f in self.declaration.budgets]

    def at_budget(self, factor: float, folder: Path) -> Claim:
        """This claim with its runs at `factor` times the recipes' steps, in `folder` (what `prepare` found is kept)."""
        other = copy.copy(self)
        other.factor, other.folder = factor, folder
        return other

    # -- recipes -----------------------------------------------------------------------------------------------
    def recipe(self, name: str, part: str = "run", arm: str | None = None) -> dict:
        """reproduce/<claim>/<name> with its bases merged, and with the `part` section ("run", "prepare" or
        "sweep") of the claim's overlay (smoke.yaml or full.yaml) merged in, and its `arms: {arm: ...}` section for
        `arm`'s runs."""
        return self.smoked(self.read(name), part, arm)

    def read(self, name: str) -> dict:
        """seqssm/recipes/reproduce/<claim>/<name> with its bases merged."""
        path = self.recipe_dir / name
        if not path.is_file():
            raise ReproduceError(f"recipe {path} not found; is --recipes the repository's seqssm/recipes/reproduce?")
        return read_recipe(path)

    def smoked(self, config: dict, part: str = "run", arm: str | None = None) -> dict:
        """`config` with the `part` section of the claim's smoke.yaml (--smoke) or full.yaml (--scale full) merged in,
        then, for `arm`'s runs, its entry in the overlay's `arms:` section."""
        if not self.settings.smoke and self.settings.scale == "mini":
            return config
        name = SMOKE_RECIPE if self.settings.smoke else FULL_RECIPE
        path = self.recipe_dir / name
        if not path.is_file():
            raise ReproduceError(f"claim {self.name} has no {path} for "
                                 f"{'--smoke' if self.settings.smoke else '--scale full'}")
        overlay = read_recipe(path)
        config = merge(config, overlay.get(part) or {})
        return merge(config, (overlay.get("arms") or {}).get(arm) or {}) if arm and part == "run" else config

    def seeds(self) -> range:
        """The seeds every arm runs, from the declared first one: as many as --seeds, else the full-scale plan's at
        full scale, else the declared number."""
        if self.settings.seeds is not None:
            n = self.settings.seeds
        elif self.settings.scale == "full":
            n = int(self.declaration.full["seeds"])
        else:
            n = self.declaration.seeds
        return range(self.declaration.first_seed, self.declaration.first_seed + n)

    def scaled(self, steps: int, multiple: int = 1) -> int:
        """`steps` times this budget's factor, rounded to a positive multiple of `multiple`."""
        return max(multiple, round(steps * self.factor / multiple) * multiple)

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

    def measure(self, results: dict[str, dict], at: float = 1.0) -> Measurements:
        """Measurements from the finished runs' results (by run key), as they stood at fraction `at` of training
        (read from the runs' curves; 1: at the end)."""
        raise NotImplementedError

    def plot(self, measurements: Measurements, folder: Path) -> list[Path]:
        """Write the claim's figure(s) into `folder` -> their paths; none by default."""
        return []
