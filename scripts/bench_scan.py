"""Forward+backward time and peak memory of the scan backends, side by side.

    python scripts/bench_scan.py --lengths 256 1024 2048 4096 --repeats 5 --out runs/bench_scan.json
    python scripts/bench_scan.py --device cuda --out runs/bench_scan_cuda.json

On CUDA (`--device cuda`, see `cuda_suite`) it runs in one process, synchronising around each timed
run and reading peak memory from torch's allocator: S6 `selective_scan` at the size of the Ulbaek 2024 thesis models
(batch 32, d_inner 232, N 16, L 1024 / 4096 / 16384) and at mamba-130m widths (d_inner 1536, N 16,
batch 8 x L 2048 and batch 2 x L 8192; there also the forward alone, "selective_scan_forward") and at an RL
update's width (batch 8, d_inner 128, L 1024), with and without resets, for "triton" (and "triton@N" at other
chunk lengths, --chunks; "triton/unsegmented", without resets, with the forward's programs walking the whole
sequence, not cut into time segments), "torch" (up to L 4096) and mamba_ssm (no resets): "mamba_ssm" is its own
`selective_scan_fn`, "seqssm:mamba_ssm" the same kernels through seqssm's backend; `linear_scan` at S5's
PPO shape (64 envs x unroll 1024 in 8 minibatches: batch 8, 128 complex modes) with and without resets;
and `causal_conv1d` with SiLU ("torch" with and without resets, the causal_conv1d package's kernels and the
Triton ones without) against a depthwise F.conv1d (cuDNN) and F.silu, which take no resets. Scan rows carry their hardware limit. A backend that fails is recorded
with its error. It writes JSON and a markdown table (same name, .md), judges CUDA_TARGETS, and exits
1 when one is missed or unmeasured (mamba_ssm not installed, say).

On CPU (the default):

Each (backend, L) runs in two subprocesses. The timing one runs with the default allocator, as a
user's process does. The memory one reads its peak resident memory (`ru_maxrss` minus the resident
size after the inputs were built and one small warm-up call) with a fixed glibc mmap threshold, so
that every large freed tensor goes back to the OS at once and the high-water mark counts live
tensors, not allocator fragmentation (that setting makes every large allocation fault its pages
in afresh, so it is never used for timing). Backends: seqssm's
"reference" and "torch", and mambapy's parallel scan (`pscan`) wrapped the way mambapy's own
Mamba uses it, when mambapy is installed. Shapes: batch 4, dim 512, N 16 unless told otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

FULL_TENSOR_NOTE = (
    "times with the default allocator; peak_ratio = peak extra memory (fixed mmap threshold, see the docstring) "
    "/ bytes of one (batch, L, dim, N) float32 tensor"
)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _mambapy_scan(u, delta, A, B, C, D):
    """mambapy's selective scan: materialise exp(ΔA) and ΔBu for all steps, then its pscan."""
    import torch
    from mambapy.pscan import pscan

    delta_l, u_l = delta.transpose(1, 2), u.transpose(1, 2)  # (b, L, d)
    deltaA = torch.exp(delta_l.unsqueeze(-1) * A)  # (b, L, d, N)
    BX = (delta_l * u_l).unsqueeze(-1) * B.transpose(1, 2).unsqueeze(2)
    hs = pscan(deltaA, BX)
    y = (hs @ C.transpose(1, 2).unsqueeze(-1)).squeeze(-1) + D * u_l
    return y.transpose(1, 2)


