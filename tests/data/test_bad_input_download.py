"""`seqssm data download` when the network, the mirror or the digest record is not what it should be (issue 36):
one line naming the file and what to do, exit code 2, nothing downloaded or unpacked that should not be; and
--no-verify unpacks a dataset without a published digest."""

from __future__ import annotations

import json
import socket
import time

import pytest

from seqssm.cli import main
from seqssm.data import download as dl
from seqssm.data.extract import is_complete
from seqssm.data.sources import DATASETS


def download_fails(capsys, *argv: str) -> str:
    """The one stderr line of `seqssm data download ARGV`, which must exit with code 2."""
    with pytest.raises(SystemExit) as e:
        main(["data", "download", *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_no_verify_unpacks_a_dataset_without_a_published_digest(served, tmp_path, capsys):
    # Before: AttributeError: 'NoneType' object has no attribute 'entries', after the download; nothing unpacked
    root = tmp_path / "data"
    main(["data", "download", "listops", "--data-dir", str(root), "--mirror", served.url, "--no-verify"])
    assert capsys.readouterr().out.strip() == (f"listops: ready in {root / 'listops'} (not verified: --no-verify "
                                               "skipped the digest checks)")
    assert is_complete(DATASETS["listops"], root / "listops")
    assert not (root / "downloads" / "digests.json").exists()  # nothing checked, so nothing recorded


@pytest.fixture
def no_dns(monkeypatch):
    """Name resolution fails as on a machine without network."""
    def unresolved(host, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unresolved)


def test_offline_download_says_how_to_bring_the_file_over(no_dns, tmp_path, capsys):
    # Before: five retries, then "0 bytes kept in ....part; run the command again to resume"
    root = tmp_path / "data"
    start = time.monotonic()
    err = download_fails(capsys, "listops", "--data-dir", str(root))
    assert time.monotonic() - start < 5, "a host that does not resolve is not retried for seconds"
    assert err.startswith("seqssm data: error: cannot download lra_release.gz: https://storage.googleapis.com/"
                          "long-range-arena/lra_release.gz: gaierror: ")
    assert ("download https://storage.googleapis.com/long-range-arena/lra_release.gz on a machine that has network, "
            "copy it into a folder here as lra_release.gz, and pass that folder as --mirror (seqssm data download "
            "listops --mirror FOLDER), or unpack it with: seqssm data prepare listops --source FILE") in err
    assert "resume" not in err
    assert list((root / "downloads").iterdir()) == []  # no empty .part promising a resume


def test_offline_download_tries_every_source_of_a_file(no_dns, tmp_path, capsys):
    err = download_fails(capsys, "mnist", "--data-dir", str(tmp_path))
    assert "https://ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz: gaierror" in err
    assert "http://yann.lecun.com/exdb/mnist/train-images-idx3-ubyte.gz: gaierror" in err
    assert "seqssm data prepare mnist --source FOLDER (holding train-images-idx3-ubyte.gz and the other" in err


@pytest.mark.parametrize("entry", ["abc", {"size": "big"}, {"size": 3, "sha256": "not hex"}, {"sha1": "00"}, {}],
                         ids=["string", "size-text", "sha256-text", "unknown-key", "empty"])
def test_a_malformed_digest_record_entry_is_named_before_anything_is_fetched(served, tmp_path, capsys, entry):
    # Before: a traceback (a string), or "size mismatch ... (downloaded from ..., removed)" blaming the download
    record = tmp_path / "downloads" / "digests.json"
    record.parent.mkdir()
    record.write_text(json.dumps({"lra_release.gz": entry}))
    err = download_fails(capsys, "aan", "--data-dir", str(tmp_path), "--mirror", served.url)
    assert err.startswith(f"seqssm data: error: {record}: the entry 'lra_release.gz' is {json.dumps(entry)}, not a "
                          "file's size and digest")
    assert "delete that entry (or the file)" in err
    assert served.requests == [] and sorted(p.name for p in record.parent.iterdir()) == ["digests.json"]


@pytest.fixture
def silent_mirror():
    """The URL of a server that takes connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))  # the kernel completes the handshakes; nothing reads them
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/mirror"
    listener.close()


def test_a_mirror_that_never_answers_times_out_naming_it(silent_mirror, tmp_path, capsys, monkeypatch):
    # Before: 5 x 60 s of retries, silent off a terminal (328 s)
    monkeypatch.setattr(dl, "TIMEOUT", 0.3)
    start = time.monotonic()
    err = download_fails(capsys, "listops", "--data-dir", str(tmp_path), "--mirror", silent_mirror)
    assert time.monotonic() - start < 3, "one timeout, no retries"
    assert (f"cannot download lra_release.gz: {silent_mirror}/lra_release.gz: no answer within 0.3 s (the server "
            "took the connection, then sent nothing)") in err
    assert "--mirror FOLDER" in err and not (tmp_path / "listops").exists()
