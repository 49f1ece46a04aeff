"""One RL run's configuration (what a recipe under seqssm/recipes/rl/ says) and its validation.

Every config dataclass may declare the valid range of its numeric fields in `LIMITS` (">= 1", "> 0",
"[0, 1]", "(0, 1]", ...; for a list, of each entry) and cross-field rules in a `check()` method;
`validate` applies them all before anything runs, so that a bad value is one clear line naming the
option, the value and the valid range.
"""

from __future__ import annotations

import typing
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from typing import Any, ClassVar

from seqssm.arguments import resolve_device
from seqssm.errors import ConfigError
from seqssm.rl.algos import ALGORITHMS, AlgorithmSpec
from seqssm.rl.envs import EnvConfig

EVAL_SEED = 10_000  # evaluation environments are seeded with this + the run's seed, apart from the training ones


@dataclass
class EvalConfig:
    """Evaluation during training: every `every` environment steps (at the end of the first iteration that reaches
    each multiple, and after the last; None: never), `episodes` episodes on each of env.eval_sets with
    min(num_envs, episodes) environments, greedy (deterministic) or sampled actions."""

    LIMITS: ClassVar[dict[str, str]] = {"every": ">= 1", "episodes": ">= 1", "num_envs": ">= 1"}

    every: int | None = None
    episodes: int = 16
    num_envs: int = 8
    deterministic: bool = True


@dataclass
class FinalEvalConfig:
    """After training: `episodes` whole episodes (0: none) on each of `sets` (names in env.eval_sets; None: all of
    them), greedy (deterministic) or sampled actions, every episode's return, length and info kept in the summary's
    "final" (a bigger, fixed-seed measurement than the evaluations during training)."""

    LIMITS: ClassVar[dict[str, str]] = {"episodes": ">= 0"}

    episodes: int = 0
    deterministic: bool = False
    sets: list[str] | None = None


@dataclass
class RunConfig:
    """One run of `seqssm rl`: the algorithm ("ppo" or "sac", see seqssm.rl.algos.ALGORITHMS), the environment, the
    agent (that algorithm's agent config; None: its default), `algo` (the algorithm's settings, the recipe
    section named like the algorithm; None: its default), evaluation, seed and where the run writes.

    out_dir: where the run's files go (None: nowhere). checkpoint_every: iterations between last.pt saves
    (PPO: updates; SAC: evaluation intervals). device: where the agent and its updates run ("auto": CUDA when
    available, else CPU; "cpu", "cuda", "cuda:N"); environments always step on the CPU.
    target_return: stop once MMER (the best mean training return of an iteration) reaches it;
    time_limit_s: stop after the first iteration that ends past this many seconds (CPU budgets).
    """

    LIMITS: ClassVar[dict[str, str]] = {"seed": ">= 0", "checkpoint_every": ">= 1", "threads": ">= 1",
                                        "time_limit_s": "> 0"}

    algorithm: str = "ppo"
    env: EnvConfig = field(default_factory=EnvConfig)
    agent: Any = None
    algo: Any = None
    eval: EvalConfig = field(default_factory=EvalConfig)
    final_eval: FinalEvalConfig = field(default_factory=FinalEvalConfig)
    seed: int = 0
    out_dir: str | None = "runs/rl/run"
    checkpoint_every: int = 10
    device: str = "auto"
    threads: int | None = None
    target_return: float | None = None
    time_limit_s: float | None = None

    def __post_init__(self):
        spec = self.spec
        self.agent = spec.agent_config() if self.agent is None else self.agent
        self.algo = spec.config() if self.algo is None else self.algo
        sections = (("agent", self.agent, spec.agent_config), (self.algorithm, self.algo, spec.config))
        for section, value, kind in sections:
            if not isinstance(value, kind):
                raise ConfigError(f"--{section}: a {self.algorithm} run takes a {kind.__name__}, "
                                  f"got {type(value).__name__}")
        resolve_device(self.device)
        if self.env.previous_action_reward is None:
            self.env = replace(self.env, previous_action_reward=spec.previous_action_reward)

    @property
    def spec(self) -> AlgorithmSpec:
        """The algorithm's entry in ALGORITHMS."""
        return algorithm_spec(self.algorithm)

    def to_dict(self) -> dict[str, Any]:
        """The config as a recipe: plain values, the algorithm's settings under its name."""
        agent = {key: value for key, value in asdict(self.agent).items() if key not in former(type(self.agent))}
        out = {"algorithm": self.algorithm, "env": asdict(self.env), "agent": agent,
               self.algorithm: asdict(self.algo), "eval": asdict(self.eval), "final_eval": asdict(self.final_eval)}
        return out | {f.name: getattr(self, f.name) for f in fields(self) if f.name not in out and f.name != "algo"}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """The RunConfig of a recipe-shaped dict (as `to_dict` writes it); a missing algorithm means ppo."""
        data = dict(data)
        algorithm = data.pop("algorithm", "ppo")
        spec = algorithm_spec(algorithm)
        sections = {"env": EnvConfig, "agent": spec.agent_config, algorithm: spec.config, "eval": EvalConfig,
                    "final_eval": FinalEvalConfig}
        kwargs = {("algo" if key == algorithm else key): dataclass_from_dict(kind, data.pop(key, {}), key)
                  for key, kind in sections.items()}
        plain = {f.name for f in fields(cls)} - set(sections) - {"algo", "algorithm"}
        unknown = set(data) - plain
        if unknown:
            raise ConfigError(f"unknown key(s) {sorted(unknown)} in a {algorithm} run config; valid: "
                              f"{sorted(plain | set(sections) | {'algorithm'})}")
        return cls(algorithm=algorithm, **kwargs, **data)