def worker(mode: str, backend: str, length: int, repeats: int, batch: int, dim: int, n: int, threads: int) -> dict:
    """mode "time": `repeats` timed fwd+bwd runs; mode "memory": one run's peak extra resident memory."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    from seqssm.ops import selective_scan

    torch.manual_seed(0)
    u = torch.randn(batch, dim, length, requires_grad=True)
    delta = (torch.rand(batch, dim, length) * 0.1).requires_grad_()
    A = (-torch.rand(dim, n) - 0.5).requires_grad_()
    B = torch.randn(batch, n, length, requires_grad=True)
    C = torch.randn(batch, n, length, requires_grad=True)
    D = torch.randn(dim, requires_grad=True)
    if backend == "mambapy":
        run = lambda: _mambapy_scan(u, delta, A, B, C, D)  # noqa: E731
    else:
        run = lambda: selective_scan(u, delta, A, B, C, D, backend=backend)  # noqa: E731
    # One small warm-up call loads kernels and thread pools, which are not the scan's memory.
    warm = [(x.detach()[..., :8] if x.ndim == 3 else x.detach()).clone().requires_grad_() for x in (u, delta, A, B, C, D)]
    if backend == "mambapy":
        _mambapy_scan(*warm).sum().backward()
    else:
        selective_scan(*warm, backend=backend).sum().backward()
    base = _rss_bytes()
    times = []
    for _ in range(repeats if mode == "time" else 1):
        for p in (u, delta, A, B, C, D):
            p.grad = None
        start = time.perf_counter()
        run().sum().backward()
        times.append(time.perf_counter() - start)
    if mode == "time":
        return {"times_s": times, "median_s": statistics.median(times)}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    return {"peak_extra_bytes": peak, "peak_ratio": peak / (batch * length * dim * n * 4)}


def kernel_time(once) -> dict:
    """The device work of one once() on CUDA, as torch.profiler records it: how many kernels (memsets and copies
    included) and their summed time in ms. Below a millisecond the call's own time is mostly the host launching
    them, so this is what a kernel's distance to the hardware limit reads from."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        once()
        torch.cuda.synchronize()
    work = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    return {"kernels": len(work), "kernel_ms": round(sum(e.time_range.elapsed_us() for e in work) / 1e3, 4)}


def measure(fn, params, repeats: int, device, warmup_max: int = 12, backward: bool = True) -> dict:
    """Median fwd+bwd milliseconds (forward alone without `backward`, under no_grad) of fn() on `device` over
    `repeats` runs after warm-ups (compilation, autotuning, the allocator's first blocks of a new shape), and on
    CUDA the peak memory one run allocates beyond what was live before it. Warm-ups run until two in a row agree
    within 5% (at most `warmup_max`): on an H100 the Triton rows still fell from 11.7 to 5.6 ms over five runs
    after two warm-ups."""
    import torch

    cuda = device.type == "cuda"

    def once():
        for p in params:
            p.grad = None
        if not backward:
            with torch.no_grad():
                fn()
            return
        out = fn()
        (out[0] if isinstance(out, tuple) else out).float().sum().backward()

    def timed():
        if not cuda:
            start = time.perf_counter()
            once()
            return (time.perf_counter() - start) * 1e3
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        once()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end)

    warm = [timed(), timed()]
    while abs(warm[-1] - warm[-2]) > 0.05 * warm[-2] and len(warm) < warmup_max:
        warm.append(timed())
    times = [timed() for _ in range(repeats)]
    row = {"median_ms": round(statistics.median(times), 3), "times_ms": [round(t, 3) for t in times],
           "warmup_ms": [round(t, 3) for t in warm]}
    if cuda:
        try:
            row.update(kernel_time(once))
        except Exception as err:  # the profiler is a reading beside the time, not a reason to lose the row
            row["kernel_ms"] = f"error: {type(err).__name__}: {str(err)[:200]}"
        for p in params:
            p.grad = None
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        once()
        torch.cuda.synchronize()
        row["peak_mb"] = round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)
    return row


