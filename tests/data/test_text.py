"""IMDB and AAN: byte-level readers over parquet / CSV / TSV / aclImdb folders and LRA TSVs."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seqssm.data import (
    AANDataModule, ByteTokenizer, CharVocabulary, DataFormatError, DataNotFoundError, IMDBDataModule
)

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


def test_char_vocabulary_follows_s4s_rule():
    # S4 (src/dataloaders/lra.py, level "char"): count the characters of the training texts, each cut to
    # l_max - 1 = max_length - 1, keep those seen min_freq times, most frequent first, ties in character order,
    # after the specials <pad>, <unk>, <eos>
    texts = ["aab", "bca", "zzzzzzzz"]  # cut to 3 characters: a:3 b:2 c:1 z:3
    vocab = CharVocabulary.build(texts, min_freq=2, max_length=4)
    assert vocab.characters == ["a", "z", "b"] and vocab.vocab_size == 6
    assert vocab.encode("abcz", max_length=4).tolist() == [3, 5, vocab.unk_token_id, vocab.eos_token_id]
    assert vocab.encode("za").tolist() == [4, 3, 2] and vocab.decode([4, 3, 1, 2]) == "za\ufffd"
    assert CharVocabulary.build(texts, min_freq=1).characters == ["z", "a", "b", "c"]  # uncut: z:8
    with pytest.raises(ValueError, match="min_freq"):
        CharVocabulary.build(texts, min_freq=0)


def test_imdb_char_tokens_build_the_vocabulary_from_the_training_split(tmp_path):
    train = [("great film", 1), ("awful, dull", 0), ("café ok", 1)]
    for split, rows in (("train", train), ("test", [("a dull café!", 0)])):
        table = pa.table({"text": [t for t, _ in rows], "label": [y for _, y in rows]})
        pq.write_table(table, tmp_path / f"{split}.parquet")
    dm = IMDBDataModule(data_dir=tmp_path, max_length=64, tokens="chars", min_freq=2, batch_size=4)
    expected = CharVocabulary.build([t for t, _ in train], min_freq=2, max_length=64)
    assert dm.tokenizer.characters == expected.characters
    assert " " in expected.characters and "!" not in expected.characters
    assert (dm.vocab_size, dm.n_classes, dm.pad_token_id) == (expected.vocab_size, 2, 0)
    dm.setup()
    ids = dm.splits["val"][0][0]
    assert ids.tolist() == expected.encode("a dull café!", 64).tolist()
    assert ids[-2] == CharVocabulary.unk_token_id  # "!" is not in the training split's vocabulary
    # the vocabulary is cached; a changed training file builds it afresh
    cached = list(dm.cache_dir.glob("imdb-chars-*.json"))
    assert len(cached) == 1
    assert IMDBDataModule(data_dir=tmp_path, max_length=64, tokens="chars", min_freq=2).tokenizer.characters == \
        expected.characters
    pq.write_table(pa.table({"text": ["!!!"], "label": [1]}), tmp_path / "train.parquet")
    assert IMDBDataModule(data_dir=tmp_path, max_length=64, tokens="chars", min_freq=2).tokenizer.characters == ["!"]
    assert IMDBDataModule(data_dir=tmp_path).vocab_size == 259  # bytes: the default
    with pytest.raises(ValueError, match="tokens must be one of"):
        IMDBDataModule(data_dir=tmp_path, tokens="words")
    with pytest.raises(DataNotFoundError):
        IMDBDataModule(data_dir=tmp_path / "none", tokens="chars")
