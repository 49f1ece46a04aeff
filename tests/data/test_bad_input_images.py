"""Bad image data (MNIST IDX, CIFAR-10 batches, Pathfinder PNGs and metadata): every fault stops at read time
with one clear error naming the file, and never mid-epoch."""

import pickle
import struct
import zlib

import numpy as np
import pytest

from seqssm.data import CIFAR10DataModule, DataFormatError, PathfinderDataModule, SMNISTDataModule
from seqssm.data.generators.pathfinder import write_pathfinder
from seqssm.data.io import write_idx
from seqssm.data.png import decode_png, read_png


# -- MNIST ----------------------------------------------------------------------------------------
def write_mnist(root, n=12, labels=None, images=None):
    rng = np.random.default_rng(0)
    for prefix in ("train", "t10k"):
        write_idx(root / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)) if images is None else images)
        write_idx(root / f"{prefix}-labels-idx1-ubyte", np.arange(n) % 10 if labels is None else labels)


def test_mnist_label_out_of_range_at_read_time(tmp_path):
    write_mnist(tmp_path, labels=np.array([0, 1, 2, 12, 4, 5, 6, 7, 8, 9, 0, 1]))
    with pytest.raises(DataFormatError, match=r"train-labels-idx1-ubyte: image 3 \(counting from 0\) has label 12, "
                                              r"expected an integer in 0\.\.9 .*delete the damaged file and run:\s+"
                                              r"seqssm data download mnist"):
        SMNISTDataModule(data_dir=tmp_path).setup()


def test_mnist_images_of_the_wrong_type(tmp_path):
    write_mnist(tmp_path)
    header = bytes([0, 0, 0x0D, 3]) + b"".join(struct.pack(">I", s) for s in (12, 28, 28))  # 0x0D: float32
    blob = header + np.zeros(12 * 784, ">f4").tobytes()
    (tmp_path / "train-images-idx3-ubyte").write_bytes(blob)
    with pytest.raises(DataFormatError, match=r"train-images-idx3-ubyte: holds >f4 values of shape \(12, 28, 28\), "
                                              r"expected unsigned bytes"):
        SMNISTDataModule(data_dir=tmp_path).setup()


def test_mnist_images_and_labels_disagree(tmp_path):
    write_mnist(tmp_path)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.arange(5))
    with pytest.raises(DataFormatError, match=r"t10k-images-idx3-ubyte holds 12 images but .*t10k-labels-idx1-ubyte "
                                              r"holds labels of shape \(5,\), expected \(12,\)"):
        SMNISTDataModule(data_dir=tmp_path).setup()


def test_mnist_empty_and_garbage(tmp_path):
    write_mnist(tmp_path, n=0, images=np.zeros((0, 28, 28)), labels=np.zeros(0))
    with pytest.raises(DataFormatError, match=r"train-images-idx3-ubyte: holds no images"):
        SMNISTDataModule(data_dir=tmp_path).setup()
    write_mnist(tmp_path)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(b"")
    with pytest.raises(DataFormatError, match=r"train-labels-idx1-ubyte: not an IDX file"):
        SMNISTDataModule(data_dir=tmp_path).setup()
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(b"<html>404</html>")
    with pytest.raises(DataFormatError, match=r"train-labels-idx1-ubyte: not an IDX file"):
        SMNISTDataModule(data_dir=tmp_path).setup()


# -- CIFAR-10 -------------------------------------------------------------------------------------
def write_cifar(root, override=None, n=4):
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"labels": list(range(n))}
        (d / name).write_bytes(pickle.dumps(batch))
    if override is not None:
        (d / "data_batch_2").write_bytes(pickle.dumps(override))
    return d / "data_batch_2"


def test_cifar_label_out_of_range_at_read_time(tmp_path):
    write_cifar(tmp_path, {b"data": np.zeros((3, 3072), np.uint8), b"labels": [1, 42, 3]})
    with pytest.raises(DataFormatError, match=r"data_batch_2: image 1 \(counting from 0\) has label 42, expected an "
                                              r"integer in 0\.\.9"):
        CIFAR10DataModule(data_dir=tmp_path).setup()


