"""RL algorithms by name: each module holds its config, its losses (plain functions) and the algorithm."""

from seqssm.rl.algos.base import AlgorithmSpec
from seqssm.rl.algos.ppo import PPO, PPOConfig
from seqssm.rl.algos.ppo import SPEC as PPO_SPEC
from seqssm.rl.algos.sac import SAC, SACConfig
from seqssm.rl.algos.sac import SPEC as SAC_SPEC

ALGORITHMS: dict[str, AlgorithmSpec] = {spec.name: spec for spec in (PPO_SPEC, SAC_SPEC)}

__all__ = ["ALGORITHMS", "AlgorithmSpec", "PPO", "PPOConfig", "SAC", "SACConfig"]
