"""CIFAR-10 pickles, MNIST IDX files, PNG codec and Pathfinder (reader and generator)."""

import pickle
import struct
import zlib

import numpy as np
import pytest
import torch

from seqssm.data import CIFAR10DataModule, DataFormatError, DataNotFoundError, PathfinderDataModule, SMNISTDataModule
from seqssm.data.generators.pathfinder import PathfinderStyle, generate_pathfinder, write_pathfinder
from seqssm.data.io import write_idx
from seqssm.data.png import decode_png, encode_png, read_png
from seqssm.data.smnist import bitreversal_permutation


# -- CIFAR-10 ---------------------------------------------------------------------------------
def write_cifar(root, n=10):
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        labels = list(rng.integers(0, 10, size=n))
        batches[name] = (data, labels)
        with open(d / name, "wb") as f:
            pickle.dump({b"data": data, b"labels": labels, b"batch_label": name.encode()}, f)
    return batches


def test_cifar_numeric_rgb(tmp_path):
    batches = write_cifar(tmp_path)
    dm = CIFAR10DataModule(data_dir=tmp_path, batch_size=10, mode="numeric")
    assert (dm.d_input, dm.vocab_size, dm.n_classes) == (3, None, 10)
    dm.setup()
    assert (len(dm.splits["train"]), len(dm.splits["val"]), len(dm.splits["test"])) == (45, 5, 10)
    b = next(iter(dm.test_dataloader()))
    assert b["inputs"].shape == (10, 1024, 3) and b["inputs"].dtype == torch.float32
    assert b["lengths"].eq(1024).all() and b["labels"].tolist() == [int(y) for y in batches["test_batch"][1]]
    data = batches["test_batch"][0]
    # pixel 5 of image 0, green channel: channel-major storage -> (pixel, channel)
    expected = (data[0, 1024 + 5] / 255 - 0.4822) / 0.243
    assert b["inputs"][0, 5, 1].item() == pytest.approx(expected, rel=1e-5)


def test_cifar_categorical_gray(tmp_path):
    batches = write_cifar(tmp_path)
    dm = CIFAR10DataModule(data_dir=tmp_path, batch_size=4, mode="categorical")
    assert (dm.vocab_size, dm.d_input, dm.pad_token_id) == (256, None, None)
    dm.setup()
    b = next(iter(dm.test_dataloader()))
    assert b["inputs"].shape == (4, 1024) and b["inputs"].dtype == torch.long
    r, g, bl = (batches["test_batch"][0][0, c * 1024].astype(float) for c in range(3))
    assert b["inputs"][0, 0].item() == round(0.2989 * r + 0.5870 * g + 0.1140 * bl)


def test_cifar_truncated_and_missing(tmp_path):
    write_cifar(tmp_path)
    p = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    p.write_bytes(p.read_bytes()[:500])
    with pytest.raises(DataFormatError, match="data_batch_3"):
        CIFAR10DataModule(data_dir=tmp_path).setup()
    with pytest.raises(DataNotFoundError, match="seqssm data download cifar10 --data-dir DIR"):
        CIFAR10DataModule(data_dir=tmp_path / "x").setup()


# -- MNIST ------------------------------------------------------------------------------------
def write_mnist(d, n_train=20, n_test=6, gz=True):
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    ext = ".gz" if gz else ""
    out = {}
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        x = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        y = rng.integers(0, 10, size=n).astype(np.uint8)
        write_idx(d / f"{prefix}-images-idx3-ubyte{ext}", x)
        write_idx(d / f"{prefix}-labels-idx1-ubyte{ext}", y)
        out[prefix] = (x, y)
    return out


def s4_bitreversal(n):
    """S4's construction (repeated hstack of halves), to check ours against."""
    m = int(np.ceil(np.log2(n)))
    perm = np.arange(1 << m).reshape(-1, 1)
    for _ in range(m):
        half = perm.shape[0] // 2
        perm = np.hstack((perm[:half], perm[half:]))
    perm = perm.squeeze(0)
    return perm[perm < n]


def test_bitreversal_matches_s4():
    for n in (8, 784, 1000):
        assert np.array_equal(bitreversal_permutation(n), s4_bitreversal(n))
    assert sorted(bitreversal_permutation(784)) == list(range(784))


