"""Tiny stand-ins for every published source file, in the exact layout of the real ones (see seqssm.data.sources)."""

from __future__ import annotations

import gzip
import io
import pickle
import tarfile
from pathlib import Path, PurePosixPath

import numpy as np

from seqssm.data.generators.pathfinder import write_pathfinder
from seqssm.data.io import write_idx
from seqssm.data.sources import DATASETS

LISTOPS_ROW = "( ( ( [MAX 2 ) 9 ) ] )\t9"  # the nested copy's first row: the one S4 (and we) read


def tar_gz(members: dict[str, bytes]) -> bytes:
    """A gzipped tar holding `members` ({path: bytes}) with a directory entry for every parent, as `tar czf` writes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        seen = set()
        for name, data in members.items():
            for parent in reversed(PurePosixPath(name).parents[:-1]):
                if str(parent) not in seen:
                    seen.add(str(parent))
                    info = tarfile.TarInfo(str(parent))
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buffer.getvalue(), mtime=0)


def lra_release(workdir: Path) -> bytes:
    """`lra_release.gz`: listops-1000, tsv_data and pathfinder{32,128} under `lra_release/lra_release/`, plus the
    stray top-level `lra_release/listops-1000` copy the real archive also holds."""
    root = "lra_release/lra_release/"
    members = {}
    for split in ("train", "val", "test"):
        members[f"{root}listops-1000/basic_{split}.tsv"] = f"Source\tTarget\n{LISTOPS_ROW}\n( [MIN 4 7 ] )\t4\n".encode()
        members[f"lra_release/listops-1000/basic_{split}.tsv"] = b"Source\tTarget\n( [SM 1 1 ] )\t2\n"
    for split in ("train", "eval", "test"):
        members[f"{root}tsv_data/new_aan_pairs.{split}.tsv"] = b"1\ta\tb\tfirst doc\tsecond doc\n0\tc\td\tx y\tz\n"
    for res in (32, 128):
        src = write_pathfinder(workdir / f"pf{res}", 10, seed=res, res=res)
        for p in sorted(src.rglob("*")):
            if p.is_file():
                members[f"{root}pathfinder{res}/curv_contour_length_14/{p.relative_to(src).as_posix()}"] = p.read_bytes()
    members[f"{root}listops-1000/../../../evil.tsv"] = b"never written"
    return tar_gz(members)


def acl_imdb() -> bytes:
    """`aclImdb_v1.tar.gz`: aclImdb/{train,test}/{pos,neg}/<id>_<stars>.txt plus unsup, vocab and README."""
    members = {f"aclImdb/{s}/{y}/{i}_{8 if y == 'pos' else 2}.txt": f"{s} {y} review {i}".encode()
               for s in ("train", "test") for y in ("pos", "neg") for i in range(2)}
    members["aclImdb/train/unsup/0_0.txt"] = b"unlabelled"
    members["aclImdb/imdb.vocab"] = b"the\nand\n"
    members["aclImdb/README"] = b"Large Movie Review Dataset v1.0\n"
    return tar_gz(members)


def cifar_python(seed: int = 0) -> bytes:
    """`cifar-10-python.tar.gz`: cifar-10-batches-py/ with five training batches, test_batch and batches.meta."""
    rng = np.random.default_rng(seed)

    def batch(n):
        return pickle.dumps({b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"labels": list(range(n))})

    members = {f"cifar-10-batches-py/data_batch_{i}": batch(4) for i in range(1, 6)}
    members["cifar-10-batches-py/test_batch"] = batch(4)
    members["cifar-10-batches-py/batches.meta"] = pickle.dumps({b"label_names": [b"airplane"] * 10})
    members["cifar-10-batches-py/readme.html"] = b"<html></html>"
    return tar_gz(members)


def mnist(workdir: Path) -> dict[str, bytes]:
    """The four gzipped IDX files."""
    rng = np.random.default_rng(0)
    out = {}
    for split, n in (("train", 20), ("t10k", 6)):
        for kind, array in (("images-idx3", rng.integers(0, 256, (n, 28, 28))), ("labels-idx1", np.arange(n) % 10)):
            path = workdir / f"{split}-{kind}-ubyte.gz"
            write_idx(path, array)
            out[path.name] = path.read_bytes()
    return out


def genomes() -> dict[str, bytes]:
    """`<species>/chr<C>.fna.gz` for every file of the species table: one soft-masked FASTA record each."""
    rng = np.random.default_rng(0)
    out = {}
    for f in DATASETS["species"].files:
        bases = "".join(rng.choice(list("ACGTacgtN"), 150))
        lines = "\n".join(bases[i : i + 80] for i in range(0, len(bases), 80))
        out[f.name] = gzip.compress(f">CM0000.1 chromosome {f.name}\n{lines}\n".encode(), mtime=0)
    return out


def published_files(workdir: Path) -> dict[str, bytes]:
    """{source name: bytes} of every dataset's source files."""
    return {"lra_release.gz": lra_release(workdir), "aclImdb_v1.tar.gz": acl_imdb(),
            "cifar-10-python.tar.gz": cifar_python(), **mnist(workdir), **genomes()}
