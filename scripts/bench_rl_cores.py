"""Recurrent PPO wall time per memory core for the same number of environment steps, and rollout step
latency against episode length.

    python scripts/bench_rl_cores.py --out runs/rl/bench_rl_cores.json
    python scripts/bench_rl_cores.py --cores s5 gru --unroll 1024 --num_envs 16 --updates 2 --repeats 3

Timing: for each core, `repeats` fresh runs (same seed, same PPO settings; repeats interleaved across
cores) of one short warm-up update and then `updates` timed updates; the rollout (`collect`: act + env
step) and the learning phase (`update`: scans over the stored rollout) are timed apart, and the
median over runs is reported with each core's ratio to S5. van Gelooven 2025 thesis, table 5.1 has a
GRU run take 3.0x as long as an S5 run, with the PPO shape of its table 4.2 (unroll 1024, 30 epochs;
8 minibatches per Lu et al. 2023, table 3), which are the defaults here; the number of environments (64
there) and the widths are cut to CPU size. `--unroll 128 --epochs 4 --minibatches 4` is the shape
of the CPU recipes under rl/ (seqssm/recipes/rl/), where rollouts take a larger share of the time.

Latency: an agent steps through one long episode (no resets, random observations) and the mean
time of `act` is taken in windows at growing episode lengths. A fixed-size state makes it flat:
`flatness` = last window / first window.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

import torch

from seqssm.rl import PPO, AgentConfig, CoreConfig, PPOConfig, build_agent, make_vector_env


def agent_config(core: str, d_model: int, d_state: int | None) -> AgentConfig:
    # (min)GRU states are d_hidden = d_model wide; the SSMs take d_state as in the recipes
    state = None if core in ("gru", "mingru") else d_state
    return AgentConfig(core=CoreConfig(layer=core, d_model=d_model, d_state=state, n_layers=1), encoder=[d_model],
                       actor=[d_model], critic=[d_model])


def time_training(core: str, args) -> dict:
    """One run: a short warm-up update, then `updates` timed ones -> seconds in collect and in update."""
    torch.manual_seed(args.seed)
    ppo = PPOConfig(num_envs=args.num_envs, unroll=args.unroll, epochs=args.epochs, minibatches=args.minibatches,
                    lr=1e-3)
    envs = make_vector_env(args.env, args.num_envs)
    agent = build_agent(agent_config(core, args.d_model, args.d_state), envs.single_observation_space,
                        envs.single_action_space)
    warm = PPO(agent, envs, dataclasses.replace(ppo, unroll=8, epochs=1), seed=args.seed)  # kernels, thread pools
    warm.update(warm.collect())
    trainer = PPO(agent, envs, ppo, seed=args.seed)
    collect_s = update_s = 0.0
    for _ in range(args.updates):
        t0 = time.perf_counter()
        rollout = trainer.collect()
        t1 = time.perf_counter()
        trainer.update(rollout)
        collect_s, update_s = collect_s + t1 - t0, update_s + time.perf_counter() - t1
    envs.close()
    return {"collect_s": collect_s, "update_s": update_s, "total_s": collect_s + update_s}


@torch.no_grad()
def step_latency(core: str, args) -> dict:
    """Mean `act` latency (ms) over `window` steps ending at each of args.lengths, one episode, batch num_envs."""
    torch.manual_seed(args.seed)
    envs = make_vector_env(args.env, 1)
    agent = build_agent(agent_config(core, args.d_model, args.d_state), envs.single_observation_space,
                        envs.single_action_space).eval()
    obs = torch.randn(args.num_envs, envs.single_observation_space.shape[0])
    state, window, ms, t = agent.initial_state(args.num_envs), args.window, {}, 0
    for length in sorted(args.lengths):
        while t < length - window:
            state, t = agent.act(obs, state).state, t + 1
        start = time.perf_counter()
        for _ in range(window):
            state = agent.act(obs, state).state
        t += window
        ms[length] = 1e3 * (time.perf_counter() - start) / window
    state_numbers = sum(s.numel() * (2 if s.is_complex() else 1) for s in _leaves(state)) // args.num_envs
    first, last = ms[min(ms)], ms[max(ms)]
    return {"ms_per_step": ms, "flatness": last / first, "state_numbers_per_env": state_numbers}


def _leaves(state):
    if isinstance(state, (tuple, list)):
        for s in state:
            yield from _leaves(s)
    else:
        yield state


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cores", nargs="+", default=["s5", "s6", "mingru", "gru"])
    parser.add_argument("--env", default="RepeatFirstEasy")
    parser.add_argument("--num_envs", type=int, default=16)
    parser.add_argument("--unroll", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--minibatches", type=int, default=8)
    parser.add_argument("--d_model", type=int, default=64)
    parser.add_argument("--d_state", type=int, default=32)
    parser.add_argument("--updates", type=int, default=1, help="timed updates per run (after one warm-up)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 1024, 4096, 16384],
                        help="episode lengths at which step latency is measured")
    parser.add_argument("--window", type=int, default=64, help="steps averaged per latency point")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/rl/bench_rl_cores.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    env_steps = args.updates * args.num_envs * args.unroll
    result = {"settings": vars(args), "env_steps_timed": env_steps, "torch_threads": torch.get_num_threads(),
              "cores": {}}
    # Repeats go round the cores, so that a burst of load from other processes hits every core alike.
    runs = {core: [] for core in args.cores}
    for _ in range(args.repeats):
        for core in args.cores:
            runs[core].append(time_training(core, args))
    for core in args.cores:
        timing = {k: statistics.median(r[k] for r in runs[core]) for k in ("collect_s", "update_s", "total_s")}
        timing["env_steps_per_s"] = env_steps / timing["total_s"]
        timing["runs_total_s"] = [r["total_s"] for r in runs[core]]
        result["cores"][core] = {"timing": timing, "latency": step_latency(core, args)}
        lat = result["cores"][core]["latency"]
        print(f"{core:7s} total {timing['total_s']:7.2f}s (collect {timing['collect_s']:6.2f}s, update "
              f"{timing['update_s']:6.2f}s) for {env_steps} steps; act latency "
              + " ".join(f"{k}:{v:.3f}ms" for k, v in lat["ms_per_step"].items()) + f"  flatness {lat['flatness']:.2f}",
              flush=True)
    if "s5" in result["cores"]:
        base = result["cores"]["s5"]["timing"]
        for core, r in result["cores"].items():
            r["timing"]["total_vs_s5"] = r["timing"]["total_s"] / base["total_s"]
            r["timing"]["update_vs_s5"] = r["timing"]["update_s"] / base["update_s"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
