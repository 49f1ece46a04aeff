"""Environments for memory agents: POPGym, MemoryCorridor, Best Arm Identification, meta-RL and noisy control,
all behind one `make_env` / `make_vector_env` and one `EnvConfig` (see `seqssm.rl.envs.make`)."""

from seqssm.rl.envs.best_arm import BestArmIdentification
from seqssm.rl.envs.control import DMCEnv
from seqssm.rl.envs.make import EnvConfig, env_names, make_env, make_vector_env
from seqssm.rl.envs.memory_corridor import MemoryCorridor
from seqssm.rl.envs.meta import MemoryLength, RandomProjection, in_context_cartpole
from seqssm.rl.envs.wrappers import ObservationNoise, PreviousActionReward

__all__ = [
    "BestArmIdentification", "DMCEnv", "EnvConfig", "env_names", "make_env", "make_vector_env", "MemoryCorridor",
    "MemoryLength", "RandomProjection", "in_context_cartpole", "ObservationNoise", "PreviousActionReward",
]
