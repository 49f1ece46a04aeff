"""CPU time of one MambaBlock forward+backward (and a carried-state scan), two source trees side by side.

    python scripts/bench_mamba_block.py --trees /path/to/old /path/to/new --repeats 7 --out runs/bench_mamba_block.json

Each tree is a directory holding a `seqssm` package. For every repeat and every shape the trees run
one after the other, each in a fresh subprocess (PYTHONPATH = the tree) that times `--iters` calls
after a warm-up, so that machine noise hits both alike; the JSON holds every run, the median per
tree and the ratio of medians (second tree / first). Blocks: S6 and S4D Mamba blocks (and a
bidirectional S6 one, forward+backward only), float32, dropout 0, the same seed in both trees. Without --trees the current checkout is timed alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SHAPES = [  # (ssp, batch, length, d_model, bidirectional)
    ("s6", 4, 256, 64, 0),
    ("s6", 1, 1024, 128, 0),
    ("s4d", 4, 256, 64, 0),
    ("s6", 4, 256, 64, 1),
]


def _child(ssp: str, batch: int, length: int, d_model: int, bidirectional: int, iters: int, threads: int) -> dict:
    import torch

    from seqssm.blocks import MambaBlock

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    try:  # a source tree with typed block configs
        from seqssm.blocks import MambaBlockConfig, SSPConfig

        block = MambaBlock(d_model, MambaBlockConfig(SSPConfig(ssp, d_state=16), bidirectional=bool(bidirectional)))
    except ImportError:  # one from before them
        block = MambaBlock(d_model, ssp, d_state=16, bidirectional=bool(bidirectional))
    x = torch.randn(batch, length, d_model, requires_grad=True)

    def fwd_bwd():
        block(x).sum().backward()

    def scan():
        with torch.no_grad():
            block.scan(x, block.initial_state(batch))

    out = {}
    for name, fn in (("fwd_bwd", fwd_bwd), ("scan_no_grad", scan)):
        if name == "scan_no_grad" and bidirectional:
            continue  # a bidirectional block has no scan
        fn()  # warm-up
        fn()
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        out[name] = (time.perf_counter() - start) / iters
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs="*", default=[os.getcwd()])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--out", default=None)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (1: least hurt by a busy machine)")
    parser.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        ssp, *nums = args.child
        print(json.dumps(_child(ssp, *map(int, nums))))
        return
    runs = [{str(s): [] for s in SHAPES} for _ in args.trees]
    script = os.path.abspath(__file__)
    for _ in range(args.repeats):
        for shape in SHAPES:
            for i, tree in enumerate(args.trees):
                env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
                cmd = [sys.executable, script, "--child", *map(str, shape), str(args.iters), str(args.threads)]
                result = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd="/")
                runs[i][str(shape)].append(json.loads(result.stdout))
    summary = []
    for shape in SHAPES:
        row = {"ssp": shape[0], "batch": shape[1], "length": shape[2], "d_model": shape[3], "bidirectional": shape[4]}
        for metric in ("fwd_bwd", "scan_no_grad"):
            if metric not in runs[0][str(shape)][0]:
                continue
            medians = [statistics.median(r[metric] for r in tree_runs[str(shape)]) for tree_runs in runs]
            row[metric + "_median_s"] = medians
            if len(medians) == 2:
                row[metric + "_ratio"] = medians[1] / medians[0]
        summary.append(row)
        print(json.dumps(row))
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump({"trees": args.trees, "threads": args.threads, "summary": summary, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
