"""Every environment by name behind one `make_env` and one `make_vector_env`, configured by one `EnvConfig`.

Names: every POPGym environment (the `popgym` package: class name "RepeatFirstEasy" or id
"popgym-RepeatFirstEasy-v0"), MemoryCorridor / MemoryCorridorEasy, BestArm / BestArmOracle,
MemoryLength, InContextCartPole, "gym:<id>" (any gymnasium id, e.g. gym:Pendulum-v1) and
"dmc:<domain>-<task>" (DeepMind Control, the optional dm-control extra). Every environment comes out
with a flat float32 Box observation, optionally with Gaussian noise and the previous action, reward
and an episode-start flag appended (`PreviousActionReward`).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
from gymnasium import spaces

from seqssm.rl.envs.best_arm import BestArmIdentification
from seqssm.rl.envs.control import DMCEnv
from seqssm.rl.envs.memory_corridor import MemoryCorridor
from seqssm.rl.envs.meta import MemoryLength, in_context_cartpole
from seqssm.rl.envs.wrappers import ObservationNoise, PreviousActionReward

OWN_ENVS = {  # name -> constructor(**kwargs)
    "MemoryCorridor": MemoryCorridor,
    "MemoryCorridorEasy": lambda **kw: MemoryCorridor(easy=True, **kw),
    "BestArm": BestArmIdentification,
    "BestArmOracle": lambda **kw: BestArmIdentification(oracle=True, **kw),
    "MemoryLength": MemoryLength,
    "InContextCartPole": in_context_cartpole,
}
PREFIXES = ("gym:<id>", "dmc:<domain>-<task>")


@dataclass
class EnvConfig:
    """An environment and how it is observed and evaluated.

    name: see `env_names()`, or "gym:<id>" / "dmc:<domain>-<task>". kwargs go to its constructor.
    previous_action_reward: append the previous action, reward and an episode-start flag to the
    observation (van Gelooven 2025 thesis, 4.2); None (default) means on, except that `seqssm rl`
    turns it off for SAC, whose networks read the previous action themselves. previous_reward=False
    leaves the reward out: previous action and start flag only, the observation of POPGym's baselines
    (Morad et al. 2023) and of Lu et al. 2023's public code. observation_noise:
    standard deviation of Gaussian noise added to observations. eval_sets: evaluation name -> kwargs
    overriding `kwargs` (e.g. {ood: {sigma_range: [2, 3]}}), used when a run evaluates.
    """

    LIMITS: ClassVar[dict[str, str]] = {"observation_noise": ">= 0"}

    name: str = "RepeatFirstEasy"
    kwargs: dict[str, Any] = field(default_factory=dict)
    previous_action_reward: bool | None = None
    previous_reward: bool = True
    observation_noise: float = 0.0
    eval_sets: dict[str, dict[str, Any]] = field(default_factory=lambda: {"eval": {}})


def _popgym():
    from popgym.envs import ALL

    return ALL


def env_names() -> list[str]:
    """Every fixed environment name make_env accepts: POPGym's class names, then ours (plus the gym: / dmc: forms)."""
    return sorted(cls.__name__ for cls in _popgym()) + list(OWN_ENVS)


def _popgym_class(name: str):
    # POPGym 1.0 renamed StatelessCartPole / StatelessPendulum (Morad et al. 2023; Lu et al. 2023, table 5) to
    # PositionOnly...: the old names still find them.
    names = (name, name.replace("Stateless", "PositionOnly"))
    for cls, meta in _popgym().items():
        if cls.__name__ in names or meta.get("id") in names:
            return cls
    return None


def is_env_name(name: str) -> bool:
    """Whether make_env knows `name` (gym: and dmc: names are checked only when the environment is built)."""
    return name in OWN_ENVS or name.startswith(("gym:", "dmc:")) or _popgym_class(name) is not None


def unknown_env_message(name: str) -> str:
    """Why `name` is no environment, with the closest names and where the rest are listed."""
    close = difflib.get_close_matches(name, env_names(), n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return (f"unknown environment {name!r}; {hint}choose a POPGym name (e.g. RepeatFirstEasy), one of "
            f"{', '.join(OWN_ENVS)}, or {' / '.join(PREFIXES)} (all names: seqssm.rl.env_names())")


def _base_env(name: str, kwargs: dict[str, Any]) -> gym.Env:
    if name in OWN_ENVS:
        return OWN_ENVS[name](**kwargs)
    if name.startswith("gym:"):
        return gym.make(name[4:], **kwargs)
    if name.startswith("dmc:"):
        domain, _, task = name[4:].partition("-")
        return DMCEnv(domain, task.replace("-", "_"))
    cls = _popgym_class(name)
    if cls is None:
        raise ValueError(unknown_env_message(name))
    return cls(**kwargs)


def make_env(env: EnvConfig | str, overrides: dict[str, Any] | None = None) -> gym.Env:
    """One environment of `env` (a config or a name), its kwargs updated by `overrides`, with a flat float32 Box
    observation: noisy if observation_noise > 0, then with the previous action, reward (unless previous_reward is
    False) and start flag unless previous_action_reward is False."""
    config = EnvConfig(name=env) if isinstance(env, str) else env
    result = _base_env(config.name, {**config.kwargs, **(overrides or {})})
    if not (isinstance(result.observation_space, spaces.Box) and len(result.observation_space.shape) == 1):
        result = gym.wrappers.FlattenObservation(result)
    if config.observation_noise > 0:
        result = ObservationNoise(result, config.observation_noise)
    if config.previous_action_reward is not False:
        result = PreviousActionReward(result, reward=config.previous_reward)
    return result


def make_vector_env(env: EnvConfig | str, num_envs: int,
                    overrides: dict[str, Any] | None = None) -> gym.vector.VectorEnv:
    """`num_envs` copies of make_env(env, overrides) in one process with same-step autoreset: the observation
    returned with an episode's last step is the next episode's first (the final one is in infos["final_obs"]).
    Reset it before stepping: envs.reset(seed=s) seeds copy i with s + i."""
    mode = getattr(gym.vector, "AutoresetMode", None)
    if mode is None:
        raise RuntimeError(f"gymnasium {gym.__version__} has no same-step autoreset; install gymnasium>=1.1")
    return gym.vector.SyncVectorEnv([lambda: make_env(env, overrides) for _ in range(num_envs)],
                                    autoreset_mode=mode.SAME_STEP)
