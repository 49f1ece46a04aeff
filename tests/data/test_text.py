"""IMDB and AAN: byte-level readers over parquet / CSV / TSV / aclImdb folders and LRA TSVs."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seqssm.data import AANDataModule, ByteTokenizer, DataFormatError, DataNotFoundError, IMDBDataModule

TRAIN = [("great film", 1), ("awful, dull", 0), ("café ok", 1)]
TEST = [("meh", 0), ("loved it!", 1)]


def test_byte_tokenizer():
    tok = ByteTokenizer()
    assert tok.vocab_size == 259
    ids = tok.encode("é")  # two UTF-8 bytes
    assert ids.tolist() == [0xC3 + 3, 0xA9 + 3, tok.eos_token_id]
    assert tok.decode(ids) == "é"
    assert len(tok.encode("x" * 50, max_length=10)) == 10


def test_imdb_parquet(tmp_path):
    for split, rows in (("train", TRAIN), ("test", TEST)):
        pq.write_table(pa.table({"text": [t for t, _ in rows], "label": [y for _, y in rows]}), tmp_path / f"{split}.parquet")
    dm = IMDBDataModule(data_dir=tmp_path, batch_size=8, max_length=6)
    assert (dm.vocab_size, dm.n_classes, dm.pad_token_id) == (259, 2, 0)
    dm.setup()
    b = next(iter(dm.val_dataloader()))  # validation = test split
    assert b["labels"].tolist() == [0, 1]
    assert b["lengths"].tolist() == [4, 6] and b["inputs"].shape == (2, 6)
    assert ByteTokenizer().decode(b["inputs"][1]) == "loved"
    assert b["inputs"][0, 4:].eq(0).all()
    assert sorted(next(iter(dm.train_dataloader()))["labels"].tolist()) == [0, 1, 1]


def test_imdb_csv_tsv_and_bad_row(tmp_path):
    (tmp_path / "train.csv").write_text('text,label\n"good, really",1\nbad,0\n')
    (tmp_path / "test.csv").write_text("text,label\nfine,1\n")
    dm = IMDBDataModule(data_dir=tmp_path)
    dm.setup()
    assert ByteTokenizer().decode(dm.splits["train"][0][0]) == "good, really"
    d2 = tmp_path / "tsv"
    d2.mkdir()
    (d2 / "train.tsv").write_text("text\tlabel\nok\t1\nbroken\tseven\n")
    (d2 / "test.tsv").write_text("text\tlabel\nok\t1\n")
    with pytest.raises(DataFormatError, match=r"train.tsv:3"):
        IMDBDataModule(data_dir=d2).setup()


def test_imdb_acl_folders(tmp_path):
    for split in ("train", "test"):
        for label in ("pos", "neg"):
            d = tmp_path / "aclImdb" / split / label
            d.mkdir(parents=True)
            (d / "0_1.txt").write_text(f"{split} {label}")
    dm = IMDBDataModule(data_dir=tmp_path)
    dm.setup()
    texts = {ByteTokenizer().decode(x): y for x, y in (dm.splits["test"][i] for i in range(2))}
    assert texts == {"test neg": 0, "test pos": 1}


def test_imdb_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    with pytest.raises(DataNotFoundError, match="aclImdb"):
        IMDBDataModule(data_dir=tmp_path / "none").setup()


def test_imdb_hf_cache(tmp_path, monkeypatch):
    snap = tmp_path / "hf" / "hub" / "datasets--stanfordnlp--imdb" / "snapshots" / "abc" / "plain_text"
    snap.mkdir(parents=True)
    for split, rows in (("train", TRAIN), ("test", TEST)):
        pq.write_table(pa.table({"text": [t for t, _ in rows], "label": [y for _, y in rows]}),
                       snap / f"{split}-00000-of-00001.parquet")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    dm = IMDBDataModule(data_dir=tmp_path / "empty", cache_dir=tmp_path / "cache")
    dm.setup()
    assert len(dm.splits["train"]) == 3 and len(dm.splits["test"]) == 2


def write_aan(d, bad=False):
    d.mkdir(parents=True, exist_ok=True)
    rows = ["1\tid_a\tid_b\tfirst paper text\tsecond paper", "0.0\tid_c\tid_d\tabc\txyz"]
    for split in ("train", "eval", "test"):
        lines = rows + (["1\tonly\tthree"] if bad and split == "eval" else [])
        (d / f"new_aan_pairs.{split}.tsv").write_text("\n".join(lines) + "\n")


def test_aan_pairs(tmp_path):
    write_aan(tmp_path)
    dm = AANDataModule(data_dir=tmp_path, max_length=6, batch_size=2)
    assert (dm.vocab_size, dm.n_classes) == (259, 2)
    dm.setup()
    b = next(iter(dm.test_dataloader()))
    assert b["labels"].tolist() == [1, 0]
    tok = ByteTokenizer()
    ids = b["inputs"][0].tolist()
    # doc1 cut to 5 bytes + <sep>, then doc2 cut to 5 bytes + <eos>: 12 tokens
    assert b["lengths"].tolist() == [12, 8]
    assert ids[5] == tok.sep_token_id and ids[11] == tok.eos_token_id
    assert tok.decode(ids[:5]) == "first" and tok.decode(ids[6:11]) == "secon"


def test_aan_malformed_row(tmp_path):
    write_aan(tmp_path, bad=True)
    with pytest.raises(DataFormatError, match=r"new_aan_pairs.eval.tsv:3: expected 5"):
        AANDataModule(data_dir=tmp_path).setup()
