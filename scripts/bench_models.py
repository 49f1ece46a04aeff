"""Whole models side by side: seqssm beside mamba_ssm, transformers and the S4 authors' S4D, one process.

    python scripts/bench_models.py --device cuda --out runs/bench_models          # mamba-130m widths
    python scripts/bench_models.py --device cpu --size tiny --out runs/bench_tiny  # every row, in seconds

Three parts. In each, every contender first runs --warmup times; then --rounds rounds follow, in which each
contender (in an order rotated every round) runs --iters times, timed together; a row gives the median over the
rounds. CUDA is synchronised around each timed run.

1. train: one training step (forward, cross-entropy on random targets, backward, AdamW step) of a Mamba-1 language
   model (130m: d_model 768, 24 layers, vocabulary 50280, a multiple of mamba_ssm's padding of 8, d_state 16,
   expand 2, d_conv 4, the head tied to the embedding), bf16 autocast with float32 parameters on CUDA, float32 on
   CPU. Contenders, all holding the same initial weights (one seqssm model, written as a Hugging Face folder and
   read by each): seqssm (`backend="auto"`: mamba_ssm's and causal_conv1d's kernels where they import, else
   Triton); seqssm with SEQSSM_BACKEND=triton; mamba_ssm's MambaLMHeadModel; transformers' MambaForCausalLM with
   its CUDA kernels, and on its torch path (every kernel function of its Mamba module swapped for the torch function
   it wraps, see `hf_torch_path`). The torch path keeps every step's state for the backward and loops over time in
   Python, so it runs at its own shorter length (--torch-path-length), one warm-up and one step per round, beside
   seqssm at that length. tokens/s = batch x length / step time. peak
   MB = the peak memory the step allocates above what was live before it, plus what the contender keeps between
   steps (parameters and optimizer state): what it would need alone.
2. s4d: the same training step (float32; both are written for it) of seqssm's `simple-s4d` classifier beside a
   stack of the S4 authors' minimal S4D module (Gu, Goel, Ré et al., state-spaces/s4, models/s4/s4d.py, read
   from --s4-peer and never shipped with seqssm) in their example.py backbone (linear encoder, post-norm residual
   blocks, mean pooling, linear decoder), at the same widths; no dropout. Their output projection is a 1x1
   convolution, seqssm's an nn.Linear, and torch's defaults run float32 convolutions on TF32 tensor cores but
   float32 matrix products in IEEE float32; so on CUDA both run once with neither on TF32 ("float32") and once with
   both ("tf32"), each row naming its precision (`float32_products`).
3. generate: greedy generation of --new-tokens tokens after a --prompt-token prompt, at each of --gen-batches, in
   --gen-dtype (default float32, so that tokens can be compared): seqssm's `generate`, eager and with
   `cuda_graph=True`; mamba_ssm's `generate(cg=True)` (its CUDA-graph decoding); transformers' `generate` with its
   kernels (on CPU, where it has none, on its torch path). One call per round, after a warm-up call of 3 new tokens
   (mamba_ssm: of all, since it records its graph for one maximum length); both CUDA-graph contenders record their
   graph in the warm-up and replay it in the timed calls. tokens/s = batch x new tokens / the
   whole call (prompt included). Each row also gives the first step at which its tokens leave seqssm's eager ones
   (none: identical).

A contender that cannot run (a package that does not import, no CUDA, out of memory) is a row with its error.
Output: DIR/bench_models.json and DIR/bench_models.md.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import inspect
import json
import os
import re
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

REPO = Path(__file__).resolve().parents[1]
START = time.perf_counter()

SIZES = {
    "130m": dict(d_model=768, n_layers=24, vocab_size=50280, d_state=16, batch=8, length=2048, torch_path_length=128,
                 prompt=128, new_tokens=256, gen_batches=[1, 16],
                 s4d=dict(d_model=256, n_layers=4, d_state=64, batch=64, length=1024, d_input=3, n_classes=10)),
    "tiny": dict(d_model=32, n_layers=2, vocab_size=512, d_state=8, batch=2, length=32, torch_path_length=32,
                 prompt=8, new_tokens=8, gen_batches=[1, 2],
                 s4d=dict(d_model=16, n_layers=2, d_state=8, batch=2, length=64, d_input=3, n_classes=10)),
}
# The functions of transformers' Mamba module that bind mamba_ssm / causal_conv1d when they import (transformers 5).
HF_KERNEL_FUNCTIONS = ("mamba_inner_fn", "causal_conv1d_fn", "causal_conv1d_update", "mamba_selective_scan",
                       "mamba_selective_state_update")
SEQSSM, SEQSSM_TRITON, MAMBA_SSM = "seqssm", "seqssm (SEQSSM_BACKEND=triton)", "mamba_ssm"
HF_KERNELS, HF_TORCH = "transformers (CUDA kernels)", "transformers (torch path)"
SEQSSM_GRAPH = "seqssm (cuda_graph=True)"
S4D_SEQSSM, S4D_PEER = "seqssm simple-s4d", "S4 authors' S4D (example.py backbone)"


def log(message: str) -> None:
    """A progress line, with the seconds since the script started."""
    print(f"[bench_models {time.perf_counter() - START:6.1f}s] {message}", flush=True)


def error_text(err: BaseException) -> str:
    """One line naming the error, at most 300 characters."""
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text if len(text) <= 300 else text[:297] + "..."


def free_memory() -> None:
    """Drop unreferenced tensors and hand CUDA's cached blocks back, so that the next contender starts clean."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def needs_cuda(device: torch.device, what: str) -> None:
    """Refuse `what` off CUDA, with a one-line reason."""
    if device.type != "cuda":
        raise RuntimeError(f"{what} needs a CUDA device (this run: {device})")


