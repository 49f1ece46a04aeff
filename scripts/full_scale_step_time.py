"""Seconds per training step of the supervised reproductions' full-scale arms (the claims of
seqssm.study.reproduce.CLAIMS that state their `full_scale_tokens`: rope, bidirectional, species-pretraining)
measured on a GPU, beside the estimate `seqssm reproduce list` prints for them (the miniature's CPU seconds per
step x the FLOP ratio / an assumed H100 throughput over one CPU thread).

    python scripts/full_scale_step_time.py plan runs/full_scale_plan.json       # here: every arm's model and shapes
    python scripts/full_scale_step_time.py measure runs/full_scale_plan.json --out runs/full_scale_steps.json

`measure` needs torch and seqssm.models only (no Lightning, no data), so it runs on a bare GPU machine with the
source tree: one training step is the model's forward on random tokens of the full-scale batch and length, the
task's loss (classification, or per-token for NTP / MLM), backward and an AdamW step, in fp32 as the recipes train;
the median of `--steps` steps after `--warmup`, each synchronised.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TASKS = {"seqssm.tasks.Classification": "classification", "seqssm.tasks.NextTokenPrediction": "ntp",
         "seqssm.tasks.MaskedLM": "mlm"}


def plan(path: Path) -> None:
    """Write every full-scale arm of the claims with a `full_scale_tokens` shape: its model, overrides, task, batch,
    length, total steps over its seeds, and the claim's estimated seconds per step and hours."""
    import tempfile

    from seqssm.study.reproduce import CLAIMS
    from seqssm.study.reproduce.claim import Settings
    from seqssm.study.reproduce.report import full_scale_s_per_unit

    arms = []
    with tempfile.TemporaryDirectory() as out:
        for name, cls in CLAIMS.items():
            if cls.full_scale_tokens is None or cls.replicates:  # a replication runs another claim's arms
                continue
            claim = cls(Settings(out=Path(out), scale="full"))
            estimate_s = full_scale_s_per_unit(claim.declaration.full)
            vocab, classes, length = (cls.full_scale_tokens.vocab, cls.full_scale_tokens.classes,
                                      cls.full_scale_tokens.length)
            by_arm: dict[str, dict] = {}
            for run in claim.runs():
                if run.kind != "fit":
                    continue
                model = run.config["model"]
                init = model["init_args"]
                task = TASKS[model["class_path"]]
                spec = by_arm.setdefault(run.arm, {
                    "claim": name, "arm": run.arm, "model": init["model"], "overrides": init.get("model_overrides", {}),
                    "task": task, "vocab_size": vocab, "n_classes": classes if task == "classification" else None,
                    "batch": run.config["data"]["init_args"]["batch_size"], "length": length, "steps": 0,
                    "estimate_s_per_step": estimate_s})
                spec["steps"] += run.units
            hours = sum(spec["steps"] for spec in by_arm.values()) * estimate_s / 3600
            for spec in by_arm.values():
                spec["claim_estimate_h"] = hours
            arms += by_arm.values()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(arms, indent=1) + "\n")
    print(f"{len(arms)} arms -> {path}")


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def step_time(spec: dict, warmup: int, steps: int, device: str = "cuda") -> float:
    """Median seconds of one training step of `spec`'s model on `device`."""
    import torch
    import torch.nn.functional as F

    from seqssm.models import build

    torch.manual_seed(0)
    model = build(spec["model"], vocab_size=spec["vocab_size"], n_classes=spec["n_classes"], **spec["overrides"]).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch, length = spec["batch"], spec["length"]
    inputs = torch.randint(0, spec["vocab_size"], (batch, length), device=device)
    classes = spec["n_classes"] or spec["vocab_size"]
    targets = torch.randint(0, classes, (batch,) if spec["n_classes"] else (batch, length), device=device)
    times = []
    for i in range(warmup + steps):
        sync(device)
        start = time.perf_counter()
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(path: Path, out: Path, warmup: int, steps: int) -> None:
    """Time every arm of the plan; write the plan with `measured_s_per_step` and `measured_h` per arm, and the
    claims' measured hours beside their estimates."""
    import torch

    arms = json.loads(path.read_text())
    for spec in arms:
        spec["measured_s_per_step"] = step_time(spec, warmup, steps)
        spec["measured_h"] = spec["steps"] * spec["measured_s_per_step"] / 3600
        print(f"{spec['claim']:20s} {spec['arm']:18s} {spec['measured_s_per_step'] * 1000:8.1f} ms per step "
              f"(estimate {spec['estimate_s_per_step'] * 1000:.1f}), {spec['measured_h']:.2f} h", flush=True)
    claims = {}
    for spec in arms:
        c = claims.setdefault(spec["claim"], {"estimate_h": spec["claim_estimate_h"], "measured_h": 0.0})
        c["measured_h"] += spec["measured_h"]
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "warmup": warmup, "steps": steps,
              "claims": claims, "arms": arms}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    for name, c in claims.items():
        print(f"{name:20s} measured {c['measured_h']:.1f} h vs estimated {c['estimate_h']:.1f} h")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=("plan", "measure"))
    p.add_argument("plan", type=Path, help="the plan file (written by `plan`, read by `measure`)")
    p.add_argument("--out", type=Path, default=Path("runs/full_scale_steps.json"))
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    ns = p.parse_args()
    if ns.mode == "plan":
        plan(ns.plan)
    else:
        measure(ns.plan, ns.out, ns.warmup, ns.steps)


if __name__ == "__main__":
    main()
