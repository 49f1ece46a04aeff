#!/usr/bin/env python
"""Batches/s of every DataModule on generated (or stand-in) data, against a model step.

    python scripts/bench_data.py [--batch-size 32] [--batches 50] [--workers 0] [--root /tmp/seqssm-bench]

For each dataset: time to set up from scratch (tokenise + write the Arrow cache), time to set
up again (cache hit), training batches/s, and the step time of a small S4D classifier
(d_model 64, 2 layers, forward + backward) on one such batch, so the ratio says whether
loading could be the bottleneck (ratio = loader batches/s x model step seconds; > 1 is fine).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seqssm.data import (AANDataModule, CIFAR10DataModule, IMDBDataModule, ListOpsDataModule,  # noqa: E402
                         PathfinderDataModule, SMNISTDataModule, SpeciesDataModule)
from seqssm.data.generators import standins, write_genomes, write_listops, write_pathfinder  # noqa: E402


def datasets(root: Path, bs: int, workers: int):
    """(name, make-data function, DataModule factory) at quickstart sizes."""
    kw = {"batch_size": bs, "num_workers": workers}
    return [
        ("listops", lambda d: write_listops(d, 3000, 200, 200, seed=0),
         lambda d: ListOpsDataModule(data_dir=d, **kw)),
        ("imdb-1024", lambda d: standins.write_imdb_standin(d, 2000),
         lambda d: IMDBDataModule(data_dir=d, max_length=1024, **kw)),
        ("imdb-4096", lambda d: standins.write_imdb_standin(d, 2000),
         lambda d: IMDBDataModule(data_dir=d, max_length=4096, **kw)),
        ("aan", lambda d: standins.write_aan_standin(d, 600),
         lambda d: AANDataModule(data_dir=d, **kw)),
        ("cifar10-numeric", lambda d: standins.write_cifar_standin(d, 1000),
         lambda d: CIFAR10DataModule(data_dir=d, mode="numeric", **kw)),
        ("cifar10-categorical", lambda d: standins.write_cifar_standin(d, 1000),
         lambda d: CIFAR10DataModule(data_dir=d, mode="categorical", **kw)),
        ("pathfinder32", lambda d: write_pathfinder(d, 2000, seed=0, res=32),
         lambda d: PathfinderDataModule(data_dir=d, mode="categorical", **kw)),
        ("smnist-permuted", lambda d: standins.write_mnist_standin(d),
         lambda d: SMNISTDataModule(data_dir=d, permuted=True, **kw)),
        ("species-1k", lambda d: write_genomes(d, chrom_length=200_000),
         lambda d: SpeciesDataModule(data_dir=d, max_length=1024, train_size=bs * 100, **kw)),
        ("species-16k", lambda d: write_genomes(d, chrom_length=200_000),
         lambda d: SpeciesDataModule(data_dir=d, max_length=16384, train_size=bs * 100, **kw)),
    ]


class Classifier(nn.Module):
    """Embedding/linear -> 2 x (S4D + GELU + residual) -> mean pool -> head (a quickstart-sized model)."""

    def __init__(self, dm, d_model: int = 64, n_layers: int = 2):
        super().__init__()
        from seqssm.layers import S4D

        self.embed = nn.Embedding(dm.vocab_size, d_model) if dm.vocab_size else nn.Linear(dm.d_input, d_model)
        self.layers = nn.ModuleList(S4D(d_model) for _ in range(n_layers))
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(n_layers))
        self.head = nn.Linear(d_model, dm.n_classes or dm.vocab_size)

    def forward(self, x):
        h = self.embed(x)
        for layer, norm in zip(self.layers, self.norms):
            h = norm(h + nn.functional.gelu(layer(h)))
        return self.head(h.mean(1))


def model_step_seconds(dm, batch, repeats: int = 3) -> float:
    model = Classifier(dm)
    opt = torch.optim.AdamW(model.parameters(), 1e-3)
    labels = batch.get("labels", torch.zeros(len(batch["inputs"]), dtype=torch.long))
    times = []
    for _ in range(repeats + 1):
        t = time.perf_counter()
        loss = nn.functional.cross_entropy(model(batch["inputs"]), labels % model.head.out_features)
        loss.backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t)
    return min(times[1:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--batches", type=int, default=50)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--root", type=Path, default=Path("/tmp/seqssm-bench"))
    p.add_argument("--only", nargs="*", help="dataset names to run")
    p.add_argument("--no-model", action="store_true", help="skip the model step timing")
    a = p.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    print(f"{'dataset':22s} {'setup(s)':>9s} {'cached(s)':>9s} {'batches/s':>10s} {'shape':>16s} "
          f"{'step(s)':>8s} {'ratio':>7s}")
    for name, make, factory in datasets(a.root, a.batch_size, a.workers):
        if a.only and name not in a.only:
            continue
        d = a.root / name.split("-")[0]
        if not d.exists():
            make(d)
        shutil.rmtree(d / ".cache", ignore_errors=True)
        t = time.perf_counter()
        factory(d).setup()
        setup_s = time.perf_counter() - t
        t = time.perf_counter()
        dm = factory(d)
        dm.setup()
        cached_s = time.perf_counter() - t
        loader = dm.train_dataloader()
        it = iter(loader)
        first = next(it)
        t, n = time.perf_counter(), 0
        while n < a.batches:
            try:
                next(it)
            except StopIteration:
                it = iter(loader)
                continue
            n += 1
        bps = n / (time.perf_counter() - t)
        step = float("nan") if a.no_model else model_step_seconds(dm, first)
        print(f"{name:22s} {setup_s:9.2f} {cached_s:9.2f} {bps:10.1f} {str(tuple(first['inputs'].shape)):>16s} "
              f"{step:8.3f} {bps * step:7.1f}", flush=True)


if __name__ == "__main__":
    main()
