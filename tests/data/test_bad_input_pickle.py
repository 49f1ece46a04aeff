"""Pickle payloads in every pickle-based input never run: CIFAR-10 batches, Arrow / parquet extension
metadata, `.npy` files where Pathfinder expects its text metadata. Each payload would create a marker file."""

import builtins
import functools
import os
import pickle
import struct
import subprocess

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seqssm.data import CIFAR10DataModule, DataFormatError, IMDBDataModule, PathfinderDataModule
from seqssm.data.generators.pathfinder import write_pathfinder
from seqssm.data.io import read_pickle
from seqssm.data.lra.cifar import read_cifar_batch


class Payload:
    """An object whose unpickling calls `func(*args)`."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def payloads(marker):
    """(name, disallowed global, payload) that each create `marker` when unpickled without restriction."""
    touch = f"open({str(marker)!r}, 'w').close()"
    return [
        ("os.system", f"{os.name}.system", Payload(os.system, f"touch '{marker}'")),
        ("subprocess", "subprocess.call", Payload(subprocess.call, ["touch", str(marker)])),
        ("exec", "builtins.exec", Payload(builtins.exec, touch)),
        ("eval", "builtins.eval", Payload(builtins.eval, touch)),
        # any other callable: a partial of open() in write mode creates the file on call
        ("partial", "functools.partial", Payload(functools.partial(open, str(marker), "w"))),
        ("getattr", "builtins.getattr", Payload(getattr, "text", "upper")),
        ("numpy.load", "numpy.load", Payload(np.load, str(marker))),
    ]


def cifar_batch(n=4, extra=None):
    rng = np.random.default_rng(0)
    return {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"labels": list(range(n)), **(extra or {})}


@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
@pytest.mark.parametrize("where", ["top", "value", "label", "object-array"])
def test_cifar_payload_never_runs(tmp_path, protocol, where):
    marker = tmp_path / "PWNED"
    for name, qualname, payload in payloads(marker):
        blob = {"top": payload,
                "value": cifar_batch(extra={b"batch_label": payload}),
                "label": {**cifar_batch(), b"labels": [0, 1, payload, 3]},
                "object-array": {**cifar_batch(), b"filenames": np.array([b"a", payload], dtype=object)}}[where]
        path = tmp_path / f"data_batch_{name}"
        path.write_bytes(pickle.dumps(blob, protocol=protocol))
        with pytest.raises(DataFormatError) as e:
            read_cifar_batch(path)
        assert not marker.exists(), f"{name} payload ran"
        assert str(path) in str(e.value) and "refused" in str(e.value) and qualname in str(e.value), str(e.value)


def test_hand_written_protocol0_payload(tmp_path):
    """The classic text pickle: `cos\\nsystem\\n` then REDUCE."""
    marker = tmp_path / "PWNED"
    path = tmp_path / "data_batch_1"
    path.write_bytes(f"cos\nsystem\n(S'touch {marker}'\ntR.".encode())
    with pytest.raises(DataFormatError, match=r"data_batch_1: refused to unpickle os\.system"):
        read_pickle(path, fix="fetch it again")
    assert not marker.exists()


def test_payload_through_the_datamodule(tmp_path):
    """The user's path: `setup()` on a folder whose batch carries a payload."""
    marker = tmp_path / "PWNED"
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (root / name).write_bytes(pickle.dumps(cifar_batch()))
    payload = Payload(os.system, f"touch '{marker}'")
    (root / "data_batch_3").write_bytes(pickle.dumps(cifar_batch(extra={b"x": payload})))
    with pytest.raises(DataFormatError, match="data_batch_3: refused to unpickle"):
        CIFAR10DataModule(data_dir=tmp_path).setup()
    assert not marker.exists()


@pytest.mark.parametrize("images", [10_000_000, 1_000], ids=["28.6GiB", "3MiB"])
def test_a_batch_asking_for_more_than_its_file_holds_is_named(tmp_path, images):
    """`numpy.ndarray(shape, dtype)` in a pickle asks for memory from a shape alone. Before: numpy's 28.6 GiB
    MemoryError as a traceback without the file's name. What the machine can allocate (lazily) is refused as well."""
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps(cifar_batch(extra={b"data": Payload(np.ndarray, (images, 3072), np.dtype("u1"))}),
                                  protocol=2))
    with pytest.raises(DataFormatError, match=rf"^{path}: .*(asks for more memory than there is|holds {images} images)"
                                              r".*: not the published file; fetch it again$"):
        read_cifar_batch(path, fix="fetch it again")


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_published_batch_layouts_still_load(tmp_path, protocol):
    """What real batches hold (uint8 array, int labels, bytes, numpy scalars, file names) loads at every protocol."""
    batch = {b"batch_label": b"training batch 1 of 5", b"labels": [np.int64(3), 7, 0, 9],
             b"data": np.arange(4 * 3072, dtype=np.int64).reshape(4, 3072).astype(np.uint8),
             b"filenames": [b"a.png", b"b.png", b"c.png", b"d.png"]}
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps(batch, protocol=protocol))
    images, labels = read_cifar_batch(path)
    assert labels.tolist() == [3, 7, 0, 9]
    assert np.array_equal(images, batch[b"data"].reshape(-1, 3, 1024).transpose(0, 2, 1))


