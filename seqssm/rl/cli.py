"""`seqssm rl` (train an agent with the recipe's `algorithm:`, ppo or sac) and `seqssm rl-eval` (play a trained one).

    seqssm rl --config rl/repeat_first_easy/s5.yaml
    seqssm rl --config rl/repeat_first_easy/s5.yaml --agent.core.layer gru --out_dir runs/rl/rf-gru
    seqssm rl --config rl/repeat_first_easy/s5.yaml --agent.core_init_from runs/quickstart/lightning_logs/version_0/checkpoints/last.ckpt
    seqssm rl --config rl/sac/best_arm/kalman.yaml --agent.core.layer vssm
    seqssm rl-eval runs/rl/repeat_first_easy/s5/best.pt --episodes 100
    seqssm rl-eval runs/rl/sac/best_arm/kalman/last.pt --eval_set ood

A recipe says `algorithm: ppo` or `algorithm: sac` (missing: ppo), then the sections env, agent (that
algorithm's agent), ppo or sac (its settings), eval, and the run's seed and out_dir. The algorithm is
read first, the way every key is read (config files in order, then the command line), and selects the
types of the agent and settings sections; `seqssm rl --algorithm sac --help` shows SAC's. A run writes
to --out_dir (refused if not empty, unless --overwrite): config.yaml, metrics.jsonl, best.pt, last.pt,
summary.json (see seqssm.rl.runner). Mistakes in the options are one line naming the option (exit code 2;
SEQSSM_DEBUG=1 shows the traceback).
"""

from __future__ import annotations

import json
import math
import typing
from dataclasses import fields
from typing import Any, Literal

import torch
from jsonargparse import ActionConfigFile, ArgumentParser

from seqssm.arguments import ShortErrors, resolve_device
from seqssm.errors import ConfigError
from seqssm.recipes import RECIPE_PARSER_MODE, config_args, register_recipe_loader
from seqssm.rl.algos import ALGORITHMS
from seqssm.rl.checkpoint import load_checkpoint
from seqssm.rl.config import EvalConfig, FinalEvalConfig, RunConfig, algorithm_spec, check_value
from seqssm.rl.env_loop import run_episodes
from seqssm.rl.envs import EnvConfig, make_vector_env
from seqssm.rl.runner import check_demands, environments_demand, set_threads, train

SECTIONS = ("env", "agent", *ALGORITHMS, "eval", "final_eval")
RUN_OPTIONS = {  # the plain options of a run: RunConfig's fields that are no section -> help
    "seed": "seed of torch, the environments and the replay sampling",
    "out_dir": "where config.yaml, metrics.jsonl, best.pt, last.pt and summary.json go",
    "checkpoint_every": "iterations between last.pt saves (PPO: updates; SAC: evaluation intervals)",
    "device": "where the agent and its updates run: auto (CUDA when available, else CPU), cpu, cuda or cuda:N",
    "threads": "torch CPU threads (default: 1 for a CPU run, torch's for a GPU run)",
    "target_return": "stop once MMER (the best mean training return of an iteration) reaches this",
    "time_limit_s": "stop after the first iteration that ends past this many seconds",
}
FIRST_PASS_SKIPS = ("-h", "--help", "--print_config")


class RLParser(ShortErrors, ArgumentParser):
    """The parser of `seqssm rl` and `seqssm rl-eval`: mistakes are one UsageError line (`seqssm.arguments`)."""


def algorithm_of(argv: list[str]) -> str:
    """The `algorithm` that a `seqssm rl` command line says (its config files in order, then --algorithm), read by
    a parser with every section untyped; "ppo" when none says it or the line does not parse (then the typed
    parser reports what is wrong)."""
    register_recipe_loader()
    parser = ArgumentParser(exit_on_error=False, parser_mode=RECIPE_PARSER_MODE)
    parser.add_argument("--config", action=ActionConfigFile)
    parser.add_argument("--algorithm", type=str, default="ppo")
    for section in SECTIONS:
        parser.add_argument(f"--{section}", type=dict[str, Any] | None, default=None)
    for option in RUN_OPTIONS:
        parser.add_argument(f"--{option}", type=Any, default=None)
    parser.add_argument("--overwrite", action="store_true")
    args = [a for a in argv if not a.startswith(FIRST_PASS_SKIPS)]
    try:
        return parser.parse_args(args).algorithm
    except Exception:  # noqa: BLE001 - any parse failure is reported by the typed parser
        return "ppo"


def rl_parser(algorithm: str = "ppo") -> ArgumentParser:
    """The typed `seqssm rl` parser for `algorithm`: --algorithm, --env.*, --agent.*, --<algorithm>.*, --eval.*,
    --final_eval.*, the run options and --overwrite."""
    spec = ALGORITHMS[algorithm]
    register_recipe_loader()
    parser = RLParser(prog="seqssm rl", parser_mode=RECIPE_PARSER_MODE,
                      description=f"Train a recurrent agent ({algorithm}; the recipe's `algorithm:` chooses) on a "
                                  "POPGym, MemoryCorridor, Best Arm, meta-RL or control env; a recipe may name its "
                                  "`_base_`.")
    parser.add_argument("--config", action=ActionConfigFile,
                        help="a recipe file or a packaged recipe's name, e.g. rl/<env>/<core>")
    parser.add_argument("--algorithm", type=Literal[tuple(ALGORITHMS)], default="ppo",
                        help="the RL algorithm; it sets what --agent.* and the section named like it hold")
    parser.add_class_arguments(EnvConfig, "env")
    parser.add_class_arguments(spec.agent_config, "agent")
    parser.add_class_arguments(spec.config, spec.name)
    parser.add_class_arguments(EvalConfig, "eval")
    parser.add_class_arguments(FinalEvalConfig, "final_eval")
    types, defaults = typing.get_type_hints(RunConfig), {f.name: f.default for f in fields(RunConfig)}
    for option, help_text in RUN_OPTIONS.items():
        parser.add_argument(f"--{option}", type=types[option], default=defaults[option], help=help_text)
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the run files in a non-empty --out_dir (default: refuse it)")
    return parser