# Targets of the CUDA suite, fixed before any run: (name, (op, shape, resets), backend, baseline, at_most):
# met when backend_ms / baseline_ms <= at_most; "unmeasured" when either row is missing or failed. The
# baseline "limit" is the row's own hardware limit (`limit_ms`), "no resets" the same backend's row without.
CUDA_TARGETS = [
    ("triton within 1.5x of mamba_ssm, mamba-130m widths, L=2048", ("selective_scan", "mamba130m-2048", False),
     "triton", "mamba_ssm", 1.5),
    ("triton within 1.5x of mamba_ssm, mamba-130m widths, L=8192", ("selective_scan", "mamba130m-8192", False),
     "triton", "mamba_ssm", 1.5),
    ("triton within 3x of the hardware limit, mamba-130m widths, L=2048", ("selective_scan", "mamba130m-2048", False),
     "triton", "limit", 3.0),
    ("triton within 3x of the hardware limit, mamba-130m widths, L=8192", ("selective_scan", "mamba130m-8192", False),
     "triton", "limit", 3.0),
    ("triton with resets at most 1.1x without, mamba-130m widths, L=2048", ("selective_scan", "mamba130m-2048", True),
     "triton", "no resets", 1.1),
    ("triton with resets at most 1.1x without, mamba-130m widths, L=8192", ("selective_scan", "mamba130m-8192", True),
     "triton", "no resets", 1.1),
    ("triton with resets at least 20x the torch path, mamba-130m widths, L=2048",
     ("selective_scan", "mamba130m-2048", True), "triton", "torch", 1 / 20),
    ("triton with resets at least 20x the torch path, thesis shape, L=4096", ("selective_scan", "thesis-4096", True),
     "triton", "torch", 1 / 20),
    ("linear_scan triton no slower than torch, S5 PPO shape", ("linear_scan", "s5-ppo", True), "triton", "torch", 1.0),
    ("linear_scan triton within 3x of the hardware limit, S5 PPO shape", ("linear_scan", "s5-ppo", True), "triton",
     "limit", 3.0),
    ("linear_scan triton with resets at most 1.1x without, S5 PPO shape", ("linear_scan", "s5-ppo", True), "triton",
     "no resets", 1.1),
]


def device_peaks() -> dict:
    """The device's peak rates: exponentials/s of the special-function units (16 per clock per multiprocessor on
    sm_80 and sm_90), fp32 FMAs/s (128 lanes per multiprocessor on sm_90, 64 on sm_80) and HBM bytes/s, from
    the multiprocessor count and the clocks and bus width NVML reports (nvidia-ml-py), or a datasheet when NVML
    is missing; `source` says which."""
    import torch

    props = torch.cuda.get_device_properties(0)
    sms, major = props.multi_processor_count, props.major
    peaks = {"multiprocessors": sms, "compute_capability": f"{props.major}.{props.minor}"}
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        clock_hz = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM) * 1e6
        mem_hz = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM) * 1e6
        bus_bits = pynvml.nvmlDeviceGetMemoryBusWidth(handle)
        peaks.update(sm_clock_mhz=clock_hz / 1e6, memory_bytes_per_s=2 * mem_hz * bus_bits / 8, source="NVML")
    except Exception as err:  # no NVML: the clock and bandwidth of the device's datasheet, said so
        table = {"H100": (1980e6, 3.35e12), "H200": (1980e6, 4.8e12), "A100": (1410e6, 2.04e12)}
        name = next((k for k in table if k in props.name), None)
        if name is None:
            raise RuntimeError(f"no NVML ({err}) and no datasheet numbers for {props.name}") from err
        clock_hz, peaks["memory_bytes_per_s"] = table[name]
        peaks.update(sm_clock_mhz=clock_hz / 1e6, source=f"{name} datasheet (NVML: {err})")
    peaks["exp_per_s"] = sms * 16 * clock_hz
    peaks["fma_per_s"] = sms * (128 if major >= 9 else 64) * clock_hz
    return peaks


def selective_limit_ms(shape: dict, bytes_per_element: int, peaks: dict) -> dict:
    """The least time forward + backward of one selective scan call (u, Δ, z of (b, d, L) in a 16-bit dtype,
    B, C (b, N, L)) can take: 3 exponentials per state and step (forward, recomputed forward, the backward's
    decay), about 10 fp32 FMAs per state and step (the two scans, the output, the gradients), and the
    unavoidable HBM traffic (read u, Δ, z, B, C and write y; read them and dy again, write du, dΔ, dz, dB, dC).
    The limit is the largest of the three times."""
    b, d, n, length = shape["batch"], shape["dim"], shape["N"], shape["L"]
    elements, states = b * d * length, b * d * length * n
    bc = 2 * b * n * length * bytes_per_element
    traffic = (3 * elements * bytes_per_element + bc + elements * bytes_per_element  # forward
               + 4 * elements * bytes_per_element + bc + 3 * elements * bytes_per_element + 2 * b * n * length * 4)
    times = {"exp_ms": 3 * states / peaks["exp_per_s"] * 1e3, "fma_ms": 10 * states / peaks["fma_per_s"] * 1e3,
             "hbm_ms": traffic / peaks["memory_bytes_per_s"] * 1e3}
    return {**{k: round(v, 4) for k, v in times.items()}, "limit_ms": round(max(times.values()), 4)}