def algorithm_spec(name: str) -> AlgorithmSpec:
    """ALGORITHMS[name], or a ConfigError listing the algorithms."""
    if name not in ALGORITHMS:
        raise ConfigError(f"--algorithm = {name!r} is not an algorithm; choose one of {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]


def dataclass_from_dict(cls: type, data: dict[str, Any], option: str):
    """An instance of dataclass `cls` from a dict, nested dataclass fields (also `X | None` ones) from nested dicts;
    unknown keys raise."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ConfigError(f"--{option}: unknown key(s) {sorted(unknown)}; valid: {sorted(names - former(cls))}")
    kwargs = {}
    for key, value in data.items():
        kind = next((k for k in typing.get_args(hints[key]) if is_dataclass(k)), hints[key])
        kwargs[key] = (dataclass_from_dict(kind, value, f"{option}.{key}")
                       if is_dataclass(kind) and isinstance(value, dict) else value)
    return cls(**kwargs)


def former(cls: type) -> set[str]:
    """The fields of config dataclass `cls` that hold former keys, read for old recipes and never written."""
    return set(getattr(cls, "FORMER", ()))


def within(value: float, limit: str) -> bool:
    """Whether `value` satisfies `limit`: ">= a", "> a", or an interval "[a, b]", "(a, b]", "[a, b)", "(a, b)"."""
    if limit[0] in "[(":
        low, high = (float(x) for x in limit[1:-1].split(","))
        above = low <= value if limit[0] == "[" else low < value
        below = value <= high if limit[-1] == "]" else value < high
        return above and below
    op, bound = limit.split()
    return value >= float(bound) if op == ">=" else value > float(bound)


def check_value(option: str, value, limit: str) -> None:
    """Raise ConfigError naming --option and its value unless value (or each entry of a list) is within `limit`."""
    entries = value if isinstance(value, (list, tuple)) else [value]
    if not all(isinstance(v, (int, float)) and within(v, limit) for v in entries):
        each = "each entry " if isinstance(value, (list, tuple)) else ""
        raise ConfigError(f"--{option} = {value!r} is out of range: {each}must be {limit}")


def check_limits(config, section: str = "", nested: bool = True) -> None:
    """Raise ConfigError for the first field of dataclass `config` (and of nested ones unless nested=False) outside
    its LIMITS, naming the option (--section.field), the value and the valid range; then run config.check()."""
    limits = getattr(config, "LIMITS", {})
    for f in fields(config):
        value, option = getattr(config, f.name), f"{section}.{f.name}" if section else f.name
        if is_dataclass(value):
            if nested:
                check_limits(value, option)
        elif f.name in limits and value is not None:
            check_value(option, value, limits[f.name])
    if hasattr(config, "check"):
        config.check()


def validate(config: RunConfig) -> None:
    """Check every range and cross-field rule of a run's config (raises ConfigError naming the option)."""
    check_limits(config, nested=False)
    for section in ("env", "agent", "eval", "final_eval"):
        check_limits(getattr(config, section), section)
    check_limits(config.algo, config.algorithm)
    final, sets = config.final_eval, config.env.eval_sets
    if final.episodes and not sets:
        raise ConfigError("--final_eval.episodes: the final evaluation plays env.eval_sets, and there are none; "
                          "name them (e.g. `eval_sets: {eval: {}}` for the training env) or set episodes 0")
    unknown = sorted(set(final.sets or ()) - set(sets))
    if unknown:
        raise ConfigError(f"--final_eval.sets: {unknown} not in env.eval_sets ({sorted(sets)})")
