"""torch.compile against eager, per model family: graph breaks, compile time and training-step time.

    python scripts/bench_compile.py --device cpu --out runs/bench_compile              # every family
    python scripts/bench_compile.py --families mamba-s6 --out runs/bench_compile_s6     # the headline row
    python scripts/bench_compile.py --device cuda --out runs/bench_compile_cuda
    python scripts/bench_compile.py --breaks-only --out runs/graph_breaks               # graph breaks only (fast)

Families: the named models of `seqssm.models.build` (simple-s4, simple-s4d, mamba-s4, mamba-s4d, mamba-s6 and
their -bi / -rope variants, mamba2-ssd and mamba2-ssd-bi) and the RL cores core-s5 and core-mingru
(`seqssm.rl.core`, residual blocks). For each:

1. graph breaks: `torch._dynamo.explain` on a tiny copy (d_model 16, 2 layers, batch 2, L 32) on --device: a
   model's forward on token ids, a core's `scan` with resets and an initial state. It calls only public functions, so it measures
   other checkouts too: PYTHONPATH=path/to/checkout python scripts/bench_compile.py --breaks-only ...
2. unless --breaks-only: a training step (forward, loss, backward, AdamW step) at --d-model, --n-layers, --batch,
   --length, eager and with the module compiled by inductor (fullgraph=True; AOTAutograd compiles its backward;
   the optimizer step stays eager in both, as `seqssm fit --model.init_args.compile true` runs it). Models read
   --d-input numeric channels and classify into 10 classes (mean pooling, cross-entropy); cores take (batch, L,
   d_model) inputs with resets at 5% of the steps, and the loss is the mean squared output. compile_s is the wall
   time of the first compiled step (tracing, compiling and running it), eager_first_s that of the first eager one.
   Then --repeats rounds each run one eager and one compiled step, in an order swapped every round; step times
   are medians over the rounds and speedup = eager / compiled. Both copies start from the same weights and batch:
   loss_diff compares their first losses; graphs counts the graphs dynamo built (1: no break, no recompile).

CPU runs use --threads torch threads (default 1), CUDA is synchronised around each timed step. A family that fails
is a row with its error. Output: DIR/bench_compile.json and DIR/bench_compile.md, rewritten after every family.
The exit status is 1 where a family failed or its graph broke.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch._dynamo
import torch.nn.functional as F
from torch._dynamo.utils import counters

MODEL_FAMILIES = (
    "simple-s4", "simple-s4d", "simple-s4-rope", "simple-s4d-rope",
    "mamba-s4", "mamba-s4d", "mamba-s6", "mamba-s4-bi", "mamba-s4d-bi", "mamba-s6-bi",
    "mamba-s4-rope", "mamba-s4d-rope", "mamba-s6-rope", "mamba2-ssd", "mamba2-ssd-bi",
)
CORE_FAMILIES = ("core-s5", "core-mingru")
CLASSES = 10


def build_family(name: str, d_model: int, n_layers: int, **inputs):
    """The module of family `name`: a SequenceModel (inputs: vocab_size= or d_input=) or an RL core."""
    if name.startswith("core-"):
        from seqssm.rl.core import CoreConfig, build_core

        return build_core(CoreConfig(layer=name[len("core-"):], d_model=d_model, n_layers=n_layers))
    from seqssm.models import build

    return build(name, n_classes=CLASSES, d_model=d_model, n_layers=n_layers, dropout=0.0, **inputs)


def core_inputs(batch: int, length: int, d_model: int, device) -> tuple:
    """A core's scan arguments: inputs (batch, L, d_model), resets at 5% of the steps."""
    return torch.randn(batch, length, d_model, device=device), torch.rand(batch, length, device=device) < 0.05


def graph_breaks(name: str, device: torch.device) -> dict:
    """Graph breaks that `torch._dynamo.explain` finds in the tiny model's forward (a core's scan) on `device`, with
    reasons: on CUDA the ops take other backends (Triton, the CUDA peers), each a custom op of its own."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    module = build_family(name, 16, 2, vocab_size=CLASSES).to(device)
    if name.startswith("core-"):
        x, resets = core_inputs(2, 32, 16, device)
        explanation = torch._dynamo.explain(module.scan)(x, module.initial_state(2, device=device), resets)
    else:
        explanation = torch._dynamo.explain(module)(torch.randint(0, CLASSES, (2, 32), device=device))
    reasons = sorted({str(b.reason).splitlines()[0] for b in explanation.break_reasons})
    return {"graph_breaks": explanation.graph_break_count, "break_reasons": reasons}


def training_step(name: str, module, optimizer, batch: tuple):
    """One step: zero the gradients, loss, backward, AdamW; returns the loss. `module` is eager or compiled."""
    optimizer.zero_grad(set_to_none=True)
    if name.startswith("core-"):
        x, resets, state = batch
        loss = module(x, state, resets)[0].square().mean()
    else:
        x, y = batch
        loss = F.cross_entropy(module(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def timed(fn, device: torch.device) -> tuple[float, torch.Tensor]:
    """(seconds, result) of fn(), synchronised on CUDA."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, out


