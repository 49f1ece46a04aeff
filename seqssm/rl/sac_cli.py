"""`seqssm rl --config recipes/rl/sac/...` for SAC recipes (those that say `algorithm: sac`).

    python -m seqssm.rl.sac_cli --config recipes/rl/sac/best_arm/kalman.yaml
    python -m seqssm.rl.sac_cli --config recipes/rl/sac/memory_length/s5.yaml --env.kwargs.memory_length 32

`seqssm.rl.cli` hands an `rl` command line to `main` when `sac_requested(argv)` says so. A run
writes to --out_dir: config.yaml, metrics.jsonl (one record per evaluation), last.pt, summary.json.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

import torch
import yaml
from jsonargparse import ActionConfigFile, ArgumentParser

from seqssm.rl.offpolicy import RACConfig
from seqssm.rl.sac import OffPolicyEnvConfig, SACConfig, train


def sac_parser() -> ArgumentParser:
    """The parser: --algorithm sac, --env.*, --agent.* (with --agent.encoder.*), --sac.*, --seed, --out_dir, --threads."""
    parser = ArgumentParser(prog="seqssm rl", description="Train a recurrent actor-critic with SAC "
                            "(discrete SAC for discrete actions).", default_meta=False)
    parser.add_argument("--config", action=ActionConfigFile, help="a recipe, e.g. recipes/rl/sac/<task>/<core>.yaml")
    parser.add_argument("--algorithm", type=Literal["sac"], default="sac", help="this parser's algorithm")
    parser.add_class_arguments(OffPolicyEnvConfig, "env")
    parser.add_class_arguments(RACConfig, "agent")
    parser.add_class_arguments(SACConfig, "sac")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out_dir", type=str, default="runs/rl/sac", help="where logs and checkpoints go")
    parser.add_argument("--threads", type=int | None, default=None, help="torch CPU threads (default: torch's)")
    return parser


def sac_requested(argv: list[str]) -> bool:
    """Whether an `rl` command line asks for SAC: --algorithm sac, or a --config file saying `algorithm: sac`."""
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith(("--algorithm=", "--config=")) else (
            argv[i + 1] if arg in ("--algorithm", "--config") and i + 1 < len(argv) else None)
        if value is None:
            continue
        if arg.startswith("--algorithm"):
            return value == "sac"
        path = Path(value)
        if path.is_file():
            config = yaml.safe_load(path.read_text()) or {}
            if isinstance(config, dict) and config.get("algorithm") == "sac":
                return True
    return False


def main(argv: list[str] | None = None) -> dict:
    """`seqssm rl ARGS` for SAC -> the training summary (also in OUT_DIR/summary.json)."""
    parser = sac_parser()
    cfg = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    parser.save(cfg, out_dir / "config.yaml", overwrite=True)
    instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes  # renamed in jsonargparse 4.49
    init = instantiate(cfg)
    summary = train(init.env, init.agent, init.sac, seed=cfg.seed, out_dir=out_dir)
    evals = ", ".join(f"{k} return {v['return_mean']:.3f}" for k, v in summary.items() if isinstance(v, dict))
    print(f"{evals} after {summary.get('steps')} steps in {summary.get('wall_s')}s; metrics and last.pt in {out_dir}")
    return summary


if __name__ == "__main__":
    main()
