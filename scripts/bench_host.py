"""Host time of the Triton scan ops and of a Mamba stack without their kernels: what a call costs the CPU before and
around its launches.

At an RL update's shapes (S5's PPO minibatch: batch 8 x 1024 steps x 128 complex modes) a scan's kernels take
microseconds, so on a GPU the call's time is mostly the host's: argument checks, the backend choice, the custom
op's dispatch and autograd, the launcher's strides and flags. This script runs the public ops on CPU tensors routed
to the Triton backend (TRITON_INTERPRET=1) with every kernel launch swallowed (`seqssm.ops.triton_loader.recording`),
so what it times is that host work, with the few small torch operations around the kernels (allocations, the
gradient's sums) computed on the CPU at 64 steps rather than queued on a GPU. Three modes (`MODES`): forward
alone (no autograd), forward with autograd recording its graph (a training step's forward), and forward +
backward (a sum's gradient to every input); medians of --rounds rounds of --calls calls, one torch thread.

The last case is a whole model: mamba-130m's stack of 24 Mamba blocks (RMS norms, fp32 residual, tied head) on 16
tokens, at stand-in widths (d_model 64) so that the CPU's arithmetic stays small beside the host work, which does
not depend on the widths. A layer's host time is what a GPU waits for wherever the layer's kernels take less: in a
training step's forward, and in every step of an RL update. The Triton launcher's own time (argument binding,
Triton's launch call) is not in it: the launches are swallowed before it.

    python scripts/bench_host.py --out runs/bench_host.json

Compare two trees by running it in each, alternated (the A/B of a change); times are per call, in microseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from unittest import mock

import torch


def cases():
    """name -> (forward(), its inputs that take a gradient, calls per round or None for --calls): the public ops at
    small RL-update shapes, and a whole stack."""
    from seqssm.ops import linear_scan, selective_scan

    g = torch.Generator().manual_seed(0)
    b, L, modes = 8, 64, 128  # S5's PPO minibatch; L does not change the host's work
    a = (0.99 * torch.exp(1j * torch.rand(1, 1, modes, generator=g))).to(torch.complex64).requires_grad_()
    drive = torch.randn(b, L, modes, dtype=torch.complex64, generator=g).requires_grad_()
    h0 = torch.randn(b, modes, dtype=torch.complex64, generator=g).requires_grad_()
    resets = torch.rand(b, L, generator=g) < 1 / 64
    d, n = 128, 16  # an S6 RL core's update
    u, delta, z = (torch.randn(b, d, L, generator=g).requires_grad_() for _ in range(3))
    B, C = (torch.randn(b, n, L, generator=g).requires_grad_() for _ in range(2))
    A = (-torch.rand(d, n, generator=g) - 0.5).requires_grad_()
    D, bias = (torch.randn(d, generator=g).requires_grad_() for _ in range(2))
    return {
        "linear_scan S5 PPO (resets, h0)": (lambda: linear_scan(a, drive, h0, resets, backend="triton"),
                                            [a, drive, h0], None),
        "selective_scan RL core (D, z, bias)": (lambda: selective_scan(u, delta, A, B, C, D, z, bias, True,
                                                                       backend="triton"),
                                                [u, delta, z, B, C, A, D, bias], None),
        **stack_case(),
    }


# Forward alone (no autograd), forward with autograd recording its graph (a training step's forward), forward +
# backward: the order in which each case is timed.
MODES = ("forward", "forward (autograd)", "forward + backward")
_STACK_CALLS = 10  # calls per round of the whole stack (about 60 ms each, forward + backward, on a 2-core CPU)


def stack_case():
    """{name: (forward() -> loss, the parameters)} for mamba-130m's 24 Mamba blocks at stand-in widths."""
    import torch.nn.functional as F

    from seqssm.models import SequenceModel, model_config

    torch.manual_seed(0)
    config = model_config("mamba-s6", vocab_size=256, d_model=64, n_layers=24, d_state=16, expand=2, d_conv=4,
                          dropout=0.0, rms_norm=True, norm_eps=1e-5, residual_in_fp32=True, tie_embeddings=True)
    model = SequenceModel(config)
    ids, targets = torch.randint(0, 256, (1, 16)), torch.randint(0, 256, (1, 16))

    def loss():  # main() sets SEQSSM_BACKEND=triton: the model's ops take the Triton backend
        logits = model(ids)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return {"mamba-130m stack, 24 layers, 1 x 16 tokens": (loss, list(model.parameters()), _STACK_CALLS)}


def time_calls(fn, calls: int, rounds: int) -> float:
    """Median over rounds of the mean microseconds per call, after one untimed round."""
    per_round = []
    for r in range(rounds + 1):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if r:
            per_round.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(per_round)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls timed together")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls and --rounds must be >= 1")
    from seqssm.ops.triton_loader import recording

    torch.set_num_threads(1)
    rows = []
    # CPU tensors go to the Triton backend under TRITON_INTERPRET=1 (the stack's through SEQSSM_BACKEND), and
    # `recording` swallows every launch.
    environment = {"TRITON_INTERPRET": "1", "SEQSSM_BACKEND": "triton"}
    with mock.patch.dict(os.environ, environment), recording(lambda *_, **__: None):
        for name, (forward, inputs, calls) in cases().items():
            def no_grad():
                with torch.no_grad():
                    forward()

            def recorded():  # a training step's forward: autograd records the graph
                forward()

            def with_grad():
                out = forward()
                torch.autograd.grad((out.real if out.is_complex() else out).sum(), inputs)

            for mode, fn in zip(MODES, (no_grad, recorded, with_grad)):
                per_call = time_calls(fn, min(calls or args.calls, args.calls), args.rounds)
                rows.append({"op": name, "mode": mode, "us_per_call": round(per_call, 1)})
                print(json.dumps(rows[-1]), flush=True)
    result = {"torch": torch.__version__, "calls": args.calls, "rounds": args.rounds, "rows": rows}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