def step_times(name: str, args, device: torch.device) -> dict:
    """Compile time and median step times of the family's training step, compiled beside eager."""
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    eager = build_family(name, args.d_model, args.n_layers, d_input=args.d_input).to(device)
    compiled_copy = copy.deepcopy(eager)
    if name.startswith("core-"):
        x, resets = core_inputs(args.batch, args.length, args.d_model, device)
        batch = (x, resets, eager.initial_state(args.batch, device=device))
        modules = {"eager": eager.scan, "compiled": torch.compile(compiled_copy.scan, fullgraph=True)}
    else:
        batch = (torch.randn(args.batch, args.length, args.d_input, device=device),
                 torch.randint(0, CLASSES, (args.batch,), device=device))
        modules = {"eager": eager, "compiled": torch.compile(compiled_copy, fullgraph=True)}
    optimizers = {"eager": torch.optim.AdamW(eager.parameters(), lr=1e-3),
                  "compiled": torch.optim.AdamW(compiled_copy.parameters(), lr=1e-3)}

    def run(kind):
        return timed(lambda: training_step(name, modules[kind], optimizers[kind], batch), device)

    eager_first, eager_loss = run("eager")
    compile_s, compiled_loss = run("compiled")
    times = {"eager": [], "compiled": []}
    for i in range(args.repeats):
        for kind in (("eager", "compiled") if i % 2 == 0 else ("compiled", "eager")):
            times[kind].append(run(kind)[0])
    eager_s, compiled_s = statistics.median(times["eager"]), statistics.median(times["compiled"])
    return {
        "compile_s": compile_s, "eager_first_s": eager_first, "eager_step_s": eager_s, "compiled_step_s": compiled_s,
        "speedup": eager_s / compiled_s, "loss_diff": abs(float(eager_loss) - float(compiled_loss)),
        "graphs": counters["stats"]["unique_graphs"],
    }


def markdown(result: dict) -> str:
    """The rows as a markdown table, the settings above it."""
    s = result["settings"]
    lines = [f"torch {result['environment']['torch']} on {result['environment']['device']}, "
             f"{s['threads']} thread(s); step: d_model {s['d_model']}, {s['n_layers']} layers, batch {s['batch']}, "
             f"L {s['length']}; medians of {s['repeats']} alternated rounds", "",
             "| family | graph breaks | compile s | eager first s | eager step s | compiled step s | speedup | graphs |",
             "|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        if "error" in row:
            lines.append(f"| {row['family']} | {row.get('graph_breaks', '')} | error: {row['error']} | | | | | |")
            continue
        cells = [row.get(k) for k in ("compile_s", "eager_first_s", "eager_step_s", "compiled_step_s")]
        numbers = " | ".join("" if v is None else f"{v:.3f}" for v in cells)
        speedup = f"{row['speedup']:.2f}x" if "speedup" in row else ""
        lines.append(f"| {row['family']} | {row['graph_breaks']} | {numbers} | {speedup} | {row.get('graphs', '')} |")
    return "\n".join(lines) + "\n"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--out", type=Path, required=True, help="folder for bench_compile.json and .md")
    parser.add_argument("--families", nargs="+", default=[*MODEL_FAMILIES, *CORE_FAMILIES])
    parser.add_argument("--breaks-only", action="store_true", help="count graph breaks, time nothing")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--n-layers", type=int, default=2)
    parser.add_argument("--length", type=int, default=784)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--d-input", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch threads on CPU")
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is visible to torch")
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    environment = {"torch": torch.__version__, "python": platform.python_version(),
                   "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
                   or platform.machine()}
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "families")}
    result = {"environment": environment, "settings": {**settings, "threads": torch.get_num_threads()}, "rows": []}
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.families:
        row = {"family": name}
        try:
            row.update(graph_breaks(name, device))
            if not args.breaks_only:
                row.update(step_times(name, args, device))
        except Exception as err:  # a family that fails is reported, the others still run
            row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
        # Written after every family: a run stopped by a time limit keeps what it measured.
        (args.out / "bench_compile.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "bench_compile.md").write_text(markdown(result))
    return result


def failed(result: dict) -> bool:
    """A family failed or broke its graph."""
    return any("error" in row or row.get("graph_breaks") for row in result["rows"])


if __name__ == "__main__":
    sys.exit(1 if failed(main()) else 0)
