"""`seqssm rl` (train an agent with recurrent PPO) and `seqssm rl-eval` (play a trained agent).

    seqssm rl --config recipes/rl/repeat_first_easy/s5.yaml
    seqssm rl --config recipes/rl/repeat_first_easy/s5.yaml --agent.core.layer gru --out_dir runs/rl/rf-gru
    seqssm rl --config recipes/rl/repeat_first_easy/s5.yaml --agent.core_init_from runs/quickstart/checkpoints/last.ckpt
    seqssm rl-eval runs/rl/repeat_first_easy/s5/best.pt --episodes 100

A run writes to --out_dir: config.yaml, metrics.jsonl (one record per update), best.pt (the
agent at its best update) and last.pt, summary.json. Agent checkpoints hold plain configs and
weights and load with torch.load(weights_only=True).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from jsonargparse import ActionConfigFile, ArgumentParser

from seqssm.rl.agent import AgentConfig
from seqssm.rl.envs import EnvConfig, make_vector_env
from seqssm.rl.ppo import PPOConfig, load_checkpoint, run_episodes, train

SUBCOMMANDS = ("rl", "rl-eval")


def rl_parser() -> ArgumentParser:
    """The `seqssm rl` parser: --env.*, --agent.* (with --agent.core.*), --ppo.*, --seed, --out_dir, --threads."""
    parser = ArgumentParser(prog="seqssm rl", description="Train a recurrent actor-critic with PPO on a "
                            "POPGym or MemoryCorridor environment.")
    parser.add_argument("--config", action=ActionConfigFile, help="a recipe, e.g. recipes/rl/<env>/<core>.yaml")
    parser.add_class_arguments(EnvConfig, "env")
    parser.add_class_arguments(AgentConfig, "agent")
    parser.add_class_arguments(PPOConfig, "ppo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out_dir", type=str, default="runs/rl/run", help="where logs and checkpoints go")
    parser.add_argument("--checkpoint_every", type=int, default=10, help="updates between last.pt saves")
    parser.add_argument("--threads", type=int | None, default=None, help="torch CPU threads (default: torch's)")
    return parser


def eval_parser() -> ArgumentParser:
    """The `seqssm rl-eval` parser: CKPT, --episodes, --num_envs, --seed, --deterministic, --threads."""
    parser = ArgumentParser(prog="seqssm rl-eval", description="Play a trained agent and report its returns.")
    parser.add_argument("ckpt", type=str, help="an agent checkpoint written by `seqssm rl` (best.pt / last.pt)")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--num_envs", type=int, default=16)
    parser.add_argument("--seed", type=int, default=12345, help="environment seed (unlike training's by default)")
    parser.add_argument("--deterministic", type=bool, default=False, help="greedy actions instead of sampling")
    parser.add_argument("--threads", type=int | None, default=None)
    return parser


def rl_main(argv: list[str]) -> dict:
    """`seqssm rl ARGS` -> the training summary (also in OUT_DIR/summary.json)."""
    parser = rl_parser()
    cfg = parser.parse_args(argv)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    parser.save(cfg, out_dir / "config.yaml", overwrite=True)
    # jsonargparse >= 4.49 names it `instantiate`; the project allows >= 4.27
    init = getattr(parser, "instantiate", None) or parser.instantiate_classes
    init = init(cfg)
    summary = train(init.env, init.agent, init.ppo, seed=cfg.seed, out_dir=out_dir,
                    checkpoint_every=cfg.checkpoint_every)
    print(f"MMER {summary['mmer']:.3f} after {summary['steps']} steps in {summary['wall_s']:.0f}s "
          f"({summary['sps']:.0f} steps/s); checkpoints and metrics in {out_dir}")
    return summary


def eval_main(argv: list[str]) -> dict:
    """`seqssm rl-eval CKPT ARGS` -> episode statistics, printed as JSON."""
    cfg = eval_parser().parse_args(argv)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    agent, env, ckpt = load_checkpoint(cfg.ckpt)
    # as many environments as possible that split the episodes evenly: each plays the same number of them
    num_envs = max(d for d in range(1, min(cfg.num_envs, cfg.episodes) + 1) if cfg.episodes % d == 0)
    envs = make_vector_env(env.name, num_envs, seed=cfg.seed, env_kwargs=env.kwargs,
                           previous_action_reward=env.previous_action_reward)
    result = {"ckpt": cfg.ckpt, "env": env.name, "update": ckpt.get("update"), "train_steps": ckpt.get("steps"),
              "deterministic": cfg.deterministic, **run_episodes(agent, envs, cfg.episodes, cfg.deterministic)}
    envs.close()
    print(json.dumps(result, indent=2))
    return result


def main(argv: list[str] | None = None) -> dict:
    """Entry point: argv = ["rl", ...] or ["rl-eval", CKPT, ...] (default: sys.argv[1:])."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["rl"]:
        from seqssm.rl.sac_cli import main as sac_main, sac_requested

        if sac_requested(argv[1:]):
            return sac_main(argv[1:])
        return rl_main(argv[1:])
    if argv[:1] == ["rl-eval"]:
        return eval_main(argv[1:])
    raise SystemExit(f"seqssm rl: expected one of the subcommands {SUBCOMMANDS}, got {argv[:1]}")


if __name__ == "__main__":
    main()