@pytest.mark.parametrize("gz", [True, False])
def test_mnist_numeric_and_permuted(tmp_path, gz):
    raw = write_mnist(tmp_path, gz=gz)
    dm = SMNISTDataModule(data_dir=tmp_path, batch_size=6)
    assert (dm.d_input, dm.n_classes) == (1, 10)
    dm.setup()
    assert (len(dm.splits["train"]), len(dm.splits["val"])) == (18, 2)
    b = next(iter(dm.test_dataloader()))
    x, y = raw["t10k"]
    assert b["inputs"].shape == (6, 784, 1) and b["labels"].tolist() == y.tolist()
    assert torch.allclose(b["inputs"][..., 0], torch.from_numpy(x.reshape(6, -1) / 255.0).float())
    pm = SMNISTDataModule(data_dir=tmp_path, batch_size=6, permuted=True, mode="categorical")
    pm.setup()
    pb = next(iter(pm.test_dataloader()))
    perm = bitreversal_permutation(784)
    assert pb["inputs"].shape == (6, 784)
    assert pb["inputs"].tolist() == x.reshape(6, -1)[:, perm].tolist()
    rnd = SMNISTDataModule(data_dir=tmp_path, permuted=True, permutation="random", permutation_seed=5)
    assert np.array_equal(rnd.permutation, np.random.default_rng(5).permutation(784))


def test_mnist_truncated_idx(tmp_path):
    write_mnist(tmp_path, gz=False)
    p = tmp_path / "train-images-idx3-ubyte"
    p.write_bytes(p.read_bytes()[:-10])
    with pytest.raises(DataFormatError, match="truncated"):
        SMNISTDataModule(data_dir=tmp_path).setup()
    q = tmp_path / "t10k-labels-idx1-ubyte"
    q.write_bytes(b"\x12\x34" + q.read_bytes()[2:])
    with pytest.raises(DataFormatError, match="magic"):
        from seqssm.data.io import read_idx

        read_idx(q)


def test_mnist_truncated_gzip(tmp_path):
    write_mnist(tmp_path, gz=True)
    p = tmp_path / "train-labels-idx1-ubyte.gz"
    p.write_bytes(p.read_bytes()[:-12])
    with pytest.raises(DataFormatError, match="train-labels"):
        SMNISTDataModule(data_dir=tmp_path).setup()


# -- PNG --------------------------------------------------------------------------------------
def _png_with_filter(img, ftype, ctype=0):
    """Encode with one PNG filter type on every row (to test the decoder on all five)."""
    h, w = img.shape[:2]
    bpp = 1 if img.ndim == 2 else img.shape[2]
    rows = img.reshape(h, w * bpp).astype(np.int64)
    out = []
    prev = np.zeros(w * bpp, np.int64)
    for row in rows:
        left = np.concatenate([np.zeros(bpp, np.int64), row[:-bpp]])
        upleft = np.concatenate([np.zeros(bpp, np.int64), prev[:-bpp]])
        if ftype == 0:
            f = row
        elif ftype == 1:
            f = row - left
        elif ftype == 2:
            f = row - prev
        elif ftype == 3:
            f = row - (left + prev) // 2
        else:
            p = left + prev - upleft
            pa, pb, pc = abs(p - left), abs(p - prev), abs(p - upleft)
            pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prev, upleft))
            f = row - pred
        out.append(bytes([ftype]) + (f % 256).astype(np.uint8).tobytes())
        prev = row

    def chunk(k, d):
        return struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, ctype, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"".join(out))) + chunk(b"IEND", b"")


def test_png_roundtrip_and_filters(tmp_path):
    img = np.random.default_rng(0).integers(0, 256, size=(7, 9), dtype=np.uint8)
    assert np.array_equal(decode_png(encode_png(img)), img)
    for ftype in range(5):
        assert np.array_equal(decode_png(_png_with_filter(img, ftype)), img), ftype
    rgb = np.stack([img, img, img], axis=2)
    assert np.array_equal(decode_png(_png_with_filter(rgb, 4, ctype=2)), img)
    (tmp_path / "e.png").write_bytes(b"")
    with pytest.raises(DataFormatError):
        read_png(tmp_path / "e.png")


# -- Pathfinder -------------------------------------------------------------------------------
def components(mask, link):
    """Label 8-connected groups where pixels within Chebyshev distance `link` are joined."""
    pts = [tuple(p) for p in np.argwhere(mask)]
    label = {}
    for start in pts:
        if start in label:
            continue
        label[start] = start
        stack = [start]
        while stack:
            y, x = stack.pop()
            for dy in range(-link, link + 1):
                for dx in range(-link, link + 1):
                    q = (y + dy, x + dx)
                    if 0 <= q[0] < mask.shape[0] and 0 <= q[1] < mask.shape[1] and mask[q] and q not in label:
                        label[q] = start
                        stack.append(q)
    return label


