"""Caches of tokenised splits follow every source file: images restored, reviews added or a file touched
build afresh; a failed build leaves nothing behind."""

import os
import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seqssm.data import IMDBDataModule, ListOpsDataModule, PathfinderDataModule
from seqssm.data.cache import cached_splits, source_stamp
from seqssm.data.generators.pathfinder import write_pathfinder


def n_items(dm):
    return sum(len(s) for s in dm.splits.values())


def test_pathfinder_images_restored_after_a_run_are_read(tmp_path):
    """The issue's case: a run with missing images, then the images come back: the next run sees all."""
    root = write_pathfinder(tmp_path / "data", 10, seed=0, res=32)
    images = sorted((root / "imgs").rglob("*.png"))
    saved = {p: p.read_bytes() for p in images[:3]}
    for p in saved:
        p.unlink()
    dm = PathfinderDataModule(data_dir=tmp_path / "data", cache_dir=tmp_path / "cache")
    with pytest.warns(UserWarning, match="skipped 3 unreadable"):
        dm.setup()
    assert n_items(dm) == 7
    for p, blob in saved.items():
        p.write_bytes(blob)
    again = PathfinderDataModule(data_dir=tmp_path / "data", cache_dir=tmp_path / "cache")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no image skipped now
        again.setup()
    assert n_items(again) == 10


def test_pathfinder_image_replaced_in_place(tmp_path):
    """Same file names, new pixels (same size): the mtime alone changes the key."""
    root = write_pathfinder(tmp_path / "data", 6, seed=0, res=32)
    dm = PathfinderDataModule(data_dir=tmp_path / "data", cache_dir=tmp_path / "cache", mode="categorical")
    dm.setup()
    other = write_pathfinder(tmp_path / "other", 6, seed=5, res=32)
    target = root / "imgs" / "0" / "sample_0.png"
    target.write_bytes((other / "imgs" / "0" / "sample_0.png").read_bytes())
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    again = PathfinderDataModule(data_dir=tmp_path / "data", cache_dir=tmp_path / "cache", mode="categorical")
    again.setup()
    assert len(list((tmp_path / "cache").glob("pathfinder32-*"))) == 2


def test_imdb_review_added_to_acl_folder(tmp_path):
    for split in ("train", "test"):
        for label in ("pos", "neg"):
            (tmp_path / "aclImdb" / split / label).mkdir(parents=True)
            (tmp_path / "aclImdb" / split / label / "0_1.txt").write_text(f"{split} {label}")
    dm = IMDBDataModule(data_dir=tmp_path, cache_dir=tmp_path / "cache")
    dm.setup()
    assert len(dm.splits["train"]) == 2
    (tmp_path / "aclImdb" / "train" / "pos" / "1_9.txt").write_text("another")
    again = IMDBDataModule(data_dir=tmp_path, cache_dir=tmp_path / "cache")
    again.setup()
    assert len(again.splits["train"]) == 3


def test_listops_file_rewritten(tmp_path):
    for split in ("train", "val", "test"):
        (tmp_path / f"basic_{split}.tsv").write_text("Source\tTarget\n( [MAX 2 3 ] )\t3\n")
    dm = ListOpsDataModule(data_dir=tmp_path, cache_dir=tmp_path / "cache")
    dm.setup()
    (tmp_path / "basic_train.tsv").write_text("Source\tTarget\n( [MAX 2 3 ] )\t3\n( [MIN 4 5 ] )\t4\n")
    again = ListOpsDataModule(data_dir=tmp_path, cache_dir=tmp_path / "cache")
    again.setup()
    assert len(again.splits["train"]) == 2


def test_source_stamp_of_a_folder(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "a").write_text("1")
    (tmp_path / "d" / "sub" / "b").write_text("22")
    first = source_stamp([tmp_path / "d"])
    assert first[0][1:3] == [2, 3]  # files, bytes
    assert source_stamp([tmp_path / "d"]) == first
    (tmp_path / "d" / "sub" / "c").write_text("")
    assert source_stamp([tmp_path / "d"]) != first
    (tmp_path / "d" / "sub" / "c").unlink()
    assert source_stamp([tmp_path / "d"]) == first
    (tmp_path / "d" / "sub" / "b").rename(tmp_path / "d" / "b")  # same files, moved
    assert source_stamp([tmp_path / "d"]) != first


def test_failed_build_or_save_leaves_nothing(tmp_path, monkeypatch):
    src = tmp_path / "src.txt"
    src.write_text("x")

    def broken_build():
        raise RuntimeError("reader failed")

    with pytest.raises(RuntimeError, match="reader failed"):
        cached_splits(tmp_path / "cache", "t", [src], {}, broken_build)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())

    import datasets
    import numpy as np

    def full_disk(self, path, *args, **kwargs):
        os.makedirs(path, exist_ok=True)
        open(os.path.join(path, "partial.arrow"), "wb").close()
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(datasets.Dataset, "save_to_disk", full_disk)
    with pytest.raises(OSError, match="No space left"):
        cached_splits(tmp_path / "cache", "t", [src], {}, lambda: {"train": ([np.zeros(2, np.uint8)], [0])})
    assert list((tmp_path / "cache").iterdir()) == []


def test_parquet_source_touched(tmp_path):
    for split in ("train", "test"):
        pq.write_table(pa.table({"text": ["a", "b"], "label": [0, 1]}), tmp_path / f"{split}.parquet")
    IMDBDataModule(data_dir=tmp_path, cache_dir=tmp_path / "cache").setup()
    pq.write_table(pa.table({"text": ["a", "b", "c"], "label": [0, 1, 1]}), tmp_path / "train.parquet")
    dm = IMDBDataModule(data_dir=tmp_path, cache_dir=tmp_path / "cache")
    dm.setup()
    assert len(dm.splits["train"]) == 3


@pytest.mark.parametrize("damage", ["truncated", "deleted"])
def test_damaged_cache_is_rebuilt(tmp_path, damage):
    import numpy as np

    src = tmp_path / "src.txt"
    src.write_text("x")
    build = lambda: {"train": ([np.arange(5, dtype=np.uint8)] * 3, [0, 1, 0])}  # noqa: E731
    cached_splits(tmp_path / "cache", "t", [src], {}, build)
    arrow = next((tmp_path / "cache").rglob("*.arrow"))
    if damage == "truncated":
        arrow.write_bytes(arrow.read_bytes()[:50])
    else:
        arrow.unlink()
    with pytest.warns(UserWarning, match="cached splits unreadable .* building them afresh"):
        data = cached_splits(tmp_path / "cache", "t", [src], {}, build)
    assert data["train"].labels.tolist() == [0, 1, 0] and data["train"].seq(2).tolist() == [0, 1, 2, 3, 4]
