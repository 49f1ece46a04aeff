"""What one pass of each loop of the scans' Triton kernels costs, read off their SASS: no GPU needed.

    python scripts/kernel_sass.py [--arch 90] [--case "bench S6 8x1536x2048 plain"] [--out runs/kernel_sass.json]

The case's launches are captured as the compile check captures them (`seqssm.ops.triton_aot`, from its full or
benchmark tier), every autotune config is compiled for sm_ARCH by the triton installed, and the cubin is
disassembled with the cuobjdump in triton's wheel. Each loop (a backward branch) is reported with its instructions,
and among them the warp shuffles, special-function ops, global loads and stores and barriers; `per_element` divides
the step loop's instructions (`step_loop`) by the elements of a tile each thread holds (the selective forward: (channel, n)
pairs of one step; the selective backward: (channel, step) pairs of one state; the linear scan: (feature, step)
pairs). These are static counts of issued instructions, not times: they say where a kernel spends its issue slots
and shuffles, not how long it waits.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys

_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,5})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)[^;]*;")
_BRANCH = re.compile(r"BRA\s+(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))")


def loops(sass: str) -> list[dict]:
    """Each loop of a kernel's SASS (innermost first): its address range, instruction count and the counts of the
    ops that matter for a scan."""
    lines = [(int(m.group(1), 16), m.group(2), line) for line in sass.splitlines()
             if (m := _INSTRUCTION.search(line))]
    found = []
    for address, _, line in lines:
        branch = _BRANCH.search(line)
        if branch and branch.group(1) and int(branch.group(1), 16) < address:
            start = int(branch.group(1), 16)
            ops = collections.Counter(op for a, op, _ in lines if start <= a <= address)
            found.append({"range": f"{start:#x}-{address:#x}", "instructions": sum(ops.values()),
                          **{k.lower(): ops[k] for k in ("SHFL", "MUFU", "LDG", "STG", "BAR")}})
    return sorted(found, key=lambda loop: loop["instructions"])


def step_loop(found: list[dict]) -> dict:
    """The loop that takes the scan's steps: the innermost one with special-function ops (each step's
    exponentials), since a loop without any (the forward's fold of its segments' summaries) takes none."""
    return next((loop for loop in found if loop["mufu"]), found[0] if found else {})


def _tile_elements(config: dict, kwargs: dict) -> float:
    """Elements per thread of one tile: (channels x n), the selective forward's; (channels x steps), the selective
    backward's; (steps x features), the linear scan's."""
    sizes = {**kwargs, **config}
    if "BLOCK_F" in sizes:
        return sizes["BLOCK_T"] * sizes["BLOCK_F"] / (32 * sizes.get("num_warps", 4))
    inner = sizes["BLOCK_N"] if "BLOCK_N" in sizes else sizes["BLOCK_T"]
    return sizes["BLOCK_D"] * inner / (32 * sizes["num_warps"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--case", default="bench S6 8x1536x2048 plain",
                        help="a case of the compile check's full or benchmark tier (seqssm.ops.triton_aot.cases)")
    parser.add_argument("--out", default=None, help="also write the rows as JSON here")
    args = parser.parse_args(argv)

    import triton

    from seqssm.ops import triton_aot

    cases = {c.name: c for c in triton_aot.cases("full") + triton_aot.bench_cases()}
    if args.case not in cases:
        parser.error(f"no case {args.case!r}; the compile check's full and benchmark tiers have: {', '.join(cases)}")
    rows = []
    with triton_aot.targeting(args.arch):
        for launch in triton_aot.capture(cases[args.case]):
            if not launch.kernel_name.startswith(("selective_scan", "linear_scan")):
                continue
            for config in launch.configs():
                cubin = triton_aot.compile_kernel(launch, config).asm["cubin"]
                found = loops(triton_aot.cuobjdump(cubin, "--dump-sass"))
                per_thread = _tile_elements(config, launch.kwargs)
                tile = ("BLOCK_D", "BLOCK_F", "BLOCK_T", "STAGES", "num_warps")
                inner = step_loop(found)
                name = launch.kernel_name + (" (summary pass)" if launch.kwargs.get("SUMMARY") else "")
                rows.append({"kernel": name, "config": {k: v for k, v in config.items() if k in tile},
                             "registers": triton_aot._resources(cubin)["registers"],
                             "tile_elements_per_thread": per_thread, "loops": found,
                             "per_element": round(inner["instructions"] / per_thread, 1) if inner else None})
                print(f"{name} {rows[-1]['config']}: {rows[-1]['registers']} registers, step loop "
                      f"{inner.get('instructions')} instructions ({inner.get('shfl')} shuffles, {inner.get('mufu')} "
                      f"special-function) for {per_thread:g} elements a thread: {rows[-1]['per_element']} each",
                      flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"arch": args.arch, "case": args.case, "triton": triton.__version__, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
