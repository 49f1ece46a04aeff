"""CPU training step of a Mamba-2 language model: seqssm's mamba2-ssd beside transformers' Mamba2ForCausalLM on its
torch path (the same weights, read from the folder seqssm writes), and beside seqssm's mamba-s6 at about the same
number of parameters.

    python scripts/bench_mamba2_cpu.py --out runs/bench_mamba2_cpu.json [--threads 1 --rounds 5]

One step: forward, cross-entropy on random targets, backward, AdamW. The contenders alternate within each round (the
order rotates), after one untimed warm-up step each; a row is the median over the rounds. Writes JSON and a markdown
table beside it (same name, .md).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F


def step_fn(model, logits_of, vocab: int, batch: int, length: int):
    """A no-argument training step of `model`; logits_of(model, ids) -> (batch, length, vocab)."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, length), generator=gen)
    targets = torch.randint(0, vocab, (batch, length), generator=gen)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        logits = logits_of(model, ids)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def contenders(args) -> dict:
    """name -> (model, step) of every contender, all in float32 on CPU."""
    from transformers import Mamba2ForCausalLM

    from seqssm.models import build

    torch.manual_seed(0)
    ssd = {"head_dim": args.head_dim, "chunk_size": args.chunk_size}
    mamba2 = build("mamba2-ssd", vocab_size=args.vocab, d_model=args.d_model, n_layers=args.layers,
                   d_state=args.d_state, dropout=0.0, block={"ssp": {"layer_kwargs": ssd}}).train()
    with tempfile.TemporaryDirectory() as folder:
        mamba2.save_pretrained(folder, format="hf")
        hf = Mamba2ForCausalLM.from_pretrained(folder).train()
    size = sum(p.numel() for p in mamba2.parameters())
    width = _s6_width(args, size)
    s6 = build("mamba-s6", vocab_size=args.vocab, d_model=width, n_layers=args.layers, d_state=16, dropout=0.0).train()
    own = lambda m, ids: m(ids)  # noqa: E731
    return {
        "seqssm mamba2-ssd": (mamba2, step_fn(mamba2, own, args.vocab, args.batch, args.length)),
        "transformers Mamba2 (torch path)": (hf, step_fn(hf, lambda m, ids: m(ids).logits, args.vocab, args.batch,
                                                          args.length)),
        f"seqssm mamba-s6 (d_model {width})": (s6, step_fn(s6, own, args.vocab, args.batch, args.length)),
    }


def _s6_width(args, size: int) -> int:
    """The multiple of 8 at which mamba-s6's parameter count comes closest to `size`: a bisection, since the
    count grows with the width (each candidate is a model built)."""
    low, high = 1, args.d_model // 2  # in steps of 8 channels
    while _s6_params(args, 8 * high) < size:
        high *= 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if _s6_params(args, 8 * middle) < size else (low, middle)
    return min((8 * low, 8 * high), key=lambda d: abs(_s6_params(args, d) - size))


def _s6_params(args, d_model: int) -> int:
    from seqssm.models import build

    model = build("mamba-s6", vocab_size=args.vocab, d_model=d_model, n_layers=args.layers, d_state=16, dropout=0.0)
    return sum(p.numel() for p in model.parameters())


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON file (and a .md beside it)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: no contention with other jobs)")
    p.add_argument("--rounds", type=int, default=5)
    for name, default in (("d_model", 256), ("layers", 4), ("d_state", 64), ("head_dim", 64), ("chunk_size", 64),
                          ("vocab", 256), ("batch", 8), ("length", 512)):
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int, default=default)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    entries = contenders(args)
    times = {name: [] for name in entries}
    for _, step in entries.values():
        step()  # warm-up: allocator, thread pools
    names = list(entries)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            entries[name][1]()
            times[name].append(time.perf_counter() - start)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n} {1e3 * t[-1]:.0f} ms" for n, t in times.items()),
              flush=True)
    rows = [{"contender": name, "parameters": sum(p.numel() for p in model.parameters()),
             "step_ms": round(1e3 * statistics.median(times[name]), 1),
             "times_ms": [round(1e3 * t, 1) for t in times[name]]} for name, (model, _) in entries.items()]
    result = {"settings": vars(args), "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
              "rows": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"CPU training step, batch {args.batch} x L {args.length}, {args.layers} layers, {args.threads} torch "
             f"thread(s), float32, medians of {args.rounds} alternated rounds (torch {torch.__version__}).", "",
             "| contender | parameters | step ms |", "|---|---|---|"]
    lines += [f"| {r['contender']} | {r['parameters']:,} | {r['step_ms']} |" for r in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return result


if __name__ == "__main__":
    main()
