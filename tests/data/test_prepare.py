"""`seqssm data prepare`: offline generators, and local copies of the published files unpacked as a download would."""

from __future__ import annotations

import pytest

from seqssm.cli import main
from seqssm.data import (AANDataModule, CIFAR10DataModule, IMDBDataModule, ListOpsDataModule, PathfinderDataModule,
                         SMNISTDataModule, SpeciesDataModule)
from seqssm.data.extract import is_complete
from seqssm.data.sources import DATASETS

from .published import LISTOPS_ROW, acl_imdb, cifar_python, genomes, lra_release, mnist


def prepare(*args: str) -> None:
    main(["data", "prepare", *args])


def test_lra_release_archive(tmp_path):
    archive = tmp_path / "lra_release.gz"
    archive.write_bytes(lra_release(tmp_path))
    for name in ("listops", "aan", "pathfinder"):
        prepare(name, "--data-dir", str(tmp_path / "data"), "--source", str(archive))
        assert is_complete(DATASETS[name], tmp_path / "data" / name)
    lo = ListOpsDataModule(data_dir=tmp_path / "data" / "listops")
    lo.setup()
    assert lo.splits["train"][0][1] == int(LISTOPS_ROW.split("\t")[1])
    aan = AANDataModule(data_dir=tmp_path / "data" / "aan")
    aan.setup()
    assert len(aan.splits["val"]) == 2
    pf = PathfinderDataModule(data_dir=tmp_path / "data" / "pathfinder", resolution=128)
    pf.setup()
    assert sum(len(s) for s in pf.splits.values()) == 10
    assert not list(tmp_path.rglob("evil.tsv"))


def test_cifar_imdb_archives_and_file_folders(tmp_path):
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(cifar_python())
    prepare("cifar10", "--out", str(tmp_path / "c"), "--source", str(tmp_path / "cifar-10-python.tar.gz"))
    dm = CIFAR10DataModule(data_dir=tmp_path / "c", mode="categorical")
    dm.setup()
    assert len(dm.splits["test"]) == 4
    (tmp_path / "aclImdb_v1.tar.gz").write_bytes(acl_imdb())
    prepare("imdb", "--out", str(tmp_path / "imdb"), "--source", str(tmp_path / "aclImdb_v1.tar.gz"))
    im = IMDBDataModule(data_dir=tmp_path / "imdb")
    im.setup()
    assert sorted(im.splits["train"][i][1] for i in range(len(im.splits["train"]))) == [0, 0, 1, 1]
    (tmp_path / "idx").mkdir()
    mnist(tmp_path / "idx")  # the four published .gz files in one folder
    prepare("mnist", "--out", str(tmp_path / "mnist"), "--source", str(tmp_path / "idx"))
    sm = SMNISTDataModule(data_dir=tmp_path / "mnist")
    sm.setup()
    assert len(sm.splits["test"]) == 6
    for name, data in genomes().items():  # HyenaDNA's wget layout: <species>/chr<C>.fna.gz
        (tmp_path / "ncbi" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "ncbi" / name).write_bytes(data)
    prepare("species", "--data-dir", str(tmp_path / "data"), "--source", str(tmp_path / "ncbi"))
    sp = SpeciesDataModule(data_dir=tmp_path / "data" / "species", max_length=16, val_size=4, test_size=4)
    sp.setup()
    assert sp.splits["val"][0][0].shape == (16,)


def test_generators(tmp_path):
    prepare("listops", "--data-dir", str(tmp_path), "--n-train", "8", "--n-val", "4", "--n-test", "4",
            "--min-length", "5", "--max-length", "60")
    lo = ListOpsDataModule(data_dir=tmp_path / "listops")
    lo.setup()
    assert [len(lo.splits[s]) for s in ("train", "val", "test")] == [8, 4, 4]
    prepare("pathfinder", "--data-dir", str(tmp_path), "--resolution", "32", "--n", "10")
    pf = PathfinderDataModule(data_dir=tmp_path / "pathfinder")
    pf.setup()
    assert sum(len(s) for s in pf.splits.values()) == 10
    prepare("species", "--out", str(tmp_path / "g"), "--species", "human", "--length", "300")
    sp = SpeciesDataModule(data_dir=tmp_path / "g", species=("human",), max_length=16, val_size=2, test_size=2)
    sp.setup()
    assert sp.splits["test"][0][0].shape == (16,)


def test_user_errors_exit_2_with_one_line(tmp_path, capsys):
    cases = [(["cifar10", "--data-dir", str(tmp_path)], "cifar10 has no generator: `seqssm data download cifar10`"),
             (["mnist", "--data-dir", str(tmp_path)], "offline, bring its published files (train-images-idx3-ubyte.gz, "
              "train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz) over from a machine "
              "that can reach it and pass --source with the folder holding them"),
             (["imdb", "--source", str(tmp_path / "nope.tar.gz")], "does not exist"),
             (["mnist", "--source", str(tmp_path)], "no train-images-idx3-ubyte.gz")]
    (tmp_path / "wrong.tar.gz").write_bytes(cifar_python())
    cases.append((["imdb", "--data-dir", str(tmp_path), "--source", str(tmp_path / "wrong.tar.gz")],
                  "unpacking imdb gave no aclImdb/train/pos"))
    (tmp_path / "cut.tar.gz").write_bytes(acl_imdb()[:300])
    cases.append((["imdb", "--data-dir", str(tmp_path), "--source", str(tmp_path / "cut.tar.gz")],
                  "cut.tar.gz: cannot read the archive"))
    for args, message in cases:
        with pytest.raises(SystemExit) as e:
            prepare(*args)
        err = capsys.readouterr().err
        assert e.value.code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "imdb").exists() and not list(tmp_path.glob(".*.unpacking"))


def test_truncated_genome_is_rejected(tmp_path):
    from seqssm.errors import DataFormatError
    from seqssm.data.extract import gunzip_file

    cut = tmp_path / "chr1.fna.gz"
    cut.write_bytes(next(iter(genomes().values()))[:-9])
    with pytest.raises(DataFormatError, match="chr1.fna.gz: truncated or corrupt gzip"):
        gunzip_file(cut, tmp_path / "chr1.fna")
