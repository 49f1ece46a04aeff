"""CPU forward+backward time and peak memory of `selective_scan` backends, side by side.

    python scripts/bench_scan.py --lengths 256 1024 2048 4096 --repeats 5 --out runs/bench_scan.json

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
    parser.add_argument("--worker", nargs=3, metavar=("MODE", "BACKEND", "L"), help=argparse.SUPPRESS)
    args = parser.parse_args()
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
