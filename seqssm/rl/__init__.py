"""Reinforcement learning with seqssm memory cores: recurrent actor-critic, environments, recurrent PPO."""

from seqssm.rl.agent import ActorCritic, AgentConfig, build_agent
from seqssm.rl.core import CoreConfig, ResidualBlock, build_core, load_core
from seqssm.rl.envs import EnvConfig, MemoryCorridor, PreviousActionReward, env_names, make_env, make_vector_env
from seqssm.rl.ppo import PPO, PPOConfig, load_checkpoint, run_episodes, save_checkpoint

__all__ = [
    "ActorCritic", "AgentConfig", "build_agent", "CoreConfig", "ResidualBlock", "build_core", "load_core",
    "EnvConfig", "MemoryCorridor", "PreviousActionReward", "env_names", "make_env", "make_vector_env",
    "PPO", "PPOConfig", "load_checkpoint", "run_episodes", "save_checkpoint",
]