@pytest.mark.parametrize("batch, message", [
    ([1, 2, 3], r"not a CIFAR-10 batch \(expected a dict with b'data' and b'labels', found list\)"),
    ({"data": 1, "labels": 2}, r"not a CIFAR-10 batch .*found \['data', 'labels'\]"),
    ({b"data": np.zeros((2, 3072), np.float32), b"labels": [0, 1]}, r"b'data' is a float32 array of shape \(2, 3072\)"),
    ({b"data": np.zeros((2, 1024), np.uint8), b"labels": [0, 1]}, r"b'data' is a uint8 array of shape \(2, 1024\)"),
    ({b"data": [[0] * 3072], b"labels": [0]}, r"b'data' is a list, expected a uint8 array"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 1, 2]}, r"2 images but 3 labels"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0.5, 1]}, r"image 0 .* has label 0\.5"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [b"cat", 1]}, r"image 0 .* has label b'cat'"),
    ({b"data": np.zeros((0, 3072), np.uint8), b"labels": []}, r"holds no images"),
])
def test_cifar_wrong_typed_batches(tmp_path, batch, message):
    path = write_cifar(tmp_path, batch)
    with pytest.raises(DataFormatError, match=message) as e:
        CIFAR10DataModule(data_dir=tmp_path).setup()
    assert str(path) in str(e.value)


@pytest.mark.parametrize("blob", [b"", b"garbage", b"\x80\x04\x95"])
def test_cifar_garbage_bytes(tmp_path, blob):
    path = write_cifar(tmp_path)
    path.write_bytes(blob)
    with pytest.raises(DataFormatError, match=r"data_batch_2: cannot unpickle .*delete it and run:\s+"
                                              r"seqssm data download cifar10"):
        CIFAR10DataModule(data_dir=tmp_path).setup()


# -- PNG and Pathfinder -----------------------------------------------------------------------------
def test_png_short_header_and_path_in_errors(tmp_path):
    sig = b"\x89PNG\r\n\x1a\n"
    short_ihdr = sig + struct.pack(">I", 4) + b"IHDR" + b"\0\0\0\1" + b"\0\0\0\0"
    with pytest.raises(DataFormatError, match="IHDR"):
        decode_png(short_ihdr)
    ihdr = struct.pack(">IIBBBBB", 4, 4, 8, 0, 0, 0, 0)
    chunk = lambda k, d: struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d))  # noqa: E731
    wrong_size = sig + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 7)) + chunk(b"IEND", b"")
    path = tmp_path / "img.png"
    for blob in (b"", b"GIF89a", short_ihdr, wrong_size):
        path.write_bytes(blob)
        with pytest.raises(DataFormatError, match=r"img\.png: "):
            read_png(path)


def test_pathfinder_without_metadata_rows(tmp_path):
    root = write_pathfinder(tmp_path, 4, seed=0, res=32)
    for f in (root / "metadata").glob("*.npy"):
        f.write_text("")
    with pytest.raises(DataFormatError, match=r"metadata: 1 metadata file\(s\) \*\.npy but no rows"):
        PathfinderDataModule(data_dir=tmp_path).setup()


def test_pathfinder_with_every_image_unreadable(tmp_path):
    root = write_pathfinder(tmp_path, 4, seed=0, res=32)
    for png in (root / "imgs").rglob("*.png"):
        png.write_bytes(b"")
    with pytest.raises(DataFormatError, match=r"no readable images \(all 4 listed in metadata/ failed, e\.g\. .*"
                                              r"sample_0\.png: (cannot decode PNG|not a PNG file)"):
        PathfinderDataModule(data_dir=tmp_path).setup()


def test_pathfinder_metadata_mixed_names_sort(tmp_path):
    """A stray non-numeric metadata file does not crash the integer ordering of the others."""
    root = write_pathfinder(tmp_path, 4, seed=0, res=32)
    (root / "metadata" / "notes.npy").write_text("")
    dm = PathfinderDataModule(data_dir=tmp_path)
    dm.setup()
    assert sum(len(s) for s in dm.splits.values()) == 4


@pytest.mark.parametrize("label", ["2", "-1", "0.5", "x"])
def test_pathfinder_bad_label(tmp_path, label):
    root = write_pathfinder(tmp_path, 4, seed=0, res=32)
    (root / "metadata" / "0.npy").write_text(f"imgs/0 sample_0.png 0 1\nimgs/0 sample_1.png 1 {label}\n")
    with pytest.raises(DataFormatError, match=r"0\.npy:2: malformed metadata row"):
        PathfinderDataModule(data_dir=tmp_path).setup()


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5])
def test_holdout_fraction_out_of_range(tmp_path, fraction):
    write_cifar(tmp_path)
    with pytest.raises(ValueError, match=rf"val_fraction must be in \[0, 1\), got {fraction}"):
        CIFAR10DataModule(data_dir=tmp_path, val_fraction=fraction).setup()