def dot_centres(img, st):
    """Centres of the (2*dot+1)^2 filled squares that mark the endpoints."""
    k = 2 * st.dot + 1
    on = img > 0
    centres = []
    for y in range(st.dot, img.shape[0] - st.dot):
        for x in range(st.dot, img.shape[1] - st.dot):
            if on[y - st.dot : y + st.dot + 1, x - st.dot : x + st.dot + 1].sum() == k * k:
                centres.append((y, x))
    return centres


@pytest.mark.parametrize("res", [32, 64])
def test_pathfinder_generator_labels_solvable(res):
    st = PathfinderStyle(res=res)
    images, labels = generate_pathfinder(24, seed=7, style=st)
    again, labels2 = generate_pathfinder(24, seed=7, style=st)
    assert np.array_equal(images, again) and np.array_equal(labels, labels2)
    assert images.shape == (24, res, res) and 0 < labels.mean() < 1
    for img, y in zip(images, labels):
        assert set(np.unique(img)) == {0, 255}
        comp = components(img > 0, link=st.gap + 1)
        dots = dot_centres(img, st)
        groups = {comp[d] for d in dots}
        assert len(dots) >= 2
        # positive: every dot pixel in one contour; negative: the dots lie on two contours
        assert (len(groups) == 1) == bool(y)


def test_pathfinder_reader_layout_and_modes(tmp_path):
    root = write_pathfinder(tmp_path, 30, seed=1, res=32, per_batch=12)
    assert (root / "metadata" / "2.npy").exists() and (root / "imgs" / "0" / "sample_0.png").exists()
    row = (root / "metadata" / "1.npy").read_text().splitlines()[0].split()
    assert row[0] == "imgs/1" and row[1] == "sample_12.png" and row[3] in ("0", "1")
    dm = PathfinderDataModule(data_dir=tmp_path, batch_size=30, mode="categorical")
    assert (dm.vocab_size, dm.n_classes, dm.pad_token_id) == (256, 2, None)
    dm.setup()
    assert (len(dm.splits["train"]), len(dm.splits["val"]), len(dm.splits["test"])) == (24, 3, 3)
    b = next(iter(dm.train_dataloader()))
    assert b["inputs"].shape == (24, 1024) and set(b["inputs"].unique().tolist()) == {0, 255}
    # labels follow the metadata of each image
    meta = {}
    for f in (root / "metadata").glob("*.npy"):
        for line in f.read_text().splitlines():
            r = line.split()
            meta[int(r[2])] = int(r[3])
    ds = dm.splits["test"]
    for i in range(len(ds)):
        j = int(ds.indices[i])
        assert ds[i][1] == meta[j]
        assert np.array_equal(ds[i][0], read_png(root / "imgs" / str(j // 12) / f"sample_{j}.png").reshape(-1))
    num = PathfinderDataModule(data_dir=tmp_path, batch_size=4, mode="numeric")
    num.setup()
    nb = next(iter(num.val_dataloader()))
    assert nb["inputs"].shape == (3, 1024, 1) and float(nb["inputs"].max()) == 1.0 and float(nb["inputs"].min()) == 0.0


def test_pathfinder_skips_empty_image_with_warning(tmp_path):
    root = write_pathfinder(tmp_path, 10, seed=2, res=32)
    (root / "imgs" / "0" / "sample_3.png").write_bytes(b"")
    dm = PathfinderDataModule(data_dir=tmp_path)
    with pytest.warns(UserWarning, match="skipped 1 unreadable"):
        dm.setup()
    assert sum(len(s) for s in dm.splits.values()) == 9


def test_pathfinder_errors(tmp_path):
    with pytest.raises(DataNotFoundError, match="seqssm data prepare pathfinder --resolution 64"):
        PathfinderDataModule(data_dir=tmp_path, resolution=64).setup()
    root = write_pathfinder(tmp_path, 3, seed=2, res=32)
    (root / "metadata" / "0.npy").write_text("imgs/0 sample_0.png 0 1\nimgs/0 sample_1.png\n")
    with pytest.raises(DataFormatError, match=r"0.npy:2"):
        PathfinderDataModule(data_dir=tmp_path).setup()


def test_pathfinder_generate_true(tmp_path):
    dm = PathfinderDataModule(data_dir=tmp_path, resolution=64, generate=True, generate_size=20, mode="numeric")
    dm.setup()
    assert next(iter(dm.train_dataloader()))["inputs"].shape == (16, 4096, 1)
