"""The one crash-safe write (`seqssm.files.atomic_write`): text, bytes or a writer's function replace a file whole
or not at all; a failure mid-write leaves the old file intact and no temporary behind, and a full disk is one
DiskFullError naming the folder."""

from __future__ import annotations

import errno
import os

import pytest

from seqssm.errors import DiskFullError
from seqssm.files import TEMPORARY_MARK, atomic_write, remove_stale_temporaries, temporary_path


@pytest.mark.parametrize("content, expected", [("näher\n", "näher\n".encode()), (b"\x00\xff", b"\x00\xff"),
                                               (lambda tmp: tmp.write_bytes(b"by a writer"), b"by a writer")],
                         ids=["text", "bytes", "writer"])
def test_atomic_write_replaces_the_file_whole(tmp_path, content, expected):
    path = tmp_path / "out.json"
    path.write_text("old")
    atomic_write(path, content)
    assert path.read_bytes() == expected and os.listdir(tmp_path) == ["out.json"]


@pytest.mark.parametrize("umask", [0o022, 0o077], ids=oct)
def test_a_new_file_is_as_readable_as_the_umask_allows(tmp_path, umask):
    old = os.umask(umask)
    try:
        atomic_write(tmp_path / "a.txt", "a")
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"),
                                   RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0"),
                                   OSError(errno.EDQUOT, "Disk quota exceeded")], ids=["ENOSPC", "torch", "EDQUOT"])
def test_a_full_disk_mid_write_is_reported_and_keeps_the_file(tmp_path, error):
    path = tmp_path / "metrics.csv"
    path.write_text("old\n")

    def fail(tmp):
        tmp.write_text("half")
        raise error

    with pytest.raises(DiskFullError, match=f"^{tmp_path}: no space left on its device while writing metrics.csv"):
        atomic_write(path, fail)
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["metrics.csv"]


def test_any_other_failure_mid_write_is_itself_and_keeps_the_file(tmp_path):
    path = tmp_path / "digests.json"
    atomic_write(path, "old")

    def interrupted(tmp):
        tmp.write_text("ne")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, interrupted)
    with pytest.raises(ValueError, match="^other$"):
        atomic_write(path, lambda tmp: (_ for _ in ()).throw(ValueError("other")))
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["digests.json"]


def test_stale_temporaries_of_a_killed_writer_are_removed(tmp_path):
    kept = tmp_path / "last.ckpt"
    kept.write_text("kept")
    stale = tmp_path / f".last.ckpt{TEMPORARY_MARK}123"
    stale.write_text("cut short")
    assert temporary_path(kept).name.startswith(f".last.ckpt{TEMPORARY_MARK}")
    assert remove_stale_temporaries(tmp_path) == [stale]
    assert os.listdir(tmp_path) == ["last.ckpt"]