# ------------------------------------------------------------------------------------- timing side by side


def compete(entries: dict, device: torch.device, warmup: int, rounds: int, iters: int,
            warm: dict | None = None) -> dict[str, dict]:
    """entries: name -> a no-argument callable, or the error text of a contender that could not be built. Each
    callable runs `warmup` times (or warm[name], a shorter call, does), then in each of `rounds` rounds (the order
    rotated every round) `iters` times, timed together. -> name -> {"seconds": per call, one per round,
    "peak_extra": bytes allocated above what was live before (CUDA), one per round, "error": the text of its
    failure or None}."""
    results = {name: {"seconds": [], "peak_extra": [], "error": fn if isinstance(fn, str) else None}
               for name, fn in entries.items()}
    warm = warm or {}

    def run(name, times, fn=None):
        try:
            for _ in range(times):
                (fn or entries[name])()
            return True
        except Exception as err:  # a failing contender is a row, not the end of the benchmark
            results[name]["error"] = error_text(err)
        free_memory()
        return False

    for name in entries:
        if results[name]["error"] is None:
            log(f"  warm-up: {name}")
            run(name, warmup, warm.get(name))
    names = list(entries)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if results[name]["error"] is not None:
                continue
            if device.type == "cuda":
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
                base = torch.cuda.memory_allocated(device)
            start = time.perf_counter()
            if not run(name, iters):
                continue
            if device.type == "cuda":
                torch.cuda.synchronize(device)
                results[name]["peak_extra"].append(torch.cuda.max_memory_allocated(device) - base)
            results[name]["seconds"].append((time.perf_counter() - start) / iters)
        log(f"  round {r + 1}/{rounds}: " + ", ".join(
            f"{n} {1e3 * res['seconds'][-1]:.1f} ms" for n, res in results.items()
            if res["error"] is None and res["seconds"]))
    return results


def resident_bytes(*objects) -> int:
    """Bytes of the distinct tensors that modules (parameters, buffers) and optimizers (state) keep between steps."""
    seen, total = set(), 0
    for obj in objects:
        if isinstance(obj, nn.Module):
            tensors = [*obj.parameters(), *obj.buffers()]
        else:
            tensors = [t for state in obj.state.values() for t in state.values() if torch.is_tensor(t)]
        for t in tensors:
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()
    return total


def training_rows(part: str, results: dict, shapes: dict, resident: dict) -> list[dict]:
    """Rows of a training part: name -> (batch, length) in `shapes`, kept bytes in `resident`."""
    rows = []
    for name, res in results.items():
        batch, length = shapes[name]
        row = {"part": part, "contender": name, "batch": batch, "length": length, "step_ms": None,
               "tokens_per_s": None, "peak_mb": None, "error": res["error"]}
        if res["error"] is None:
            seconds = statistics.median(res["seconds"])
            row.update(step_ms=1e3 * seconds, tokens_per_s=batch * length / seconds)
            if res["peak_extra"]:
                row["peak_mb"] = (statistics.median(res["peak_extra"]) + resident.get(name, 0)) / 2**20
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------- the contenders


def seqssm_lm_config(size: dict):
    """The seqssm config of a Mamba-1 LM at `size`'s widths, set as mamba_ssm's MambaLMHeadModel defaults."""
    from seqssm.models import model_config

    return model_config("mamba-s6", vocab_size=size["vocab_size"], d_model=size["d_model"], n_layers=size["n_layers"],
                        d_state=size["d_state"], expand=2, d_conv=4, dropout=0.0, rms_norm=True, norm_eps=1e-5,
                        residual_in_fp32=True, tie_embeddings=True, pad_vocab_size_multiple=8)


