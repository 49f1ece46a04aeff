"""Reinforcement learning with seqssm memory cores: recurrent actor-critics, environments, PPO and SAC, one runner.

Layout: `envs/` (every environment behind `make_env`), `agent` and `core` (PPO's actor-critic and its
memory cores), `offpolicy` and `replay` (SAC's recurrent actor-critic and episode replay), `algos/`
(PPO and SAC, losses as functions), `env_loop` (acting in vector envs, evaluation), `runner` (the one
training loop), `checkpoint` (one checkpoint format), `cli` (`seqssm rl`, `seqssm rl-eval`).
"""

from seqssm.errors import CheckpointError, ConfigError
from seqssm.rl.agent import ActorCritic, AgentConfig, build_agent
from seqssm.rl.algos import ALGORITHMS, PPO, SAC, PPOConfig, SACConfig
from seqssm.rl.checkpoint import load_checkpoint, save_checkpoint
from seqssm.rl.config import EvalConfig, RunConfig
from seqssm.rl.core import CoreConfig, ResidualBlock, build_core, load_core
from seqssm.rl.env_loop import EnvLoop, run_episodes
from seqssm.rl.envs import EnvConfig, MemoryCorridor, PreviousActionReward, env_names, make_env, make_vector_env
from seqssm.rl.offpolicy import HistoryEncoderConfig, RACConfig, SACAgent
from seqssm.rl.runner import run_iterations, train

__all__ = [
    "ActorCritic", "AgentConfig", "build_agent", "ALGORITHMS", "PPO", "SAC", "PPOConfig", "SACConfig",
    "load_checkpoint", "save_checkpoint", "EvalConfig", "RunConfig", "CoreConfig", "ResidualBlock", "build_core",
    "load_core", "EnvLoop", "run_episodes", "EnvConfig", "MemoryCorridor", "PreviousActionReward", "env_names",
    "make_env", "make_vector_env", "CheckpointError", "ConfigError", "HistoryEncoderConfig", "RACConfig", "SACAgent",
    "run_iterations", "train",
]