def linear_limit_ms(shape: dict, bytes_per_element: int, peaks: dict) -> dict:
    """The least time forward + backward of the linear scan can take: HBM traffic alone (read b, write h; read
    dh and h, write db), `a` one value per feature (S5's), read once and its gradient summed per feature."""
    elements = shape["batch"] * shape["L"] * shape["modes"]
    traffic = (2 + 3) * elements * bytes_per_element
    hbm = traffic / peaks["memory_bytes_per_s"] * 1e3
    return {"hbm_ms": round(hbm, 4), "limit_ms": round(hbm, 4)}


def cuda_suite(args) -> dict:
    """The CUDA comparison described in the module docstring -> {"rows", "targets", ...}. A backend that fails
    (not installed, out of memory, a kernel error) is recorded as that row's error; the rest still runs."""
    import torch
    import torch.nn.functional as F

    from seqssm.ops import causal_conv1d, linear_scan, selective_scan
    from seqssm.ops.backend import mamba_selective_scan

    device, dtype = torch.device("cuda"), getattr(torch, args.dtype)
    rows = []

    def record(op, name, shape, resets, backend, fn, params, repeats=args.repeats, limit=None, backward=True):
        try:
            row = measure(fn, params, repeats, torch.device("cuda"), backward=backward)
        except Exception as err:  # recorded, not fatal: one failing backend must not hide the others
            row = {"error": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]}
        torch.cuda.empty_cache()
        if limit and "median_ms" in row:
            row.update(limit, limit_fraction=round(limit["limit_ms"] / row["median_ms"], 4))
        rows.append({"op": op, "shape": name, **shape, "resets": resets, "backend": backend, **row})
        print(json.dumps(rows[-1]), flush=True)

    from seqssm.ops import triton_scan

    peaks = device_peaks()
    mamba_fn, mamba_missing = mamba_selective_scan()
    default_chunk, default_segment = triton_scan.SELECTIVE_MAX_CHUNK, triton_scan._forward_segment
    s6_shapes = {f"thesis-{L}": dict(batch=32, dim=232, N=16, L=L) for L in (1024, 4096, 16384)}
    s6_shapes.update({"mamba130m-2048": dict(batch=8, dim=1536, N=16, L=2048),
                      "mamba130m-8192": dict(batch=2, dim=1536, N=16, L=8192),
                      # an RL update's few channels: the fewest independent recurrences the forward gets
                      "rl-8x128x1024": dict(batch=8, dim=128, N=16, L=1024)})
    for name, shape in s6_shapes.items():
        b, d, n, L = shape["batch"], shape["dim"], shape["N"], shape["L"]
        torch.manual_seed(0)
        leaf = lambda *size: torch.randn(*size, device=device, dtype=dtype).requires_grad_()  # noqa: E731
        u, delta, z, B, C = leaf(b, d, L), leaf(b, d, L), leaf(b, d, L), leaf(b, n, L), leaf(b, n, L)
        A = (-torch.rand(d, n, device=device) - 0.5).requires_grad_()
        D, bias = torch.randn(d, device=device, requires_grad=True), torch.randn(d, device=device, requires_grad=True)
        params = [u, delta, z, B, C, A, D, bias]
        limit = selective_limit_ms(shape, dtype.itemsize, peaks)
        for with_resets in (False, True):
            resets = (torch.rand(b, L, device=device) < 1 / 256) if with_resets else None
            # mamba_ssm and triton one after the other, so that the pair the targets compare runs back to back
            # "mamba_ssm" is the peer as its users call it (its selective_scan_fn); "seqssm:mamba_ssm" the same
            # kernels through seqssm's backend
            for backend in ("mamba_ssm", "triton", "triton/unsegmented",
                            *(f"triton@{c}" for c in args.chunks if c != default_chunk), "seqssm:mamba_ssm", "torch"):
                if ("mamba_ssm" in backend or backend.endswith("/unsegmented")) and with_resets:
                    continue  # mamba_ssm takes no resets; resets do not change what segments save
                if "mamba_ssm" in backend and mamba_fn is None:
                    rows.append({"op": "selective_scan", "shape": name, **shape, "resets": False,
                                 "backend": backend, "error": mamba_missing})
                    continue
                if backend == "torch" and (L > 4096 or args.skip_torch):
                    continue  # minutes per run at the thesis's L = 16384; the targets compare at L <= 4096
                name_, _, chunk = backend.removeprefix("seqssm:").removesuffix("/unsegmented").partition("@")
                if backend == "mamba_ssm":
                    fn = lambda: mamba_fn(u, delta, A, B, C, D, z, bias, True)  # noqa: E731
                else:
                    fn = lambda backend=name_, resets=resets: selective_scan(  # noqa: E731
                        u, delta, A, B, C, D, z, bias, True, resets=resets, backend=backend)
                triton_scan.SELECTIVE_MAX_CHUNK = int(chunk) if chunk else default_chunk
                if backend.endswith("/unsegmented"):  # the forward's programs walk the whole sequence
                    triton_scan._forward_segment = lambda u, groups, n: u.shape[-1]
                try:
                    record("selective_scan", name, shape, with_resets, backend, fn, params,
                           repeats=min(args.repeats, 3) if backend == "torch" else args.repeats, limit=limit)
                    if (backend.partition("/")[0] in ("mamba_ssm", "triton") and name.startswith("mamba130m")
                            and not with_resets):
                        # the forward alone (inference, prefill): where the two kernels' designs differ most
                        record("selective_scan_forward", name, shape, False, backend, fn, params, backward=False)
                finally:
                    triton_scan.SELECTIVE_MAX_CHUNK = default_chunk
                    triton_scan._forward_segment = default_segment

    b, L, modes = 8, 1024, 128
    a = (0.99 * torch.exp(1j * torch.rand(1, 1, modes, device=device))).to(torch.complex64).requires_grad_()
    drive = torch.randn(b, L, modes, device=device, dtype=torch.complex64, requires_grad=True)
    h0 = torch.randn(b, modes, device=device, dtype=torch.complex64, requires_grad=True)
    shape = dict(batch=b, L=L, modes=modes, complex=True)
    limit = linear_limit_ms(shape, 8, peaks)
    for with_resets in (False, True):
        resets = (torch.rand(b, L, device=device) < 1 / 64) if with_resets else None
        for backend in ("triton", "torch"):
            fn = lambda backend=backend, resets=resets: linear_scan(  # noqa: E731
                a, drive, h0, resets, backend=backend).real
            record("linear_scan", "s5-ppo", shape, with_resets, backend, fn, [a, drive, h0], limit=limit)

    for b, d, L in ((32, 232, 4096), (8, 1536, 4096)):
        x = torch.randn(b, d, L, device=device, dtype=dtype, requires_grad=True)
        w = torch.randn(d, 4, device=device, requires_grad=True)
        bias = torch.randn(d, device=device, requires_grad=True)
        shape = dict(batch=b, dim=d, L=L, K=4)
        name = f"conv-{b}x{d}x{L}"
        # SiLU on, as the Mamba blocks call the conv
        record("causal_conv1d", name, shape, False, "F.conv1d", lambda: F.silu(F.conv1d(  # noqa: E731
            F.pad(x, (3, 0)), w.to(dtype)[:, None], bias.to(dtype), groups=d)), [x, w, bias])
        for backend in ("causal_conv1d", "triton"):
            record("causal_conv1d", name, shape, False, backend, lambda backend=backend: causal_conv1d(  # noqa: E731
                x, w, bias, silu=True, backend=backend), [x, w, bias])
        for with_resets in (False, True):
            resets = (torch.rand(b, L, device=device) < 1 / 256) if with_resets else None
            record("causal_conv1d", name, shape, with_resets, "torch", lambda resets=resets: causal_conv1d(  # noqa: E731
                x, w, bias, resets=resets, silu=True, backend="torch"), [x, w, bias])

    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "peaks": peaks,
            "triton": __import__("triton").__version__, "mamba_ssm": _version("mamba_ssm"),
            "causal_conv1d": _version("causal_conv1d"), "dtype": args.dtype, "repeats": args.repeats,
            "what": "forward + backward on CUDA; peak_mb = memory one run allocates beyond what was live before",
            "rows": rows, "targets": judge(rows)}


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package.replace("_", "-"))
    except PackageNotFoundError:
        return None


