"""The one training loop of every RL algorithm: iterations, evaluation, logging, checkpoints.

`train(RunConfig)` validates the whole config and builds environments, agent and algorithm before it
writes anything; then it writes to out_dir: config.yaml (the resolved config, a recipe that repeats
the run), metrics.jsonl (one record per iteration: PPO's update or SAC's evaluation interval),
best.pt (the agent at its best score: the first evaluation set's mean return when the run evaluates,
else the mean training return), last.pt (every `checkpoint_every` iterations and at the end) and
summary.json (with, under "final", the episodes of the final evaluation that config.final_eval asks for).
A non-empty out_dir is refused unless overwrite=True; runs are not resumed.
`run_iterations` is the loop alone, for an algorithm built by hand.
"""

from __future__ import annotations

import json
import math
import os
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch
import yaml
from gymnasium import spaces

from seqssm.errors import ConfigError
from seqssm.files import remove_stale_temporaries
from seqssm.rl.checkpoint import save_checkpoint
from seqssm.arguments import resolve_device
from seqssm.rl.config import EVAL_SEED, RunConfig, validate
from seqssm.rl.core import core_config_of, describe_core
from seqssm.rl.env_loop import run_episodes
from seqssm.rl.envs import make_env, make_vector_env
from seqssm.rl.envs.make import is_env_name, unknown_env_message

RUN_FILES = ("config.yaml", "metrics.jsonl", "best.pt", "last.pt", "summary.json")
ENV_ERRORS = (ValueError, TypeError, ImportError, gym.error.Error)
AGENT_ERRORS = (ValueError, TypeError, FileNotFoundError)


def run_iterations(algo, eval_every: int | None = None, evaluate_fn: Callable[[], dict] | None = None,
                   target_return: float | None = None, time_limit_s: float | None = None,
                   on_record: Callable[[dict], bool | None] | None = None) -> dict[str, Any]:
    """Iterate `algo` until algo.config.total_steps environment steps (or target_return / time_limit_s) -> summary.

    Each iteration's record: iteration, steps, the algorithm's metrics, the training episodes that ended
    in it (count, mean return and length), mmer (the best mean return of an iteration so far: POPGym's
    MMER), `eval` (evaluate_fn()'s result, at the first iteration end at or past each multiple of
    eval_every and after the last), wall_s, sps. on_record(record) -> True stops the run.
    """
    total = algo.config.total_steps
    mmer, start, steps_to_target, iteration = -math.inf, time.perf_counter(), None, 0
    next_eval = eval_every if evaluate_fn is not None else None
    record: dict[str, Any] = {}
    while algo.steps < total:
        metrics = algo.iterate(min(total, next_eval) if next_eval else total)
        iteration += 1
        record = {"iteration": iteration, "steps": algo.steps, **metrics}
        returns, lengths = algo.episodes.pop()
        record["episodes"] = len(returns)
        if returns:
            record["episodic_return"] = float(np.mean(returns))
            record["episode_length"] = float(np.mean(lengths))
            mmer = max(mmer, record["episodic_return"])
        record["mmer"] = mmer if mmer > -math.inf else None
        if next_eval is not None and (algo.steps >= next_eval or algo.steps >= total):
            while next_eval <= algo.steps:
                next_eval += eval_every
            record["eval"] = evaluate_fn()
        record["wall_s"] = time.perf_counter() - start
        record["sps"] = algo.steps / record["wall_s"]
        reached = target_return is not None and mmer >= target_return
        if reached and steps_to_target is None:
            steps_to_target = algo.steps
        out_of_time = time_limit_s is not None and record["wall_s"] >= time_limit_s
        if (on_record is not None and on_record(record)) or reached or out_of_time:
            break
    return {"mmer": record.get("mmer"), "steps": algo.steps, "iterations": iteration, "wall_s": record.get("wall_s"),
            "sps": record.get("sps"), "steps_to_target": steps_to_target, "eval": record.get("eval"), "last": record}


def check_out_dir(out_dir: Path, overwrite: bool) -> None:
    """Refuse (ConfigError) an out_dir that is a file, or a non-empty folder unless overwrite."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out_dir {out_dir} is a file, not a folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        held = "a finished run" if (out_dir / "summary.json").is_file() else "files"
        raise ConfigError(f"--out_dir {out_dir} is not empty (it holds {held}); choose another --out_dir, or pass "
                          "--overwrite to replace the run files in it")


def check_env(config: RunConfig) -> None:
    """Raise ConfigError unless the environment's name is known, it builds, and so does every evaluation set."""
    if not is_env_name(config.env.name):
        raise ConfigError(f"--env.name: {unknown_env_message(config.env.name)}")
    sets = config.env.eval_sets if config.eval.every is not None else {}
    for option, overrides in [("env", None), *((f"env.eval_sets.{name}", kw) for name, kw in sets.items() if kw)]:
        try:
            make_env(config.env, overrides).close()
        except ENV_ERRORS as e:
            raise ConfigError(f"--{option}: {e}") from e