def mamba_ssm_model(folder: Path, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """mamba_ssm's MambaLMHeadModel with the weights of the Hugging Face folder `folder` (mapped by seqssm's tables)."""
    needs_cuda(device, "mamba_ssm")
    from mamba_ssm.models.config_mamba import MambaConfig
    from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel

    from seqssm.models import SequenceModel

    ours = SequenceModel.from_pretrained(folder)
    c, block = ours.config, ours.config.block
    config = MambaConfig(d_model=c.d_model, n_layer=c.n_layers, vocab_size=c.vocab_size, d_intermediate=0,
                         ssm_cfg={"layer": "Mamba1", "d_state": block.ssp.d_state, "d_conv": block.d_conv,
                                  "expand": block.expand},
                         rms_norm=block.rms_norm, residual_in_fp32=block.residual_in_fp32, fused_add_norm=True,
                         pad_vocab_size_multiple=c.pad_vocab_size_multiple, tie_embeddings=c.tie_embeddings)
    model = MambaLMHeadModel(config, device=device, dtype=torch.float32)
    model.load_state_dict(mamba_ssm_weights(ours))
    return model.to(dtype)


def mamba_ssm_weights(ours: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict of seqssm's LM `ours` under mamba_ssm's MambaLMHeadModel keys (seqssm's own loading tables)."""
    from seqssm.models.formats import mamba_ssm as layout
    from seqssm.models.formats.mamba_lm import external_keys

    own = ours.state_dict()
    names = external_keys(own, layout.TOP_KEYS, ours.config)
    return {names[k]: v for k, v in own.items()}


def hf_kernel_binding() -> dict[str, str]:
    """transformers' Mamba function name -> the module of the implementation it calls (mamba_ssm..., causal_conv1d...,
    or transformers' own modeling_mamba for its torch function; "unknown" if not found), read from the wrapper
    transformers built at import."""
    import transformers.models.mamba.modeling_mamba as mm

    out = {}
    for name in HF_KERNEL_FUNCTIONS:
        fn, found = getattr(mm, name, None), None
        if fn is None:
            raise RuntimeError(f"transformers' modeling_mamba has no {name}: this script knows transformers 5's Mamba")
        while fn is not None and found is None:
            found = inspect.getclosurevars(fn).nonlocals.get("implementation") if fn.__closure__ else None
            fn = getattr(fn, "__wrapped__", None)
        out[name] = getattr(found, "__module__", "unknown")
    return out


def check_hf_kernels(device: torch.device) -> None:
    """Refuse transformers' kernel path unless every kernel function of its Mamba is bound to a CUDA package."""
    import transformers.models.mamba.modeling_mamba as mm

    needs_cuda(device, "transformers' kernel path")
    not_kernels = {n: m for n, m in hf_kernel_binding().items() if m in (mm.__name__, "unknown")}
    if not_kernels:
        raise RuntimeError(f"transformers' Mamba calls {not_kernels} (mamba_ssm / causal_conv1d did not import when "
                           "transformers loaded its Mamba, or this transformers binds kernels another way)")


@contextlib.contextmanager
def hf_torch_path():
    """transformers' Mamba on its torch path while inside: each function of HF_KERNEL_FUNCTIONS, which transformers
    binds at import to mamba_ssm / causal_conv1d when they import, swapped for the torch function it wraps."""
    import transformers.models.mamba.modeling_mamba as mm

    saved = {name: getattr(mm, name) for name in HF_KERNEL_FUNCTIONS}
    plain = {name: inspect.unwrap(fn) for name, fn in saved.items()}
    foreign = [name for name, fn in plain.items() if fn.__module__ != mm.__name__]
    if foreign:
        raise RuntimeError(f"cannot find transformers' torch functions behind {foreign}")
    try:
        for name, fn in plain.items():
            setattr(mm, name, fn)
        yield
    finally:
        for name, fn in saved.items():
            setattr(mm, name, fn)


@contextlib.contextmanager
def seqssm_backend(name: str):
    """SEQSSM_BACKEND=name while inside (seqssm's ops read it at every call)."""
    with mock.patch.dict(os.environ, {"SEQSSM_BACKEND": name}):
        yield


def load_contenders(builders: dict) -> dict:
    """name -> builder() or the error text of its failure."""
    out = {}
    for name, build in builders.items():
        log(f"building {name}")
        try:
            out[name] = build()
        except Exception as err:
            out[name] = error_text(err)
            free_memory()
    return out


def write_weights(size: dict, folder: Path) -> None:
    """One random seqssm Mamba LM at `size`, written as a Hugging Face folder that every contender reads."""
    from seqssm.models import SequenceModel

    torch.manual_seed(0)
    SequenceModel(seqssm_lm_config(size)).save_pretrained(folder, format="hf")


def lm_models(folder: Path, device: torch.device, dtype: torch.dtype,
              names=(SEQSSM, MAMBA_SSM, "transformers")) -> dict:
    """"seqssm", "mamba_ssm", "transformers" (those of `names`) -> the model of `folder` in `dtype` on `device`, or its
    error text."""
    from seqssm.models import SequenceModel

    def hf():
        from transformers import MambaForCausalLM

        model = MambaForCausalLM.from_pretrained(folder, dtype=dtype).to(device)
        model.generation_config.eos_token_id = None  # random weights: never stop early
        return model

    builders = {
        SEQSSM: lambda: SequenceModel.from_pretrained(folder).to(device, dtype),
        MAMBA_SSM: lambda: mamba_ssm_model(folder, device, dtype),
        "transformers": hf,
    }
    return load_contenders({name: builders[name] for name in names})


# Each LM contender's model -> its forward: ids (B, L) -> logits (B, L, vocab).
LM_FORWARDS = {SEQSSM: lambda m: m, MAMBA_SSM: lambda m: (lambda x: m(x).logits),
               "transformers": lambda m: (lambda x: m(input_ids=x, use_cache=False).logits)}


# ------------------------------------------------------------------------------------- 1. training steps


def train_step(model, forward, optimizer, inputs, targets, device, autocast: bool):
    """A no-argument training step: forward(inputs) -> logits (..., classes), cross-entropy, backward, AdamW."""

    def step():
        try:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                logits = forward(inputs)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
            loss.backward()
            optimizer.step()
        finally:  # also after a failure (out of memory), so that no gradients stay behind
            optimizer.zero_grad(set_to_none=True)

    return step


def part_train(args, size: dict, folder: Path, device: torch.device) -> list[dict]:
    """Training steps of the Mamba LM (see the module docstring, part 1)."""
    models = lm_models(folder, device, torch.float32)
    autocast = device.type == "cuda"
    gen = torch.Generator(device).manual_seed(1)
    vocab, batch = size["vocab_size"], size["batch"]
    shapes = {"main": (batch, size["length"]), "torch": (batch, size["torch_path_length"])}
    data = {k: (torch.randint(0, vocab, s, device=device, generator=gen),
                torch.randint(0, vocab, s, device=device, generator=gen)) for k, s in shapes.items()}
    steps, resident = {}, {}
    for name, model in models.items():
        if isinstance(model, str):
            steps[name] = model
            continue
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
        steps[name] = {k: train_step(model, LM_FORWARDS[name](model), optimizer, *data[k], device, autocast)
                       for k in shapes}
        resident[name] = (model, optimizer)

    def contender(name, shape, context=contextlib.nullcontext, check=None):
        step = steps[name]
        if isinstance(step, str):
            return step
        try:
            if check is not None:
                check()
        except Exception as err:
            return error_text(err)

        def run():
            with context():
                step[shape]()

        return run

    def triton_check():
        needs_cuda(device, "the Triton backend")

    groups = {
        "main": {SEQSSM: contender(SEQSSM, "main"),
                 SEQSSM_TRITON: contender(SEQSSM, "main", lambda: seqssm_backend("triton"), triton_check),
                 MAMBA_SSM: contender(MAMBA_SSM, "main"),
                 HF_KERNELS: contender("transformers", "main", check=lambda: check_hf_kernels(device))},
        "torch": {SEQSSM: contender(SEQSSM, "torch"), HF_TORCH: contender("transformers", "torch", hf_torch_path)},
    }
    if shapes["torch"] == shapes["main"]:
        groups = {"main": {**groups["main"], HF_TORCH: groups["torch"][HF_TORCH]}}
    rows = []
    for shape, entries in groups.items():
        log(f"train: batch {shapes[shape][0]} x length {shapes[shape][1]}")
        # A step of the torch path takes seconds: one warm-up, one step per round.
        short = shape == "torch" and shapes["torch"] != shapes["main"]
        results = compete(entries, device, min(args.warmup, 1) if short else args.warmup, args.rounds,
                          1 if short else args.iters)
        owner = {SEQSSM_TRITON: SEQSSM, HF_KERNELS: "transformers", HF_TORCH: "transformers"}
        kept = {n: resident_bytes(*resident[owner.get(n, n)]) for n in entries if owner.get(n, n) in resident}
        rows += training_rows("train", results, {n: shapes[shape] for n in entries}, kept)
    del models, steps, resident
    free_memory()
    return rows


def profiled(fn, warmups: int, activities: list):
    """torch.profiler's record of one fn() over `activities`, after `warmups` untimed calls (caches, Triton
    compiles), the device synchronised before and after it."""
    from torch.profiler import profile

    for _ in range(warmups):
        fn()
    torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        fn()
        torch.cuda.synchronize()
    return prof


def kernel_table(prof, rows: int = 40) -> str:
    """The CUDA kernels of a torch.profiler record: a table sorted by total device time."""
    return prof.key_averages().table(sort_by="cuda_time_total", row_limit=rows, max_name_column_width=90)


# Where a CUDA kernel's time goes, from its name, the first pattern that matches (lowercased): cuBLAS / CUTLASS
# products and their split-K reductions; the scans and convs of seqssm's Triton kernels and of the CUDA peers;
# copies before the elementwise kernels that carry them (direct_copy_kernel runs inside an elementwise one).
KERNEL_CATEGORIES = (
    ("selective scan", r"selective_scan|selective_step|selective_state_update"),
    ("causal conv", r"causal_conv1d|conv1d_(fwd|bwd|step)"),
    ("matmul", r"gemm|gemv|xmma|nvjet|cutlass|splitkreduce|dot_kernel|cublas"),
    ("norm", r"norm"),
    ("loss", r"softmax|nll_loss|cross_entropy"),
    ("optimizer", r"adam|multi_tensor_apply"),
    ("copy", r"copy|memcpy|cat_|catarray|transpose|permute"),
    ("reduction", r"reduce"),
    ("elementwise", r"elementwise|memset|fill"),
)


def kernel_category(name: str) -> str:
    """The KERNEL_CATEGORIES entry a CUDA kernel's name falls in, or "other"."""
    lowered = name.lower()
    return next((category for category, pattern in KERNEL_CATEGORIES if re.search(pattern, lowered)), "other")


def kernel_times(prof) -> dict[str, float]:
    """Milliseconds of device time per kernel category (and "total") in a torch.profiler record."""
    from torch.autograd import DeviceType

    times = dict.fromkeys([*(c for c, _ in KERNEL_CATEGORIES), "other", "total"], 0.0)
    for event in prof.events():
        if event.device_type == DeviceType.CUDA:
            ms = event.time_range.elapsed_us() / 1e3
            times[kernel_category(event.name)] += ms
            times["total"] += ms
    return times


# Host calls that wait for the device: while one runs, nothing new is queued, and the device idles once it drains.
_HOST_WAITS = re.compile(r"^cuda(Stream|Device|Event)Synchronize$|^cudaMemcpy(Async)?$|^cudaStreamWaitEvent$")


def device_idle(events, gaps: int = 12) -> str:
    """Where the device waited during a torch.profiler record's `events` (FunctionEvents): its busy time (the union of
    its kernels, copies and sets) against their span, the largest gaps between them, each named by the host op that
    launched the work after it (the device event's linked correlation id), and the host calls that wait for the
    device. A step whose kernels take less than its span is waiting on the host."""
    from torch.autograd import DeviceType

    work = sorted((e for e in events if e.device_type == DeviceType.CUDA), key=lambda e: e.time_range.start)
    if not work:
        return "device idle: no device events"
    ops = {e.id: e.name for e in events if e.device_type == DeviceType.CPU and not e.linked_correlation_id}
    busy, end, found = 0.0, work[0].time_range.start, []
    for e in work:
        start, stop = e.time_range.start, e.time_range.end
        if start > end:
            found.append((start - end, end, ops.get(e.linked_correlation_id, "?"), e.name))
        busy += max(0.0, stop - max(start, end))
        end = max(end, stop)
    span = end - work[0].time_range.start
    waits: dict[str, list[float]] = {}
    for e in events:
        if e.device_type == DeviceType.CPU and _HOST_WAITS.match(e.name):
            waits.setdefault(e.name, []).append(e.time_range.elapsed_us())
    lines = [f"device idle: span {span / 1e3:.2f} ms, busy {busy / 1e3:.2f} ms, idle {(span - busy) / 1e3:.2f} ms "
             f"in {len(found)} gaps, {len(work)} device events",
             "host calls that wait for the device: " + (", ".join(
                 f"{name} x{len(us)} ({sum(us) / 1e3:.2f} ms)" for name, us in sorted(waits.items())) or "none"),
             "largest gaps (us, at ms after the first device event, the host op that launched the next work, "
             "its kernel):"]
    for gap, at, op, kernel in sorted(found, reverse=True)[:gaps]:
        lines.append(f"  {gap:9.1f} us at {(at - work[0].time_range.start) / 1e3:9.3f} ms  {op}  ->  {kernel[:80]}")
    return "\n".join(lines)


def category_table(times: dict[str, dict[str, float]]) -> str:
    """A markdown table: one row per kernel category, one column per contender (ms of one training step)."""
    names = list(times)
    lines = ["| kernels | " + " | ".join(f"{n} ms" for n in names) + " |", "|---" * (len(names) + 1) + "|"]
    for category in next(iter(times.values())):
        lines.append(f"| {category} | " + " | ".join(f"{times[n][category]:.2f}" for n in names) + " |")
    return "\n".join(lines)


def profile_train(args, size: dict, folder: Path, device: torch.device, out: Path) -> str:
    """The CUDA kernels of one training step of the mamba-130m-sized model for seqssm (`auto`, and every op on
    Triton) and mamba_ssm, side by side by kernel category, then each contender's idle device time (`device_idle`)
    and top kernels; one step of each S4D
    stack (part 2); and one decoding step's kernels. Written to out/profile.txt."""
    from torch.profiler import ProfilerActivity

    needs_cuda(device, "--profile")
    out.mkdir(parents=True, exist_ok=True)
    models = lm_models(folder, device, torch.float32, names=(SEQSSM, MAMBA_SSM))
    gen = torch.Generator(device).manual_seed(1)
    shape = (size["batch"], size["length"])
    inputs, targets = (torch.randint(0, size["vocab_size"], shape, device=device, generator=gen) for _ in range(2))
    times, parts = {}, []

    def write() -> str:
        # Rewritten after every part: a run stopped by its time limit keeps what it profiled.
        head = [f"one training step, batch {shape[0]} x length {shape[1]}, bf16 autocast: device time by kernel "
                f"(categories: KERNEL_CATEGORIES in scripts/bench_models.py)\n{category_table(times)}"] if times else []
        text = "\n\n".join([*head, *parts])
        (out / "profile.txt").write_text(text + "\n")
        return text

    for name, model_name, backend in ((SEQSSM, SEQSSM, None), (SEQSSM_TRITON, SEQSSM, "triton"),
                                      (MAMBA_SSM, MAMBA_SSM, None)):
        model = models[model_name]
        if isinstance(model, str):
            parts.append(f"{name}: {model}")
            continue
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        step = train_step(model.train(), LM_FORWARDS[model_name](model), optimizer, inputs, targets, device,
                          autocast=True)
        with seqssm_backend(backend) if backend else contextlib.nullcontext():
            prof = profiled(step, 2, [ProfilerActivity.CPU, ProfilerActivity.CUDA])
        times[name] = kernel_times(prof)
        parts.append(f"{name}: one training step, batch {shape[0]} x length {shape[1]}, bf16 autocast\n"
                     f"{device_idle(prof.events())}\n{kernel_table(prof)}")
        del optimizer, step, prof
        free_memory()
        write()
    if not isinstance(models[SEQSSM], str):
        parts.append(decode_launches(models[SEQSSM].eval(), inputs[:1, :8]))
        write()
    del models
    free_memory()
    s4d_shape = size["s4d"]["batch"], size["s4d"]["length"]
    with float32_products(False):  # IEEE float32 products for both (`float32_products`)
        for name, s4d_step in s4d_steps(args, size, device)[0].items():
            table = s4d_step if isinstance(s4d_step, str) else kernel_table(
                profiled(s4d_step, 2, [ProfilerActivity.CPU, ProfilerActivity.CUDA]), rows=25)
            parts.append(f"{name}: one training step, batch {s4d_shape[0]} x length {s4d_shape[1]}, float32 (no "
                         f"TF32)\n{table}")
    return write()


def decode_launches(model, prompt: torch.Tensor) -> str:
    """How many CUDA kernels one eager decoding step of `model` launches (batch 1, the layers' "auto" backends), the
    whole step and one block's: what a CUDA graph replays per token, where each launch costs a few microseconds."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity

    from seqssm.layers import frozen_weights

    def kernels(fn) -> list[str]:
        prof = profiled(fn, 1, [ProfilerActivity.CUDA])
        return [e.name for e in prof.events() if e.device_type == DeviceType.CUDA]

    with torch.no_grad(), frozen_weights():
        _, state = model.backbone.scan(model.embed(prompt))
        token = prompt[:, -1]
        block, block_state = model.backbone.layers[0], state[0]
        x_t = model.embed(token)
        whole = kernels(lambda: model._step(token, state))
        one = kernels(lambda: block._step(x_t, block_state))
    names = "\n".join(f"  {name}" for name in one)
    return (f"one decoding step, batch 1, float32: {len(whole)} kernels for {len(model.backbone.layers)} blocks, "
            f"{len(one)} for one block:\n{names}")


# ------------------------------------------------------------------------------------- 2. S4D stacks


def _no_dropout(*args, **kwargs):
    raise NotImplementedError("this benchmark runs the S4 authors' S4D without dropout")


def load_s4_peer(path: Path):
    """The S4D class of the S4 authors' models/s4/s4d.py at `path`. Their file imports DropoutNd from their
    repository's src/ (used only with dropout > 0): a stand-in is put there while it loads, unless src/ imports."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; put models/s4/s4d.py of github.com/state-spaces/s4 there")
    stand_in = {}
    if importlib.util.find_spec("src") is None:
        stand_in = {name: types.ModuleType(name) for name in ("src", "src.models", "src.models.nn")}
        stand_in["src.models.nn"].DropoutNd = _no_dropout
    with mock.patch.dict(sys.modules, stand_in):
        spec = importlib.util.spec_from_file_location("s4_authors_s4d", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module.S4D


class OutputOnly(nn.Module):
    """A module returning (y, state) seen as one returning y."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, x):
        return self.module(x)[0]


def peer_s4d_model(path: Path, s: dict) -> nn.Module:
    """example.py's backbone (scripts/peer_recipe_check.py's PeerModel) around the S4 authors' own S4D layers."""
    s4d = load_s4_peer(path)
    spec = importlib.util.spec_from_file_location("peer_recipe_check", REPO / "scripts" / "peer_recipe_check.py")
    prc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prc)
    model = prc.PeerModel(s["d_input"], s["n_classes"], s["d_model"], s["n_layers"], dropout=0.0, d_state=s["d_state"])
    model.layers = nn.ModuleList(OutputOnly(s4d(s["d_model"], d_state=s["d_state"], transposed=True))
                                 for _ in range(s["n_layers"]))
    return model


def s4d_steps(args, size: dict, device: torch.device) -> tuple[dict, dict]:
    """The training steps of part 2's contenders (name -> step, or the error text of a contender that cannot run) and
    what each keeps between steps (name -> (model, optimizer))."""
    from seqssm.models import SequenceModel, model_config

    s = size["s4d"]
    gen = torch.Generator(device).manual_seed(2)
    x = torch.randn(s["batch"], s["length"], s["d_input"], device=device, generator=gen)
    labels = torch.randint(0, s["n_classes"], (s["batch"],), device=device, generator=gen)
    torch.manual_seed(0)
    models = load_contenders({
        S4D_SEQSSM: lambda: SequenceModel(model_config(
            "simple-s4d", d_input=s["d_input"], n_classes=s["n_classes"], d_model=s["d_model"],
            n_layers=s["n_layers"], d_state=s["d_state"], dropout=0.0)).to(device),
        S4D_PEER: lambda: peer_s4d_model(Path(args.s4_peer), s).to(device),
    })
    entries, resident = {}, {}
    for name, model in models.items():
        if isinstance(model, str):
            entries[name] = model
            continue
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=device.type == "cuda")
        entries[name] = train_step(model.train(), model, optimizer, x, labels, device, autocast=False)
        resident[name] = (model, optimizer)
    return entries, resident


@contextlib.contextmanager
def float32_products(tf32: bool):
    """Inside, float32 matrix products and cuDNN convolutions both use TF32 tensor cores (tf32) or neither. Torch's
    defaults differ between the two (cuDNN on, matmul off), so a stack whose projections are 1x1 convolutions (the S4
    authors') and one whose projections are nn.Linear (seqssm's) would otherwise compare at two precisions."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def s4d_precisions(device: torch.device) -> tuple[str, ...]:
    """The float32 precisions part 2 runs at: IEEE float32 everywhere, and on CUDA also TF32 (what a GPU user of a
    float32 recipe would set: both contenders' products on tensor cores)."""
    return ("float32", "tf32") if device.type == "cuda" else ("float32",)


def part_s4d(args, size: dict, device: torch.device) -> list[dict]:
    """Training steps of seqssm's simple-s4d beside the S4 authors' S4D stack (module docstring, part 2), at each
    of `s4d_precisions`."""
    s = size["s4d"]
    rows = []
    for precision in s4d_precisions(device):
        with float32_products(precision == "tf32"):
            entries, resident = s4d_steps(args, size, device)
            log(f"s4d, {precision}: batch {s['batch']} x length {s['length']}, d_model {s['d_model']}, "
                f"{s['n_layers']} layers, N {s['d_state']}")
            results = compete(entries, device, args.warmup, args.rounds, args.iters)
        # resident after the warm-up: AdamW's state exists from the first step on
        kept = {name: resident_bytes(*objs) for name, objs in resident.items()}
        part = training_rows("s4d", results, {n: (s["batch"], s["length"]) for n in entries}, kept)
        rows += [{**row, "precision": precision} for row in part]
        del entries, resident
        free_memory()
    return rows


# ------------------------------------------------------------------------------------- 3. generation


def first_divergence(tokens: torch.Tensor, reference: torch.Tensor) -> int | None:
    """The first new-token index where any sequence of `tokens` differs from `reference` (both (B, n)); None if none."""
    n = min(tokens.shape[1], reference.shape[1])
    differ = (tokens[:, :n].cpu() != reference[:, :n].cpu()).any(0).nonzero()
    if len(differ):
        return int(differ[0])
    return None if tokens.shape == reference.shape else n


def part_generate(args, size: dict, folder: Path, device: torch.device) -> list[dict]:
    """Greedy generation (module docstring, part 3)."""
    dtype = getattr(torch, args.gen_dtype)
    models = lm_models(folder, device, dtype)
    for model in models.values():
        if not isinstance(model, str):
            model.eval()
    prompt_len, new = size["prompt"], size["new_tokens"]

    def seqssm_gen(graph: bool):
        model = models[SEQSSM]
        if isinstance(model, str):
            return model
        try:
            if graph:
                needs_cuda(device, "cuda_graph=True")
        except Exception as err:
            return error_text(err)
        return lambda p, n: model.generate(p, n, temperature=0, cuda_graph=graph)

    def mamba_gen():
        model = models[MAMBA_SSM]
        return model if isinstance(model, str) else (
            lambda p, n: model.generate(p, max_length=prompt_len + n, cg=True, top_k=1))

    def hf_gen(kernels: bool):
        model = models["transformers"]
        if isinstance(model, str):
            return model
        try:
            if kernels:
                check_hf_kernels(device)
        except Exception as err:
            return error_text(err)
        context = contextlib.nullcontext if kernels else hf_torch_path

        def run(p, n):
            with context():
                return model.generate(p, attention_mask=torch.ones_like(p), max_new_tokens=n, do_sample=False)

        return run

    generators = {SEQSSM: seqssm_gen(False), SEQSSM_GRAPH: seqssm_gen(True), MAMBA_SSM: mamba_gen(),
                  HF_KERNELS: hf_gen(True)}
    if device.type == "cpu":  # where transformers has no kernels, its torch path gives the token check
        generators[HF_TORCH] = hf_gen(False)
    rows = []
    for batch in size["gen_batches"]:
        prompt = torch.randint(0, size["vocab_size"], (batch, prompt_len), device=device,
                               generator=torch.Generator(device).manual_seed(3 + batch))
        outputs = {}

        def entry(name, n):
            fn = generators[name]
            if isinstance(fn, str):
                return fn

            def run():
                with torch.no_grad():
                    outputs[name] = fn(prompt, n)[:, prompt_len:]

            return run

        log(f"generate: batch {batch}, prompt {prompt_len}, {new} new tokens, {args.gen_dtype}")
        # Warm-up: 3 new tokens (the prompt's scan and a captured step, which the model keeps for the timed calls),
        # but mamba_ssm all of them: it records its graph for one maximum length and records it again for a longer one.
        warm = {name: entry(name, new if name == MAMBA_SSM else min(new, 3)) for name in generators}
        results = compete({name: entry(name, new) for name in generators}, device, 1, args.rounds, 1, warm)
        reference = outputs.get(SEQSSM)
        for name, res in results.items():
            row = {"part": "generate", "contender": name, "batch": batch, "prompt": prompt_len, "new_tokens": new,
                   "dtype": args.gen_dtype, "ms": None, "tokens_per_s": None, "first_divergence": None,
                   "compared": False, "error": res["error"]}
            if res["error"] is None:
                seconds = statistics.median(res["seconds"])
                row.update(ms=1e3 * seconds, tokens_per_s=batch * new / seconds)
                if reference is not None and name != SEQSSM:
                    row.update(compared=True, first_divergence=first_divergence(outputs[name], reference))
            rows.append(row)
    del models, generators
    free_memory()
    return rows


# ------------------------------------------------------------------------------------- output


def environment(device: torch.device) -> dict:
    """Versions and the device, and which packages import (their error where one does not)."""
    env = {"python": sys.version.split()[0], "torch": torch.__version__, "device": str(device),
           "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "torch_threads": torch.get_num_threads()}
    for package in ("transformers", "mamba_ssm", "causal_conv1d", "triton"):
        try:
            env[package] = getattr(__import__(package), "__version__", "installed")
        except Exception as err:
            env[package] = f"not usable: {error_text(err)}"
    try:
        env["transformers_mamba_binding"] = hf_kernel_binding()
    except Exception as err:
        env["transformers_mamba_binding"] = error_text(err)
    return env


def _cell(value, digits: int = 1) -> str:
    if value is None:
        return ""
    return f"{value:,.{digits}f}" if isinstance(value, float) else str(value)


def markdown(result: dict) -> str:
    """The result as markdown tables, one per part."""
    env, lines = result["environment"], []
    lines.append(f"bench_models on {env['device_name']} (torch {env['torch']}, transformers {env['transformers']}, "
                 f"mamba_ssm {env['mamba_ssm']}, causal_conv1d {env['causal_conv1d']}), size {result['settings']['size']}, "
                 f"medians of {result['settings']['rounds']} alternated rounds.\n")
    titles = {"train": "Training step (bf16 autocast on CUDA, float32 on CPU)", "s4d": "S4D stacks, training step "
              "(float32 parameters; products in IEEE float32, or TF32 for both contenders)"}
    for part in ("train", "s4d"):
        lines += [f"### {titles[part]}\n", "| contender | batch x length | step ms | tokens/s | peak MB | error |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['contender']}{' (' + r['precision'] + ')' if 'precision' in r else ''} | "
                  f"{r['batch']} x {r['length']} | {_cell(r['step_ms'], 2)} | "
                  f"{_cell(r['tokens_per_s'], 0)} | {_cell(r['peak_mb'], 0)} | {r['error'] or ''} |"
                  for r in result[part]]
        lines.append("")
    lines += ["### Greedy generation (tokens/s = batch x new tokens / whole call, prompt included)\n",
              "| contender | batch | prompt + new | dtype | ms | tokens/s | first step off seqssm's tokens | error |",
              "|---|---|---|---|---|---|---|---|"]
    for r in result["generate"]:
        same = ("none" if r["first_divergence"] is None else str(r["first_divergence"])) if r["compared"] else ""
        lines.append(f"| {r['contender']} | {r['batch']} | {r['prompt']} + {r['new_tokens']} | {r['dtype']} | "
                     f"{_cell(r['ms'], 1)} | {_cell(r['tokens_per_s'], 0)} | {same} | {r['error'] or ''} |")
    return "\n".join(lines) + "\n"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", required=True, help="folder for bench_models.json and bench_models.md")
    p.add_argument("--size", choices=sorted(SIZES), default=None, help="default: 130m on CUDA, tiny on CPU")
    p.add_argument("--parts", nargs="+", choices=("train", "s4d", "generate"), default=["train", "s4d", "generate"])
    for name in ("batch", "length", "torch-path-length", "prompt", "new-tokens"):
        p.add_argument(f"--{name}", type=int, default=None, help="default: the size's")
    p.add_argument("--gen-batches", type=int, nargs="+", default=None, help="default: the size's")
    p.add_argument("--gen-dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--warmup", type=int, default=2, help="untimed training steps per contender first")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iters", type=int, default=3, help="training steps timed together per round")
    p.add_argument("--profile", action="store_true",
                   help="instead of the parts: the CUDA kernels of one training step of seqssm and mamba_ssm (by "
                        "category, side by side), of each S4D stack, and those one decoding step launches, into "
                        "OUT/profile.txt")
    p.add_argument("--s4-peer", default=str(REPO / ".peers" / "s4d.py"),
                   help="the S4 authors' models/s4/s4d.py (state-spaces/s4); its row is an error when missing")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no CUDA device here")
    for name in ("warmup", "rounds", "iters"):
        if getattr(args, name) < (0 if name == "warmup" else 1):
            p.error(f"--{name} must be >= {0 if name == 'warmup' else 1}")
    args.size = args.size or ("130m" if args.device == "cuda" else "tiny")
    return args


def resolve_size(args) -> dict:
    """The size's settings with the command line's changes."""
    size = {**SIZES[args.size], "s4d": dict(SIZES[args.size]["s4d"])}
    for key in ("batch", "length", "torch_path_length", "prompt", "new_tokens", "gen_batches"):
        if getattr(args, key) is not None:
            size[key] = getattr(args, key)
    return size


def main(argv=None) -> dict:
    args = parse_args(argv)
    device = torch.device(args.device)
    size = resolve_size(args)
    with contextlib.suppress(ImportError):
        import transformers

        transformers.logging.set_verbosity_error()  # its per-call warnings (fallbacks, generation flags)
        transformers.logging.disable_progress_bar()
    env = environment(device)
    log(f"{env['device_name']}, torch {env['torch']}, size {args.size}: {json.dumps(size)}")
    result = {"settings": {**vars(args), "resolved": size}, "environment": env, "train": [], "s4d": [],
              "generate": []}
    with tempfile.TemporaryDirectory(prefix="bench_models-") as tmp:
        folder = Path(tmp) / "weights"
        if args.profile:
            write_weights(size, folder)
            print(profile_train(args, size, folder, device, Path(args.out)), flush=True)
            return result
        if {"train", "generate"} & set(args.parts):
            log("writing the shared weights")
            write_weights(size, folder)
        for part in ("train", "s4d", "generate"):
            if part in args.parts:
                result[part] = {"train": lambda: part_train(args, size, folder, device),
                                "s4d": lambda: part_s4d(args, size, device),
                                "generate": lambda: part_generate(args, size, folder, device)}[part]()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_models.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "bench_models.md").write_text(markdown(result))
    print(markdown(result), flush=True)
    log(f"wrote {out / 'bench_models.json'} and {out / 'bench_models.md'}")
    return result


if __name__ == "__main__":
    main()
