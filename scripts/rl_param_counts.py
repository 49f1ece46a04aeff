"""Parameter counts of the Kalman-layer paper's baselines ("Uncertainty Representations in State-Space Layers for
Deep Reinforcement Learning under Partial Observability", 5.1) in the off-policy recurrent actor-critic.

    python scripts/rl_param_counts.py                 # the paper's table 1 sizes: E = 16, N = 128
    python scripts/rl_param_counts.py --d_state 32    # the CPU recipes' N

For each task column of table 1 (BestArm: actor [128], critic [256]; DMC / POPGym: [256, 256]
heads) it prints the trainable parameters of actor + twin critic (the target critic is a copy)
and the difference to vSSM+KF (E, N as given). Each other memory-based baseline gets the size
knob nearest that count, as the paper does for the transformer's d_ff: N for vSSM and vSSM+KF-u,
N spread over Mamba's channels, d_ff for vTransformer; GRU keeps N (as in the paper: its gates cost
~40% more). Matched baselines must land within --tolerance (10%): exit status 1 otherwise.
Oracle and Memoryless have no encoder and are listed for reference.
"""

from __future__ import annotations

import argparse
import sys

from gymnasium import spaces

from seqssm.rl.offpolicy import HistoryEncoderConfig, RACConfig, SACAgent

BASELINES = {"vSSM": "vssm", "vSSM+KF": "kalman", "vSSM+KF-u": "kalman_u", "Mamba": "mamba", "GRU": "gru",
             "vTransformer": "transformer", "Oracle": "none", "Memoryless": "none"}
TASKS = {  # column -> (observation space, action space, actor, critic, Oracle observation)
    "BestArm": (spaces.Box(-1, 1, (1,)), spaces.Discrete(3), [128], [256], spaces.Box(-1, 1, (2,))),
    "DMC (pendulum)": (spaces.Box(-1, 1, (3,)), spaces.Box(-1, 1, (1,)), [256, 256], [256, 256],
                       spaces.Box(-1, 1, (3,))),
}
KNOBS = {"vssm": "d_state", "kalman_u": "d_state", "mamba": "d_state", "transformer": "d_ff"}
CANDIDATES = range(8, 4097, 8)


def count(obs_space, act_space, actor, critic, **encoder) -> int:
    """Trainable parameters of the actor and twin critic of a SAC agent with HistoryEncoderConfig(**encoder)."""
    rac = RACConfig(encoder=HistoryEncoderConfig(**encoder), actor=actor, critic=critic)
    sac = SACAgent(obs_space, act_space, rac)
    return sum(p.numel() for m in (sac.actor, sac.critic) for p in m.parameters() if p.requires_grad)


def matched_size(target: int, obs, act, actor, critic, kind: str, d_model: int, d_state: int) -> tuple[dict, int]:
    """The encoder settings of `kind` whose count is nearest `target` (counts grow with the knob: bisection)."""
    knob = KNOBS[kind]
    base = {"kind": kind, "d_model": d_model, "d_state": d_state}
    sizes = list(CANDIDATES)
    lo, hi = 0, len(sizes) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if count(obs, act, actor, critic, **{**base, knob: sizes[mid]}) < target:
            lo = mid + 1
        else:
            hi = mid
    options = [{**base, knob: sizes[i]} for i in {max(lo - 1, 0), lo}]
    best = min(options, key=lambda o: abs(count(obs, act, actor, critic, **o) - target))
    return best, count(obs, act, actor, critic, **best)


def main(argv: list[str] | None = None) -> int:
    """Print the table; 0 if every matched baseline is within `--tolerance` of vSSM+KF, else 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d_model", type=int, default=16, help="embedding size E")
    parser.add_argument("--d_state", type=int, default=128, help="latent size N of vSSM+KF (and GRU)")
    parser.add_argument("--tolerance", type=float, default=0.10)
    args = parser.parse_args(argv)
    ok = True
    for task, (obs, act, actor, critic, oracle_obs) in TASKS.items():
        print(f"\n{task}: E = {args.d_model}, actor {actor}, critic {critic}")
        base = {"d_model": args.d_model, "d_state": args.d_state}
        ref = count(obs, act, actor, critic, kind="kalman", **base)
        for name, kind in BASELINES.items():
            if kind in KNOBS:
                enc, n = matched_size(ref, obs, act, actor, critic, kind, **base)
                setting = f"{KNOBS[kind]} {enc[KNOBS[kind]]}"
            else:
                n = count(oracle_obs if name == "Oracle" else obs, act, actor, critic, kind=kind, **base)
                setting = "no encoder" if kind == "none" else f"d_state {args.d_state}"
            rel = n / ref - 1
            matched = kind in KNOBS or kind == "kalman"
            ok &= not matched or abs(rel) <= args.tolerance
            flag = ("ok" if abs(rel) <= args.tolerance else "OUTSIDE TOLERANCE") if matched else "(not matched)"
            print(f"  {name:13s} {setting:14s} {n:9,d}  {rel:+7.1%}  {flag}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