def available_memory(device: torch.device) -> int:
    """Bytes free for new allocations on `device`: CUDA's free memory; on the CPU psutil's `available` where
    installed (it counts reclaimable page cache), else the free pages that os.sysconf reports."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        import psutil
    except ImportError:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return psutil.virtual_memory().available


def state_bytes(state) -> int:
    """Bytes of a (nested tuple of) state tensor(s); None and empty tuples hold none."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    return sum(state_bytes(s) for s in state) if isinstance(state, (tuple, list)) else 0


def env_bytes(env_config) -> int:
    """Bytes one environment of `env_config` holds after a reset (Python and numpy allocations, by tracemalloc),
    measured on a fresh copy so that the imports of the first one do not count."""
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    env = make_env(env_config)
    env.reset(seed=0)
    size = tracemalloc.get_traced_memory()[0] - before
    if not tracing:
        tracemalloc.stop()
    env.close()
    return max(size, 0)


def environments_demand(env_config, count: int, what: str) -> tuple[int, str]:
    """(bytes, how they add up) of `count` environments of `env_config` (`what` says where the count comes from)."""
    per_env = env_bytes(env_config)
    return count * per_env, f"{what} x {per_env} B each, measured"


def check_demands(who: str, demands: dict[torch.device, list[tuple[int, str]]]) -> None:
    """ConfigError naming `who`, the total and its parts when the (bytes, how) parts on a device exceed the memory
    free there."""
    for where, parts in demands.items():
        need, free = sum(size for size, _ in parts), available_memory(where)
        if need > free:
            raise ConfigError(f"{who} would need about {need / 2**30:.1f} GiB on {where.type} "
                              f"({' + '.join(text for _, text in parts)}), more than the {free / 2**30:.1f} GiB "
                              "free there: lower those settings")


def check_memory(config: RunConfig, agent, obs_space: spaces.Space, action_space: spaces.Space) -> None:
    """ConfigError when what the run holds cannot fit in the memory free: the algorithm's buffers (`buffer_bytes`:
    rollouts or replay, one core state per environment) on the agent's device, the environments (training and
    evaluation side by side, or the final evaluation's) on the CPU. Called before those environments are made, so
    an impossible --ppo.num_envs is refused at once."""
    device = next(agent.parameters()).device
    per_state = state_bytes(agent.initial_state(1, device=torch.device("meta")))
    buffers, how = config.algo.buffer_bytes(spaces.flatdim(obs_space), action_space, per_state)
    num_envs, sets = config.algo.num_envs, config.env.eval_sets
    evaluating = min(config.eval.num_envs, config.eval.episodes) if sets and config.eval.every is not None else 0
    final = min(config.eval.num_envs, config.final_eval.episodes) if sets else 0
    what = (f"--{config.algorithm}.num_envs {num_envs} + {evaluating} evaluating environments" if evaluating else
            f"--{config.algorithm}.num_envs {num_envs} environments")
    if final > num_envs + evaluating:
        what = f"{final} environments of the final evaluation (--eval.num_envs, --final_eval.episodes)"
    demands = {device: [(buffers, how)]}
    demands.setdefault(torch.device("cpu"), []).append(
        environments_demand(config.env, max(num_envs + evaluating, final), what))
    check_demands(f"the {config.algorithm} run", demands)


def build(config: RunConfig):
    """The environments, agent and algorithm of `config` (seeded); ConfigError names what is wrong (buffers that
    cannot fit in memory too, before the environments are made). `train` validates the config first
    (`validate`, `check_env`): its range errors would surface here as crashes."""
    torch.manual_seed(config.seed)
    try:
        probe = make_env(config.env)  # the vector env's single spaces, without making num_envs environments
    except ENV_ERRORS as e:
        raise ConfigError(f"--env: {e}") from e
    obs_space, action_space = probe.observation_space, probe.action_space
    probe.close()
    try:
        agent = config.spec.make_agent(config.agent, config.algo, obs_space, action_space)
    except AGENT_ERRORS as e:
        raise ConfigError(f"--agent: {e}") from e
    agent.to(resolve_device(config.device))
    check_memory(config, agent, obs_space, action_space)
    try:
        envs = make_vector_env(config.env, config.algo.num_envs)
    except ENV_ERRORS as e:
        raise ConfigError(f"--env: {e}") from e
    return config.spec.algorithm(agent, envs, config.algo, seed=config.seed)