def judge(rows: list[dict]) -> list[dict]:
    """Each of CUDA_TARGETS as met / missed / unmeasured, with the ratio and the rows' times and peaks."""
    by = {(r["op"], r["shape"], r["resets"], r["backend"]): r for r in rows}
    verdicts = []
    for name, (op, shape, resets), backend, baseline, at_most in CUDA_TARGETS:
        verdict = {"target": name, "backend": backend, "baseline": baseline, "at_most": round(at_most, 4)}
        row = by.get((op, shape, resets, backend))
        if baseline == "limit":
            base = {"median_ms": row["limit_ms"], "peak_mb": None} if row and "limit_ms" in row else None
        elif baseline == "no resets":
            base = by.get((op, shape, False, backend))
        else:
            base = by.get((op, shape, resets, baseline))
        pair = {backend: row, baseline: base}
        missing = [f"{b}: {r.get('error', 'not run') if r else 'not run'}" for b, r in pair.items()
                   if not r or "median_ms" not in r]
        if missing:
            verdict.update(status="unmeasured", why="; ".join(missing))
        else:
            ratio = pair[backend]["median_ms"] / pair[baseline]["median_ms"]
            verdict.update(ratio=round(ratio, 4), status="met" if ratio <= at_most else "missed",
                           ms={b: r["median_ms"] for b, r in pair.items()},
                           peak_mb={b: r["peak_mb"] for b, r in pair.items()})
        verdicts.append(verdict)
    return verdicts


