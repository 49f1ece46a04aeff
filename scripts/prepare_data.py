#!/usr/bin/env python
"""Generate a dataset offline, or convert a downloaded archive into the layout seqssm reads.

    python scripts/prepare_data.py listops    --out data/listops [--n-train 96000 ...]
    python scripts/prepare_data.py pathfinder --out data/pathfinder --resolution 32 [--n 10000]
    python scripts/prepare_data.py species    --out data/species [--length 200000 --order 4]
    python scripts/prepare_data.py listops    --out data/listops    --source lra_release.gz
    python scripts/prepare_data.py pathfinder --out data/pathfinder --source lra_release.gz --resolution 32
    python scripts/prepare_data.py aan        --out data/aan        --source lra_release.gz
    python scripts/prepare_data.py imdb       --out data/imdb       --source aclImdb_v1.tar.gz
    python scripts/prepare_data.py cifar10    --out data/cifar10    --source cifar-10-python.tar.gz
    python scripts/prepare_data.py mnist      --out data/mnist      --source <dir with the IDX files>

Nothing is downloaded: `--source` is a file you fetched (see data/README.md).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
from pathlib import Path

from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing


def extract(archive: Path, out: Path, want, rename) -> int:
    """Copy tar members for which `want(name)` holds to `out / rename(name)`; returns the count."""
    n = 0
    with tarfile.open(archive, "r:*") as tar:
        for m in tqdm(tar, desc=f"scanning {archive.name}", unit=" files"):
            if not m.isfile() or not want(m.name):
                continue
            rel = Path(rename(m.name))
            if rel.is_absolute() or ".." in rel.parts:
                continue  # never write outside --out
            dest = out / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(m) as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst)
            n += 1
    if n == 0:
        sys.exit(f"{archive}: no matching files found; is this the right archive?")
    return n


def after(marker: str):
    """rename(): keep the part of a member path after `marker/`."""
    return lambda name: name.split(marker + "/", 1)[1]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=["listops", "pathfinder", "species", "aan", "imdb", "cifar10", "mnist"])
    p.add_argument("--out", type=Path, required=True, help="data directory to write (the DataModule's data_dir)")
    p.add_argument("--source", type=Path, help="downloaded archive or folder to convert instead of generating")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-train", type=int, default=96_000, help="listops")
    p.add_argument("--n-val", type=int, default=2_000, help="listops")
    p.add_argument("--n-test", type=int, default=2_000, help="listops")
    p.add_argument("--min-length", type=int, default=500, help="listops: shortest expression (tokens)")
    p.add_argument("--max-length", type=int, default=2000, help="listops: longest expression (tokens)")
    p.add_argument("--resolution", type=int, default=32, help="pathfinder")
    p.add_argument("--level", default="curv_contour_length_14", help="pathfinder")
    p.add_argument("--n", type=int, default=10_000, help="pathfinder: images to generate")
    p.add_argument("--species", nargs="+", default=["human", "lemur", "mouse", "pig", "hippo"])
    p.add_argument("--length", type=int, default=200_000, help="species: bases per synthetic chromosome")
    p.add_argument("--order", type=int, default=4, help="species: Markov order")
    a = p.parse_args(argv)
    out = a.out
    out.mkdir(parents=True, exist_ok=True)

    if a.source is not None and not a.source.exists():
        sys.exit(f"--source {a.source} does not exist")
    if a.source is None and a.name in ("aan", "imdb", "cifar10", "mnist"):
        sys.exit(f"{a.name} has no generator: pass --source (see data/README.md for where to get it)")

    if a.name == "listops" and a.source is None:
        from seqssm.data.generators.listops import write_listops

        write_listops(out, a.n_train, a.n_val, a.n_test, seed=a.seed, min_length=a.min_length, max_length=a.max_length)
    elif a.name == "listops":
        extract(a.source, out, lambda n: "listops-1000/basic_" in n and n.endswith(".tsv"), lambda n: Path(n).name)
    elif a.name == "pathfinder" and a.source is None:
        from seqssm.data.generators.pathfinder import write_pathfinder

        write_pathfinder(out, a.n, seed=a.seed, res=a.resolution, level=a.level)
    elif a.name == "pathfinder":
        marker = f"pathfinder{a.resolution}"
        extract(a.source, out, lambda n: f"/{marker}/" in "/" + n, lambda n: marker + "/" + after(marker)(n))
    elif a.name == "species":
        if a.source is not None:
            sys.exit("species: put real genomes at <out>/<species>/chr<C>.fna (see data/README.md); "
                     "without --source a synthetic genome is generated")
        from seqssm.data.generators.genome import write_genomes

        write_genomes(out, a.species, chrom_length=a.length, order=a.order, seed=a.seed)
    elif a.name == "aan":
        extract(a.source, out, lambda n: Path(n).name.startswith("new_aan_pairs.") and n.endswith(".tsv"),
                lambda n: Path(n).name)
    elif a.name == "cifar10":
        extract(a.source, out, lambda n: "cifar-10-batches-py/" in n,
                lambda n: "cifar-10-batches-py/" + after("cifar-10-batches-py")(n))
    elif a.name == "imdb":
        convert_imdb(a.source, out)
    elif a.name == "mnist":
        names = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
        for name in names:
            found = [a.source / f for f in (name, name + ".gz") if (a.source / f).exists()]
            if not found:
                sys.exit(f"{a.source}: no {name}[.gz]")
            if found[0].resolve() != (out / found[0].name).resolve():
                shutil.copy(found[0], out / found[0].name)
    print(f"{a.name}: written to {out}")


def convert_imdb(source: Path, out: Path) -> None:
    """aclImdb_v1.tar.gz (or an extracted aclImdb/ folder) -> out/{train,test}.parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = {"train": ([], []), "test": ([], [])}

    def add(name: str, text: bytes) -> None:
        parts = Path(name).parts
        if len(parts) >= 3 and parts[-3] in rows and parts[-2] in ("pos", "neg") and name.endswith(".txt"):
            rows[parts[-3]][0].append(text.decode("utf-8"))
            rows[parts[-3]][1].append(1 if parts[-2] == "pos" else 0)

    if source.is_dir():
        for f in tqdm(sorted(source.rglob("*.txt")), desc="imdb"):
            add(str(f), f.read_bytes())
    else:
        with tarfile.open(source, "r:*") as tar:
            for m in tqdm(tar, desc="imdb", unit=" files"):
                if m.isfile() and m.name.endswith(".txt"):
                    add(m.name, tar.extractfile(m).read())
    for split, (texts, labels) in rows.items():
        if not texts:
            sys.exit(f"{source}: no {split}/pos|neg/*.txt reviews found")
        pq.write_table(pa.table({"text": texts, "label": labels}), out / f"{split}.parquet")


if __name__ == "__main__":
    main()
