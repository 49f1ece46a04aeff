"""`seqssm data download / list`: fetched through a loopback mirror, resumed, verified, unpacked where the DataModules look."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from seqssm.data import (AANDataModule, CIFAR10DataModule, IMDBDataModule, ListOpsDataModule, PathfinderDataModule,
                         SMNISTDataModule, SpeciesDataModule)
from seqssm.data import download as dl
from seqssm.errors import CorruptFileError, DigestMismatchError, DownloadError
from seqssm.data.extract import MARKER, is_complete
from seqssm.data.sources import DATASETS

from .published import LISTOPS_ROW, cifar_python, lra_release


def fetch_all(names, root, mirror, **kw):
    logs = []
    dl.download(names, root, mirror=mirror.url, progress=False, log=logs.append, **kw)
    return logs


def first_batch(dm):
    dm.setup()
    return next(iter(dm.train_dataloader()))


BATCH_CHECKS = {
    "listops": lambda root: first_batch(ListOpsDataModule(data_dir=root / "listops", batch_size=2))["inputs"].shape[0] == 2,
    "aan": lambda root: first_batch(AANDataModule(data_dir=root / "aan", batch_size=2))["labels"].tolist() in ([1, 0], [0, 1]),
    "pathfinder": lambda root: all(first_batch(PathfinderDataModule(data_dir=root / "pathfinder", resolution=r,
                                                                    batch_size=2))["inputs"].shape == (2, r * r)
                                   for r in (32, 128)),
    "imdb": lambda root: sorted(first_batch(IMDBDataModule(data_dir=root / "imdb", batch_size=4))["labels"].tolist())
    == [0, 0, 1, 1],  # the four labelled training reviews; unsup/ is not read
    "cifar10": lambda root: first_batch(CIFAR10DataModule(data_dir=root / "cifar10", mode="categorical",
                                                          batch_size=3))["inputs"].shape == (3, 1024),
    "mnist": lambda root: first_batch(SMNISTDataModule(data_dir=root / "mnist", batch_size=4))["inputs"].shape == (4, 784, 1),
    "species": lambda root: first_batch(SpeciesDataModule(data_dir=root / "species", max_length=16, batch_size=4,
                                                          train_size=8, val_size=4, test_size=4))["inputs"].shape == (4, 16),
}


@pytest.mark.parametrize("name", list(DATASETS))
def test_download_unpacks_where_the_datamodule_reads(name, served, tmp_path):
    root = tmp_path / "data"
    logs = fetch_all([name], root, served)
    assert logs == [f"{name}: ready in {root / DATASETS[name].folder}"]
    assert BATCH_CHECKS[name](root)
    assert not list(root.glob(".*.unpacking")) and not list((root / "downloads").rglob("*.part"))
    n_requests = len(served.requests)
    assert n_requests == len(DATASETS[name].files)
    assert fetch_all([name], root, served) == [f"{name}: already complete in {root / DATASETS[name].folder}"]
    assert len(served.requests) == n_requests  # the second call is a no-op: no request at all
    record = json.loads((root / "downloads" / "digests.json").read_text()) if not DATASETS[name].files[0].md5 else {}
    for f in DATASETS[name].files:  # files without a published digest are recorded at first verified use
        if not f.md5:
            assert record[f.name] == {"size": len(served.files[f.name]),
                                      "sha256": hashlib.sha256(served.files[f.name]).hexdigest()}


def test_lra_release_fetched_once_for_three_datasets(served, tmp_path):
    root = tmp_path / "data"
    fetch_all(["listops", "aan", "pathfinder"], root, served)
    assert served.names_requested() == ["lra_release.gz"]
    assert all(is_complete(DATASETS[n], root / n) for n in ("listops", "aan", "pathfinder"))
    # the nested release copy, as S4 reads it, not the stray top-level one; nothing escapes the folder
    assert (root / "listops" / "basic_train.tsv").read_text().splitlines()[1] == LISTOPS_ROW
    assert not list(tmp_path.rglob("evil.tsv"))


def test_dropped_connection_resumes_with_range(served, tmp_path):
    served.drop = 1
    root = tmp_path / "data"
    fetch_all(["cifar10"], root, served)
    data = served.files["cifar-10-python.tar.gz"]
    assert served.requests == [("cifar-10-python.tar.gz", None), ("cifar-10-python.tar.gz", f"bytes={len(data) // 2}-")]
    assert (root / "downloads" / "cifar-10-python.tar.gz").read_bytes() == data
    assert is_complete(DATASETS["cifar10"], root / "cifar10")


def test_interrupted_command_leaves_nothing_complete_and_next_call_resumes(served, tmp_path, monkeypatch):
    monkeypatch.setattr(dl, "ATTEMPTS", 1)
    served.drop, served.fail = 1, 1  # half the file, then the server is gone: the command gives up
    root = tmp_path / "data"
    with pytest.raises(DownloadError, match="run the command again to resume"):
        fetch_all(["listops"], root, served)
    data = served.files["lra_release.gz"]
    part = root / "downloads" / "lra_release.gz.part"
    assert part.read_bytes() == data[: len(data) // 2]
    assert not (root / "downloads" / "lra_release.gz").exists() and not (root / "listops").exists()
    assert "partly downloaded (resumable)" in {r["dataset"]: r for r in dl.listing(root)}["listops"]["status"]
    fetch_all(["listops"], root, served)
    assert served.requests[-1] == ("lra_release.gz", f"bytes={len(data) // 2}-")
    assert (root / "downloads" / "lra_release.gz").read_bytes() == data and not part.exists()
    assert is_complete(DATASETS["listops"], root / "listops")


def test_stale_partial_file_longer_than_the_source_starts_over(served, tmp_path):
    data = served.files["aclImdb_v1.tar.gz"]
    (tmp_path / "downloads").mkdir()
    (tmp_path / "downloads" / "aclImdb_v1.tar.gz.part").write_bytes(data + b"left over from another file")
    fetch_all(["imdb"], tmp_path, served)
    assert [r for _, r in served.requests] == [f"bytes={len(data) + 27}-", None]  # 416, then from byte 0
    assert (tmp_path / "downloads" / "aclImdb_v1.tar.gz").read_bytes() == data


def test_server_ignoring_range_restarts_from_zero(served, tmp_path):
    served.drop, served.ignore_range = 1, True
    root = tmp_path / "data"
    fetch_all(["imdb"], root, served)
    assert (root / "downloads" / "aclImdb_v1.tar.gz").read_bytes() == served.files["aclImdb_v1.tar.gz"]


def test_corrupted_file_fails_verification_and_leaves_nothing(served, tmp_path):
    good = served.files["cifar-10-python.tar.gz"]
    served.files["cifar-10-python.tar.gz"] = bad = good[:100] + bytes([good[100] ^ 1]) + good[101:]
    root = tmp_path / "data"
    with pytest.raises(DigestMismatchError) as e:
        fetch_all(["cifar10"], root, served)
    msg = str(e.value)
    assert msg.startswith("cifar-10-python.tar.gz: md5 mismatch")
    assert hashlib.md5(good).hexdigest() in msg and hashlib.md5(bad).hexdigest() in msg
    assert not list((root / "downloads").iterdir()) and not (root / "cifar10").exists()


def test_no_verify_accepts_a_modified_mirror_file(served, tmp_path):
    served.files["cifar-10-python.tar.gz"] = cifar_python(seed=1)  # a valid archive, but not the published bytes
    root = tmp_path / "data"
    with pytest.raises(DigestMismatchError):
        fetch_all(["cifar10"], root, served)
    fetch_all(["cifar10"], root, served, verify=False)
    assert is_complete(DATASETS["cifar10"], root / "cifar10")
    assert not (root / "downloads" / "digests.json").exists()


def test_unusable_file_without_digest_is_removed_not_recorded(served, tmp_path):
    good = served.files["lra_release.gz"]
    served.files["lra_release.gz"] = b"<html>quota exceeded</html>"  # what a broken mirror may send with a 200
    root = tmp_path / "data"
    with pytest.raises(CorruptFileError, match=r"lra_release.gz: cannot read the archive .* \(removed; run the command "
                                               r"again to download it afresh\)"):
        fetch_all(["aan"], root, served)
    assert not (root / "downloads" / "lra_release.gz").exists() and not (root / "downloads" / "digests.json").exists()
    served.files["lra_release.gz"] = good
    fetch_all(["aan"], root, served)
    assert json.loads((root / "downloads" / "digests.json").read_text())["lra_release.gz"]["size"] == len(good)


def test_recorded_digest_checks_later_downloads(served, tmp_path):
    root = tmp_path / "data"
    fetch_all(["aan"], root, served)
    recorded = json.loads((root / "downloads" / "digests.json").read_text())["lra_release.gz"]["sha256"]
    (root / "downloads" / "lra_release.gz").unlink()
    served.files["lra_release.gz"] = changed = lra_release(tmp_path / "other")[::-1]  # other bytes, same name
    with pytest.raises(DigestMismatchError, match=f"lra_release.gz: sha256 mismatch: expected {recorded}, got "
                                                  f"{hashlib.sha256(changed).hexdigest()}"):
        fetch_all(["listops"], root, served)
    assert not (root / "downloads" / "lra_release.gz").exists() and not (root / "listops").exists()


def test_existing_download_is_checked_before_use(served, tmp_path):
    root = tmp_path / "data"
    fetch_all(["listops"], root, served)
    archive = root / "downloads" / "lra_release.gz"
    data = archive.read_bytes()
    archive.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(DigestMismatchError, match="lra_release.gz: sha256 mismatch"):
        fetch_all(["aan"], root, served)
    assert not archive.exists() and not (root / "aan").exists()
    fetch_all(["aan"], root, served)  # fetched afresh
    assert is_complete(DATASETS["aan"], root / "aan")


def test_interrupted_unpack_leaves_nothing_complete(served, tmp_path, monkeypatch):
    root = tmp_path / "data"
    (root / "listops").mkdir(parents=True)
    (root / "listops" / "basic_train.tsv").write_text("Source\tTarget\n( [SM 1 ] )\t1\n")  # e.g. generated
    calls = []

    def killed_midway(staging, folder, marker):
        calls.append(folder)
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr("seqssm.data.extract.commit", killed_midway)
        with pytest.raises(KeyboardInterrupt):
            fetch_all(["listops"], root, served)
    assert calls and not is_complete(DATASETS["listops"], root / "listops")
    assert not list(root.glob(".*.unpacking"))
    assert {r["dataset"]: r for r in dl.listing(root)}["listops"]["status"] == "incomplete (1 of 3 paths)"
    (root / ".listops.unpacking").mkdir()  # a killed process's leftovers
    (root / ".listops.unpacking" / "junk").write_text("x")
    fetch_all(["listops"], root, served)
    assert is_complete(DATASETS["listops"], root / "listops") and not (root / ".listops.unpacking").exists()
    assert (root / "listops" / "basic_train.tsv").read_text().splitlines()[1] == LISTOPS_ROW


def test_missing_everywhere_names_each_url(served, tmp_path):
    del served.files["train-labels-idx1-ubyte.gz"]
    with pytest.raises(DownloadError, match=r"cannot download train-labels-idx1-ubyte.gz: http://127.0.0.1:\d+/mirror/"
                                            r"train-labels-idx1-ubyte.gz: HTTP 404"):
        fetch_all(["mnist"], tmp_path / "data", served)
    assert not is_complete(DATASETS["mnist"], tmp_path / "data" / "mnist")


def test_mirror_from_environment_and_local_folder(served, tmp_path, monkeypatch):
    folder = tmp_path / "mirror folder"
    for f in DATASETS["mnist"].files:
        (folder / f.name).parent.mkdir(parents=True, exist_ok=True)
        (folder / f.name).write_bytes(served.files[f.name])
    monkeypatch.setenv("SEQSSM_DATA_MIRROR", str(folder))
    dl.download(["mnist"], tmp_path / "data", progress=False, log=lambda s: None)
    assert not served.requests
    assert json.loads((tmp_path / "data" / "mnist" / MARKER).read_text())["files"]["t10k-labels-idx1-ubyte.gz"][
        "from"].startswith("file://")
    assert BATCH_CHECKS["mnist"](tmp_path / "data")


def test_progress_bar_shows_bytes_rate_and_name(served, tmp_path, capsys):
    dl.fetch([served.url + "/aclImdb_v1.tar.gz"], tmp_path / "a.part", progress=True, name="aclImdb_v1.tar.gz")
    err = capsys.readouterr().err
    assert "aclImdb_v1.tar.gz" in err and "B/s" in err and "100%" in err


def test_listing_reports_each_state(served, tmp_path):
    root = tmp_path / "data"
    rows = {r["dataset"]: r for r in dl.listing(root)}
    assert set(rows) == set(DATASETS) and rows["imdb"]["status"] == "missing"
    assert rows["mnist"]["size"] == dl.size_text(sum(len(served.files[f.name]) for f in DATASETS["mnist"].files))
    assert rows["listops"]["size"] == "unknown" and "shared with aan, pathfinder" in rows["listops"]["source"]
    fetch_all(["listops"], root, served)
    (root / "mnist").mkdir()
    for f in DATASETS["mnist"].files:
        (root / "mnist" / f.name).write_bytes(served.files[f.name])
    rows = {r["dataset"]: r for r in dl.listing(root)}
    assert rows["listops"]["status"] == "complete" and rows["listops"]["folder"] == str(root / "listops")
    assert rows["listops"]["size"] == dl.size_text(len(served.files["lra_release.gz"]))  # recorded size
    assert rows["mnist"]["status"] == "present (generated or copied, not downloaded)"


def test_cli_download_list_and_one_line_errors(served, tmp_path, capsys):
    from seqssm.cli import main

    root = tmp_path / "data"
    main(["data", "download", "mnist", "--data-dir", str(root), "--mirror", served.url])
    assert "mnist: ready in" in capsys.readouterr().out
    main(["data", "list", "--data-dir", str(root)])
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["dataset", "source", "size", "folder", "status"]
    assert any(line.startswith("mnist") and line.endswith("complete") for line in out.splitlines())
    served.files["aclImdb_v1.tar.gz"] = b"not the archive"
    with pytest.raises(SystemExit) as e:
        main(["data", "download", "imdb", "--data-dir", str(root), "--mirror", served.url])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("seqssm data: error: aclImdb_v1.tar.gz: md5 mismatch: expected ")
    with pytest.raises(SystemExit) as e:
        main(["data", "download", "dragons", "--data-dir", str(root)])
    assert e.value.code == 2 and "invalid choice: 'dragons'" in capsys.readouterr().err


def test_missing_files_name_the_download_command(tmp_path):
    from seqssm.errors import DataNotFoundError

    with pytest.raises(DataNotFoundError, match=r"seqssm data download cifar10 --data-dir " + str(tmp_path)):
        CIFAR10DataModule(data_dir=tmp_path / "cifar10").setup()
    with pytest.raises(DataNotFoundError, match=r"seqssm data download imdb --data-dir DIR   \(writes DIR/imdb"):
        IMDBDataModule(data_dir=tmp_path / "elsewhere").setup()


def test_fit_runs_on_downloaded_imdb(served, tmp_path, monkeypatch):
    """`seqssm data download imdb`, then the Ulbaek 2024 thesis recipe finds the data at its default place."""
    from pathlib import Path

    from seqssm.cli import main

    recipe = Path(__file__).resolve().parents[2] / "seqssm" / "recipes" / "lra" / "imdb" / "mamba-s6.yaml"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["seqssm"])
    main(["data", "download", "imdb", "--mirror", served.url])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: threads only fight on a shared machine
    try:
            main(["fit", "--config", str(recipe), "--trainer.fast_dev_run", "1", "--trainer.accelerator", "cpu",
              "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", "run",
              "--model.init_args.model_overrides", "{d_model: 8, n_layers: 1, d_state: 4}",
              "--data.init_args.max_length", "32", "--data.init_args.batch_size", "4", "--data.init_args.num_workers", "0"])
    finally:
        torch.set_num_threads(threads)
    assert (tmp_path / "data" / "imdb" / ".cache").is_dir()  # the DataModule read data/imdb
