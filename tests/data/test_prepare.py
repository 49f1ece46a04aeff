"""scripts/prepare_data.py: converting downloaded archives into the layouts the readers expect."""

import importlib.util
import io
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest

from seqssm.data import AANDataModule, CIFAR10DataModule, IMDBDataModule, ListOpsDataModule, PathfinderDataModule

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "prepare_data.py"


@pytest.fixture(scope="module")
def prepare():
    spec = importlib.util.spec_from_file_location("prepare_data", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


def make_tar(path, files: dict[str, bytes]):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_lra_release_archive(tmp_path, prepare):
    from seqssm.data.generators.pathfinder import write_pathfinder

    src = write_pathfinder(tmp_path / "pf", 10, seed=0, res=32)
    files = {f"lra_release/pathfinder32/curv_contour_length_14/{p.relative_to(src)}": p.read_bytes()
             for p in src.rglob("*") if p.is_file()}
    tsv = "Source\tTarget\n( ( ( [MAX 2 ) 9 ) ] )\t9\n"
    for split in ("train", "val", "test"):
        files[f"lra_release/listops-1000/basic_{split}.tsv"] = tsv.encode()
    for split in ("train", "eval", "test"):
        files[f"lra_release/tsv_data/new_aan_pairs.{split}.tsv"] = b"1\ta\tb\tfoo\tbar\n0\tc\td\tx\ty\n"
    files["lra_release/listops-1000/../../evil.tsv"] = b"x"
    make_tar(tmp_path / "lra_release.gz", files)
    prepare(["listops", "--out", str(tmp_path / "lo"), "--source", str(tmp_path / "lra_release.gz")])
    prepare(["aan", "--out", str(tmp_path / "aan"), "--source", str(tmp_path / "lra_release.gz")])
    prepare(["pathfinder", "--out", str(tmp_path / "pfo"), "--source", str(tmp_path / "lra_release.gz")])
    lo = ListOpsDataModule(data_dir=tmp_path / "lo")
    lo.setup()
    assert lo.splits["test"][0][1] == 9
    aan = AANDataModule(data_dir=tmp_path / "aan")
    aan.setup()
    assert len(aan.splits["val"]) == 2
    pf = PathfinderDataModule(data_dir=tmp_path / "pfo")
    pf.setup()
    assert sum(len(s) for s in pf.splits.values()) == 10
    assert not (tmp_path / "evil.tsv").exists()


def test_cifar_and_imdb_archives(tmp_path, prepare):
    batch = pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [3, 4]})
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    make_tar(tmp_path / "c.tar.gz", {f"cifar-10-batches-py/{n}": batch for n in names})
    prepare(["cifar10", "--out", str(tmp_path / "cifar"), "--source", str(tmp_path / "c.tar.gz")])
    dm = CIFAR10DataModule(data_dir=tmp_path / "cifar", mode="categorical")
    dm.setup()
    assert len(dm.splits["test"]) == 2
    reviews = {f"aclImdb/{s}/{lab}/{i}_7.txt": f"{s} {lab} {i}".encode()
               for s in ("train", "test") for lab in ("pos", "neg") for i in range(2)}
    reviews["aclImdb/train/unsup/0_0.txt"] = b"unlabelled"
    make_tar(tmp_path / "aclImdb_v1.tar.gz", reviews)
    prepare(["imdb", "--out", str(tmp_path / "imdb"), "--source", str(tmp_path / "aclImdb_v1.tar.gz")])
    im = IMDBDataModule(data_dir=tmp_path / "imdb")
    im.setup()
    assert len(im.splits["train"]) == 4 and sorted(im.splits["train"][i][1] for i in range(4)) == [0, 0, 1, 1]


def test_no_source_for_real_only_datasets(tmp_path, prepare):
    with pytest.raises(SystemExit, match="no generator"):
        prepare(["cifar10", "--out", str(tmp_path)])