def set_threads(threads: int | None, device: torch.device) -> int:
    """Set torch's intra-op CPU threads and return their number: `threads` if given, else one for a CPU run (an
    RL agent's many small ops gain nothing from more, and on a machine shared with other work they collapse:
    about 1,100 against 26-69 environment steps per second for the paper-sized S5 agent, issue 27), else torch's
    default (a GPU run)."""
    if threads is None and device.type == "cpu":
        threads = 1
    if threads is not None:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def evaluate_sets(agent, config: RunConfig, final: bool = False) -> dict[str, dict]:
    """`run_episodes` on every evaluation set of config.env (seeded apart from training) as config.eval says ->
    statistics per set; `final`: as config.final_eval says, every episode kept."""
    how = config.final_eval if final else config.eval
    names = config.final_eval.sets if final and config.final_eval.sets is not None else list(config.env.eval_sets)
    num_envs = min(config.eval.num_envs, how.episodes)
    results = {}
    for name in names:
        envs = make_vector_env(config.env, num_envs, config.env.eval_sets[name])
        results[name] = run_episodes(agent, envs, how.episodes, how.deterministic, seed=EVAL_SEED + config.seed,
                                     keep=final)
        envs.close()
    return results


def progress_line(record: dict, log_keys: tuple[str, ...]) -> str:
    """One line per iteration: steps, training return, MMER, evaluation returns, the algorithm's key metrics."""
    ret, mmer = record.get("episodic_return", math.nan), record["mmer"]
    parts = [f"iter {record['iteration']:5d}", f"steps {record['steps']:9d}", f"return {ret:7.3f}",
             f"mmer {math.nan if mmer is None else mmer:7.3f}"]
    parts += [f"{name} {stats['return_mean']:.3f}" for name, stats in record.get("eval", {}).items()]
    parts += [f"{key} {record[key]:.4g}" for key in log_keys if key in record]
    return "  ".join(parts + [f"sps {record['sps']:6.0f}"])


def train(config: RunConfig, overwrite: bool = False, log: Callable[[str], None] | None = print) -> dict[str, Any]:
    """Run `config` -> summary (also in out_dir/summary.json); see the module docstring for the files written.
    Nothing is written (and no out_dir is touched) until the whole config has been validated."""
    out = Path(config.out_dir) if config.out_dir is not None else None
    validate(config)  # the options first, then the folder: each mistake is named before anything is written
    check_env(config)
    if out is not None:
        check_out_dir(out, overwrite)
    device = resolve_device(config.device)
    threads = set_threads(config.threads, device)
    algo = build(config)
    if log is not None:
        why = "as threads sets" if config.threads else f"the default on {device.type}"
        log(f"torch CPU threads: {threads} ({why}; --threads N changes it)")
    loaded = getattr(algo.agent, "core_model_config", None)
    if loaded is not None:  # --agent.core_init_from: the loaded backbone is the core, whatever agent.core says
        core = core_config_of(loaded)
        if log is not None:
            log(f"--agent.core_init_from {config.agent.core_init_from}: the core is that model's backbone "
                f"({describe_core(core)}), not agent.core ({describe_core(config.agent.core)}); config.yaml records "
                "the core built")
        config = replace(config, agent=replace(config.agent, core=core))
    agent = algo.agent
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for name in RUN_FILES:
            (out / name).unlink(missing_ok=True)
        remove_stale_temporaries(out)
        (out / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
        metrics = (out / "metrics.jsonl").open("w")
    evaluate_fn = (lambda: evaluate_sets(agent, config)) if config.env.eval_sets else None
    evaluating = evaluate_fn is not None and config.eval.every is not None
    best = -math.inf

    def save(name: str, record: dict) -> None:
        save_checkpoint(out / name, agent, config, iteration=record.get("iteration"), steps=record.get("steps"),
                        mmer=record.get("mmer"), best_score=best if best > -math.inf else None)

    def on_record(record: dict) -> None:
        nonlocal best
        if log is not None:
            log(progress_line(record, algo.LOG_KEYS))
        if out is None:
            return
        metrics.write(json.dumps(record) + "\n")
        metrics.flush()
        evals = record.get("eval")
        if not evaluating:
            score = record.get("episodic_return")
        else:
            score = next(iter(evals.values()))["return_mean"] if evals else None
        if score is not None and score > best:
            best = score
            save("best.pt", record)
        if record["iteration"] % config.checkpoint_every == 0:
            save("last.pt", record)

    summary = run_iterations(algo, config.eval.every, evaluate_fn, config.target_return, config.time_limit_s,
                             on_record)
    algo.envs.close()
    if config.final_eval.episodes:
        summary["final"] = evaluate_sets(agent, config, final=True)
        if log is not None:
            for name, stats in summary["final"].items():
                log(f"final {name}: return {stats['return_mean']:.3f} over {stats['episodes']} episodes")
    summary.update(algorithm=config.algorithm, env=config.env.name, memory=config.agent.memory, seed=config.seed,
                   device=str(next(agent.parameters()).device), parameters=sum(p.numel() for p in agent.parameters() if p.requires_grad))
    if out is not None:
        metrics.close()
        save("last.pt", summary["last"])
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
