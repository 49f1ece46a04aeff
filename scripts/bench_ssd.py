"""Forward+backward time of Mamba-2's SSD scan: seqssm's "triton" and "chunked" backends beside mamba_ssm's
`mamba_chunk_scan_combined`.

    python scripts/bench_ssd.py --device cuda --out runs/bench_ssd.json
    python scripts/bench_ssd.py --device cpu --out runs/bench_ssd_cpu.json      # a tiny smoke run

On CUDA: mamba2-130m's scan (Dao & Gu 2024: 24 heads of 64 channels, d_state 128, one group, chunks of 256) at
batch 8 and L 2048 and 8192, bfloat16 x, B, C (Δ, A, D float32, as the Mamba-2 layer passes them), and once more
with resets (seqssm only: mamba_ssm takes none). Medians of --repeats runs after warm-ups that run until two in a
row agree within 5% (compilation, autotuning, the allocator's first blocks), as scripts/bench_scan.py does; peak
memory one run allocates beyond what was live before it. A backend that fails or is not installed is a row with
its error. On CPU (`--device cpu`) the same rows at a tiny shape, the Triton kernels interpreted: it checks that
the script runs, it measures nothing worth reading. Writes JSON and a markdown table (same name, .md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the shared timing of bench_scan.py, run as a script too
from bench_scan import measure, write_outputs  # noqa: E402

BACKENDS = ("triton", "chunked", "mamba_ssm")
CUDA_SHAPES = {f"mamba2-130m-{L}": dict(batch=8, L=L, heads=24, P=64, N=128, groups=1, chunk=256) for L in (2048, 8192)}
CPU_SHAPES = {"tiny": dict(batch=2, L=24, heads=2, P=4, N=8, groups=1, chunk=8)}


def run(args, written=lambda result: None) -> dict:
    """Every (shape, resets, backend) row -> {"rows", ...}; `written(result so far)` after each row, so that a run
    stopped by a time limit keeps the rows it finished (mamba_ssm's first call autotunes for minutes)."""
    import torch

    from seqssm.ops.backend import optional_function
    from seqssm.ops.ssd import ssd_scan

    device = torch.device(args.device)
    if device.type == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # the Triton backend takes CPU tensors only interpreted
    dtype = getattr(torch, args.dtype)
    mamba_fn, mamba_missing = optional_function("mamba_ssm.ops.triton.ssd_combined", "mamba_chunk_scan_combined")
    rows = []
    result = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (interpreted Triton)",
              "torch": torch.__version__, "triton": _version("triton"), "mamba_ssm": _version("mamba_ssm"),
              "repeats": args.repeats, "what": "forward + backward of the SSD scan; medians in ms", "rows": rows}

    def add(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)
        written(result)

    for name, s in (CUDA_SHAPES if device.type == "cuda" else CPU_SHAPES).items():
        b, L, H, P, N, G = s["batch"], s["L"], s["heads"], s["P"], s["N"], s["groups"]
        torch.manual_seed(0)
        x = torch.randn(b, L, H, P, device=device, dtype=dtype, requires_grad=True)
        B = torch.randn(b, L, G, N, device=device, dtype=dtype, requires_grad=True)
        C = torch.randn(b, L, G, N, device=device, dtype=dtype, requires_grad=True)
        dt = (torch.rand(b, L, H, device=device) * 0.1 + 1e-3).requires_grad_()
        A = (-torch.rand(H, device=device) - 0.5).requires_grad_()
        D = torch.randn(H, device=device, requires_grad=True)
        params = [x, dt, A, B, C, D]
        for with_resets in (False, True):
            resets = (torch.rand(b, L, device=device) < 1 / 256) if with_resets else None
            for backend in args.backends:
                row = {"shape": name, **s, "dtype": args.dtype, "resets": with_resets, "backend": backend}
                if backend == "mamba_ssm":
                    if with_resets:
                        continue  # mamba_chunk_scan_combined takes no resets
                    if mamba_fn is None:
                        add({**row, "error": f"not installed ({mamba_missing})"})
                        continue
                    fn = lambda: mamba_fn(x, dt, A, B, C, s["chunk"], D=D)  # noqa: E731
                else:
                    fn = lambda backend=backend, resets=resets: ssd_scan(  # noqa: E731
                        x, dt, A, B, C, D, None, resets, s["chunk"], backend)
                try:
                    row.update(measure(fn, params, args.repeats, device, args.warmup_max))
                except Exception as err:  # recorded, not fatal: one failing backend must not hide the others
                    row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                add(row)
    return result


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def markdown(result: dict) -> str:
    """The rows as a markdown table."""
    lines = [f"SSD scan, forward + backward on {result['device']} (median of {result['repeats']}).", "",
             "| shape | resets | backend | median ms | peak MB |", "|---|---|---|---|---|"]
    for r in result["rows"]:
        time_ = f"{r['median_ms']}" if "median_ms" in r else f"error: {r['error']}"
        lines.append(f"| {r['shape']} | {r['resets']} | {r['backend']} | {time_} | {r.get('peak_mb', '')} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--dtype", default="bfloat16", help="dtype of x, B and C (Δ, A, D stay float32)")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup-max", type=int, default=12, help="at most this many warm-up runs (at least 2)")
    parser.add_argument("--out", default="runs/bench_ssd.json")
    args = parser.parse_args(argv)
    result = run(args, lambda result: write_outputs(result, markdown(result), args.out))
    # A seqssm backend that failed fails the run; mamba_ssm may be absent.
    return 1 if any("error" in r and r["backend"] != "mamba_ssm" for r in result["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