def python2_batch(data: bytes, labels: list[int]) -> bytes:
    """A batch as Python 2's cPickle (protocol 2) with numpy 1 wrote the published files: byte strings
    (SHORT_BINSTRING), `numpy.core.multiarray._reconstruct`, a dtype built from b"u1", the pixels as one BINSTRING."""
    def short(b):
        return b"U" + bytes([len(b)]) + b

    n = len(data) // 3072
    return (b"\x80\x02}(" + short(b"data")
            + b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85" + short(b"b") + b"\x87R"
            + b"(K\x01K" + bytes([n]) + b"M\x00\x0c\x86" + b"cnumpy\ndtype\n" + short(b"u1") + b"K\x00K\x01\x87R"
            + b"(K\x03" + short(b"|") + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb"
            + b"\x89T" + struct.pack("<I", len(data)) + data + b"tb"
            + short(b"labels") + b"](" + b"".join(b"K" + bytes([y]) for y in labels) + b"e"
            + short(b"batch_label") + short(b"training batch 1 of 5") + b"u.")


def test_python2_batch_loads(tmp_path):
    pixels = np.arange(2 * 3072).astype(np.uint8)
    blob = python2_batch(pixels.tobytes(), [3, 7])
    reference = pickle.loads(blob, encoding="bytes")  # what the unrestricted reader made of it
    path = tmp_path / "data_batch_1"
    path.write_bytes(blob)
    images, labels = read_cifar_batch(path)
    assert labels.tolist() == [3, 7] == reference[b"labels"]
    assert np.array_equal(images, reference[b"data"].reshape(-1, 3, 1024).transpose(0, 2, 1))


def test_arrow_extension_pickle_never_runs(tmp_path):
    """pyarrow once unpickled the metadata of `arrow.py_extension_type` columns; IMDB tables must not."""
    marker = tmp_path / "PWNED"
    metadata = {b"ARROW:extension:name": b"arrow.py_extension_type",
                b"ARROW:extension:metadata": pickle.dumps(Payload(os.system, f"touch '{marker}'"))}
    schema = pa.schema([pa.field("text", pa.string()), pa.field("label", pa.int64(), metadata=metadata)])
    for split in ("train", "test"):
        pq.write_table(pa.table({"text": ["a", "b"], "label": [0, 1]}, schema=schema), tmp_path / f"{split}.parquet")
    dm = IMDBDataModule(data_dir=tmp_path, cache_dir=tmp_path / "cache")
    dm.setup()
    assert not marker.exists() and len(dm.splits["train"]) == 2
    with pa.OSFile(str(tmp_path / "train.arrow"), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(pa.table({"text": ["a"], "label": [1]}, schema=schema))
    from seqssm.data.lra.text import read_text_table

    assert read_text_table(tmp_path / "train.arrow") == (["a"], [1]) and not marker.exists()


def test_npy_pickle_as_pathfinder_metadata_never_runs(tmp_path):
    """Pathfinder's `metadata/*.npy` are text; a real `.npy` with pickled objects is refused, not loaded."""
    marker = tmp_path / "PWNED"
    root = write_pathfinder(tmp_path, 4, seed=0, res=32)
    evil = np.array([Payload(os.system, f"touch '{marker}'")], dtype=object)
    with open(root / "metadata" / "0.npy", "wb") as f:
        np.save(f, evil, allow_pickle=True)
    with pytest.raises(DataFormatError, match=r"0\.npy: not UTF-8 text"):
        PathfinderDataModule(data_dir=tmp_path).setup()
    assert not marker.exists()


def test_no_unrestricted_unpickling_in_the_data_package():
    """Every read of a pickle goes through the restricted reader: no `pickle.load(s)`, `torch.load` or
    `allow_pickle=True` anywhere else in seqssm.data."""
    import pathlib

    import seqssm.data

    root = pathlib.Path(seqssm.data.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        text = path.read_text()
        needles = ("pickle.load(", "pickle.loads(", "torch.load(", "allow_pickle=True", "np.load(", "dill", "joblib")
        for needle in needles:
            if needle in text and path.name != "unpickle.py":
                offenders.append(f"{path.relative_to(root)}: {needle}")
    assert offenders == [], offenders