def markdown(result: dict) -> str:
    """The rows and the targets as markdown tables."""
    peaks = result.get("peaks", {})
    lines = [f"Forward + backward on {result['device']} (torch {result['torch']}, triton {result['triton']}, "
             f"mamba_ssm {result.get('mamba_ssm')}, causal_conv1d {result.get('causal_conv1d')}; peaks from "
             f"{peaks.get('source')}: {peaks.get('exp_per_s', 0) / 1e12:.2f}e12 exp/s, "
             f"{peaks.get('fma_per_s', 0) / 1e12:.1f}e12 FMA/s, {peaks.get('memory_bytes_per_s', 0) / 1e12:.2f} TB/s; "
             "limit ms = the largest of the exponential, FMA and HBM times of the call, see selective_limit_ms; "
             f"{result['dtype']} inputs, median of {result['repeats']}).", "",
             "kernel ms = the device time of the call's kernels (torch.profiler), without the host's launching.", "",
             "| op | shape | resets | backend | median ms | kernel ms (kernels) | peak MB | limit ms "
             "| fraction of limit |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        time_ = f"{r['median_ms']}" if "median_ms" in r else f"error: {r['error']}"
        kernels = f"{r['kernel_ms']}" + (f" ({r['kernels']})" if "kernels" in r else "") if "kernel_ms" in r else ""
        lines.append(f"| {r['op']} | {r['shape']} | {r['resets']} | {r['backend']} | {time_} | {kernels} "
                     f"| {r.get('peak_mb', '')} | {r.get('limit_ms', '')} | {r.get('limit_fraction', '')} |")
    lines += ["", "| target | time ratio | at most | status |", "|---|---|---|---|"]
    for t in result["targets"]:
        ratio = f"{t['backend']} / {t['baseline']} = {t['ratio']}" if "ratio" in t else t.get("why", "")
        lines.append(f"| {t['target']} | {ratio} | {t['at_most']} | {t['status']} |")
    return "\n".join(lines)


def write_outputs(result: dict, table: str, out: str) -> None:
    """`result` as JSON at `out` and `table` as markdown beside it (.md), the table printed too."""
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    with open(os.path.splitext(out)[0] + ".md", "w") as f:
        f.write(table + "\n")
    print(table)
    print(f"\nwrote {out} and its .md")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 2048, 4096])
    parser.add_argument("--backends", nargs="+", default=["reference", "torch", "mambapy"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--threads", type=int, default=0, help="torch threads per run (0: torch's default)")
    parser.add_argument("--out", default="runs/bench_scan.json")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", default="bfloat16", help="input dtype of the CUDA suite (parameters stay float32)")
    parser.add_argument("--chunks", type=int, nargs="*", default=[512],
                        help="CUDA suite: also time the Triton selective scan with these chunk lengths (rows triton@N)")
    parser.add_argument("--skip-torch", action="store_true", help="CUDA suite: leave out the torch path's rows")
    parser.add_argument("--worker", nargs=3, metavar=("MODE", "BACKEND", "L"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.device == "cuda":
        result = cuda_suite(args)
        write_outputs(result, markdown(result), args.out)
        # Exit 1 when a target is missed or could not be measured: a check that cannot fail proves nothing.
        sys.exit(0 if all(t["status"] == "met" for t in result["targets"]) else 1)
    if args.worker:
        mode, backend, length = args.worker
        result = worker(mode, backend, int(length), args.repeats, args.batch, args.dim, args.n, args.threads)
        print(json.dumps(result))
        return

    backends = list(args.backends)
    if "mambapy" in backends:
        try:
            import mambapy.pscan  # noqa: F401
        except ImportError:
            print("mambapy not installed: skipping its comparator (pip install mambapy)", file=sys.stderr)
            backends.remove("mambapy")
    envs = {"time": dict(os.environ), "memory": {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}}
    rows = []
    for length in args.lengths:
        for backend in backends:
            row = {"backend": backend, "L": length}
            for mode, env in envs.items():
                cmd = [sys.executable, __file__, "--worker", mode, backend, str(length), "--repeats",
                       str(args.repeats), "--batch", str(args.batch), "--dim", str(args.dim), "--n", str(args.n),
                       "--threads", str(args.threads)]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
                row.update(json.loads(out.strip().splitlines()[-1]))
            rows.append(row)
            print(f"L={length:5d} {backend:10s} median {row['median_s']:.3f}s  peak {row['peak_ratio']:.2f}x full",
                  flush=True)
    by = {(r["backend"], r["L"]): r for r in rows}
    summary = []
    for length in args.lengths:
        ref = by.get(("reference", length))
        for backend in backends:
            r = by[(backend, length)]
            summary.append({
                "L": length, "backend": backend, "median_s": round(r["median_s"], 4),
                "speedup_vs_reference": round(ref["median_s"] / r["median_s"], 2) if ref else None,
                "peak_ratio": round(r["peak_ratio"], 3),
            })
    result = {
        "shape": {"batch": args.batch, "dim": args.dim, "N": args.n}, "repeats": args.repeats,
        "what": "forward + backward of selective_scan on CPU; " + FULL_TENSOR_NOTE,
        "threads": args.threads or __import__("torch").get_num_threads(), "summary": summary, "runs": rows,
    }
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"\n{'L':>6} {'backend':>10} {'median s':>9} {'speedup':>8} {'peak/full':>9}")
    for s in summary:
        print(f"{s['L']:>6} {s['backend']:>10} {s['median_s']:>9.3f} {s['speedup_vs_reference'] or 0:>8.2f} "
              f"{s['peak_ratio']:>9.2f}")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