def rl_main(argv: list[str]) -> dict:
    """`seqssm rl ARGS` -> the training summary (also in OUT_DIR/summary.json)."""
    argv = config_args(argv)  # --config: a path, or a packaged recipe's name
    parser = rl_parser(algorithm_spec(algorithm_of(argv)).name)
    cfg = parser.parse_args(argv)
    spec = algorithm_spec(cfg.algorithm)
    init = parser.instantiate(cfg) if hasattr(parser, "instantiate") else parser.instantiate_classes(cfg)  # 4.49 name
    config = RunConfig(algorithm=spec.name, env=init.env, agent=init.agent, algo=init[spec.name], eval=init.eval,
                       final_eval=init.final_eval, **{option: cfg[option] for option in RUN_OPTIONS})
    summary = train(config, overwrite=cfg.overwrite)
    evals = "".join(f", {name} return {stats['return_mean']:.3f}" for name, stats in (summary["eval"] or {}).items())
    mmer = "n/a" if summary["mmer"] is None else f"{summary['mmer']:.3f}"
    print(f"{spec.name}: MMER {mmer}{evals} after {summary['steps']} steps in {summary['wall_s']:.0f}s "
          f"({summary['sps']:.0f} steps/s); checkpoints and metrics in {config.out_dir}")
    return summary


def eval_parser() -> ArgumentParser:
    """The `seqssm rl-eval` parser: CKPT, --episodes, --num_envs, --seed, --deterministic, --eval_set, --threads,
    --device."""
    parser = RLParser(prog="seqssm rl-eval", description="Play a trained agent (PPO or SAC) and report its "
                            "returns and the environment's episode statistics as JSON.")
    parser.add_argument("ckpt", type=str, help="an agent checkpoint written by `seqssm rl` (best.pt / last.pt)")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--num_envs", type=int, default=16, help="environments played side by side (at most)")
    parser.add_argument("--seed", type=int, default=12345, help="environment seed (unlike training's by default)")
    parser.add_argument("--deterministic", type=bool, default=False, help="greedy actions instead of sampling")
    parser.add_argument("--eval_set", type=str | None, default=None,
                        help="play one of the run's env.eval_sets (e.g. ood) instead of its training env")
    parser.add_argument("--threads", type=int | None, default=None, help=RUN_OPTIONS["threads"])
    parser.add_argument("--device", type=str, default="auto", help=RUN_OPTIONS["device"])
    return parser


def largest_divisor(n: int, at_most: int) -> int:
    """The largest divisor of n that is at most `at_most` (>= 1), from the pairs d, n / d with d <= sqrt(n)."""
    pairs = ((d, n // d) for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return max(q for pair in pairs for q in pair if q <= at_most)


def eval_main(argv: list[str]) -> dict:
    """`seqssm rl-eval CKPT ARGS` -> episode statistics, printed as JSON."""
    cfg = eval_parser().parse_args(argv)
    for option, limit in (("episodes", ">= 1"), ("num_envs", ">= 1"), ("seed", ">= 0"), ("threads", ">= 1")):
        if cfg[option] is not None:
            check_value(option, cfg[option], limit)
    device = resolve_device(cfg.device)
    set_threads(cfg.threads, device)
    agent, config, ckpt = load_checkpoint(cfg.ckpt)
    agent.to(device)
    sets = config.env.eval_sets
    if cfg.eval_set is not None and cfg.eval_set not in sets:
        raise ConfigError(f"--eval_set = {cfg.eval_set!r} is not an evaluation set of this run; its sets: "
                          f"{', '.join(sets) or 'none'}")
    # as many environments as possible that split the episodes evenly: each plays the same number of them
    num_envs = largest_divisor(cfg.episodes, at_most=cfg.num_envs)
    check_demands("rl-eval", {torch.device("cpu"): [
        environments_demand(config.env, num_envs, f"{num_envs} environments (--num_envs, --episodes)")]})
    envs = make_vector_env(config.env, num_envs, sets.get(cfg.eval_set))
    stats = run_episodes(agent, envs, cfg.episodes, cfg.deterministic, seed=cfg.seed)
    envs.close()
    progress = ckpt.get("progress", {})
    result = {"ckpt": cfg.ckpt, "algorithm": config.algorithm, "env": config.env.name, "eval_set": cfg.eval_set,
              "iteration": progress.get("iteration"), "train_steps": progress.get("steps"),
              "deterministic": cfg.deterministic, **stats}
    print(json.dumps(result, indent=2))
    return result


def main(argv: list[str]) -> dict:
    """`rl_main` or `eval_main` from Python: argv = ["rl", ...] or ["rl-eval", CKPT, ...]. Errors are raised; the
    `seqssm` command prints them."""
    commands = {"rl": rl_main, "rl-eval": eval_main}
    if not argv or argv[0] not in commands:
        raise ValueError(f"expected one of the subcommands {', '.join(commands)}, got {argv[:1]}")
    return commands[argv[0]](argv[1:])

