"""Agent checkpoints, one format for every algorithm: a plain dict of the run's config (recipe-shaped), the agent's
weights and the training progress, written atomically and read with torch.load(weights_only=True).

Files of the two earlier formats (PPO's "seqssm-rl-agent" version 1 and SAC's "seqssm-sac-agent") are
read too: `read_checkpoint` upgrades them to the current layout, and SAC agents saved with the former
`agent.encoder` keys to the `agent.core` they describe (the same modules, so the same weights' keys).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from seqssm.errors import CheckpointError, ConfigError
from seqssm.files import atomic_write
from seqssm.models.reading import weights_mismatch
from seqssm.models.safe_load import load_torch_file
from seqssm.rl.algos import ALGORITHMS
from seqssm.rl.config import RunConfig
from seqssm.rl.envs import make_env
from seqssm.rl.offpolicy import former_encoder_core

CHECKPOINT_FORMAT = "seqssm-rl"
CHECKPOINT_VERSION = 2
LEGACY_PPO_FORMAT = "seqssm-rl-agent"
LEGACY_SAC_FORMAT = "seqssm-sac-agent"
# Evaluation settings that lived in SAC's config before evaluation became the runner's.
LEGACY_SAC_EVAL = {"eval_every": "every", "eval_episodes": "episodes", "deterministic_eval": "deterministic"}
NOT_AN_AGENT = "not a seqssm RL agent checkpoint (`seqssm rl` writes them: best.pt, last.pt)"


def save_checkpoint(path: str | Path, agent: nn.Module, config: RunConfig, **progress) -> Path:
    """Write an agent checkpoint: config, weights, progress (iteration, steps, mmer, ...: plain values)."""
    payload = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "algorithm": config.algorithm,
               "config": config.to_dict(), "core_model_config": getattr(agent, "core_model_config", None),
               "state_dict": agent.state_dict(), "progress": progress}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: torch.save(payload, tmp))
    return path


def _upgrade_ppo(ckpt: dict) -> dict:
    """A version-1 PPO checkpoint in the current layout (stop rules move from the PPO settings to the run)."""
    ppo = dict(ckpt.get("ppo") or {})
    stops = {key: ppo.pop(key) for key in ("target_return", "time_limit_s") if key in ppo}
    config = {"algorithm": "ppo", "env": ckpt["env"], "agent": ckpt["agent"], "ppo": ppo, "seed": ckpt.get("seed", 0),
              **stops}
    progress = {"iteration": ckpt.get("update"), "steps": ckpt.get("steps"), "mmer": ckpt.get("mmer")}
    return {"config": config, "core_model_config": ckpt.get("core_model_config"), "state_dict": ckpt["state_dict"],
            "progress": progress}


def _upgrade_sac(ckpt: dict) -> dict:
    """A SAC checkpoint of the earlier format in the current layout (evaluation settings move to `eval`)."""
    sac = dict(ckpt["sac"])
    evaluation = {new: sac.pop(old) for old, new in LEGACY_SAC_EVAL.items() if old in sac}
    env = {**ckpt["env"], "previous_action_reward": False}
    config = {"algorithm": "sac", "env": env, "agent": ckpt["agent"], "sac": sac, "eval": evaluation,
              "seed": ckpt.get("seed", 0), "checkpoint_every": 1}
    return {"config": config, "core_model_config": None, "state_dict": ckpt["state_dict"],
            "progress": {"steps": ckpt.get("steps")}}


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint dict at `path` in the current layout (algorithm, config, core_model_config, state_dict,
    progress); a missing, unreadable or foreign file raises CheckpointError saying which."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: {'is a folder, not' if path.is_dir() else 'no such file; expected'} "
                              "an agent checkpoint (best.pt / last.pt in a `seqssm rl` run's folder)")
    ckpt = load_torch_file(path)
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"{path}: {NOT_AN_AGENT}; it holds a {type(ckpt).__name__}")
    fmt = ckpt.get("format")
    if fmt == LEGACY_PPO_FORMAT:
        ckpt = _upgrade_ppo(ckpt)
    elif fmt == LEGACY_SAC_FORMAT:
        ckpt = _upgrade_sac(ckpt)
    elif fmt != CHECKPOINT_FORMAT:
        lightning = "pytorch-lightning_version" in ckpt or "hyper_parameters" in ckpt
        hint = "; it is a `seqssm fit` checkpoint: give it to an agent as --agent.core_init_from" if lightning else ""
        raise CheckpointError(f"{path}: {NOT_AN_AGENT}{hint}")
    elif ckpt.get("version", 0) > CHECKPOINT_VERSION:
        raise CheckpointError(f"{path}: written by a newer seqssm (checkpoint version {ckpt['version']}, this one "
                              f"reads up to {CHECKPOINT_VERSION}); upgrade seqssm")
    ckpt["algorithm"] = ckpt["config"].get("algorithm", "ppo")
    if ckpt["algorithm"] not in ALGORITHMS:
        raise CheckpointError(f"{path}: an agent of the algorithm {ckpt['algorithm']!r}, which this seqssm cannot "
                              f"play; it plays {', '.join(ALGORITHMS)} agents")
    agent = ckpt["config"].get("agent") or {}
    if ckpt["algorithm"] == "sac" and isinstance(agent.get("encoder"), dict):
        ckpt["config"]["agent"] = {**{k: v for k, v in agent.items() if k != "encoder"},
                                   "core": former_encoder_core(agent["encoder"])}
    return ckpt


def load_checkpoint(path: str | Path) -> tuple[nn.Module, RunConfig, dict[str, Any]]:
    """(the agent with its trained weights, in eval mode; the run's config; the checkpoint dict) from a file of
    `save_checkpoint` or of an earlier format."""
    ckpt = read_checkpoint(path)
    agent = None
    try:
        config = RunConfig.from_dict(ckpt["config"])
        probe = make_env(config.env)
        agent = config.spec.make_agent(config.agent, config.algo, probe.observation_space, probe.action_space,
                                       core_model_config=ckpt.get("core_model_config"))
        probe.close()
        agent.load_state_dict(ckpt["state_dict"])
    except (ConfigError, ValueError, TypeError, KeyError, RuntimeError) as e:
        # once the agent is built, the weights did not fit it; torch names the tensors on lines after its first
        mismatch = agent is not None and isinstance(ckpt.get("state_dict"), dict) and weights_mismatch(
            agent.state_dict(), ckpt["state_dict"])
        reason = mismatch or (str(e).splitlines()[0] if str(e) else type(e).__name__)
        raise CheckpointError(f"{path}: its agent cannot be rebuilt from the config it stores ({reason}); give an "
                              "agent file as `seqssm rl` wrote it (best.pt, last.pt), or train it again") from e
    return agent.eval(), config, ckpt
