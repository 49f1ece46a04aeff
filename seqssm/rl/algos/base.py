"""What an RL algorithm tells the runner: its configs, how to build its agent, and the algorithm itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class AlgorithmSpec:
    """An algorithm by name. config: its settings (the recipe section named like the algorithm, e.g. `ppo:`);
    agent_config: the `agent:` section; previous_action_reward: whether its observations carry the previous
    action and reward (EnvConfig.previous_action_reward None means this); make_agent(agent_config, config,
    observation_space, action_space, core_model_config) -> the agent (a policy, see `seqssm.rl.env_loop`);
    algorithm(agent, envs, config, seed) -> an object with `steps`, `agent`, `episodes` (an EpisodeTracker of
    training episodes), `LOG_KEYS` and `iterate(until) -> metrics`, which trains until at least one unit of
    work is done (PPO: one rollout and update; SAC: environment steps up to `until`)."""

    name: str
    config: type
    agent_config: type
    previous_action_reward: bool
    make_agent: Callable[..., Any]
    algorithm: Callable[..., Any]
