"""Bad text tables for IMDB, ListOps and AAN, and bad model folders for the pretrained tokenizer: each stops at
read time with one clear error naming the file, the row and the fix."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seqssm.data import AANDataModule, DataFormatError, IMDBDataModule, ListOpsDataModule
from seqssm.data.lra.text import read_text_table

GOOD = {"text": ["good", "bad", "fine"], "label": [1, 0, 1]}


def write_imdb(root, train=None, test=None, ext="parquet"):
    for split, table in (("train", train or GOOD), ("test", test or GOOD)):
        path = root / f"{split}.{ext}"
        if ext == "parquet":
            pq.write_table(pa.table(table), path)
        else:
            sep = "," if ext == "csv" else "\t"
            rows = [f"text{sep}label"] + [f"{t}{sep}{y}" for t, y in zip(table["text"], table["label"])]
            path.write_text("\n".join(rows) + "\n")
    return root


def setup_imdb(root):
    dm = IMDBDataModule(data_dir=root, cache_dir=root / "cache")
    dm.setup()
    return dm


# -- labels ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("labels, bad, shown", [([1, 0.5, 0], 1, "0.5"), ([1.7, 0, 1], 0, "1.7"), ([0, 1, 2], 2, "2"),
                                                ([0, -1, 1], 1, "-1"), ([0, None, 1], 1, "None"),
                                                ([0, 1, float("nan")], 2, "nan"), (["pos", "neg", "pos"], 0, "'pos'")])
def test_parquet_labels_are_checked_like_csv(tmp_path, labels, bad, shown):
    write_imdb(tmp_path, train={"text": ["a", "b", "c"], "label": labels})
    with pytest.raises(DataFormatError, match=rf"train\.parquet: row {bad} \(counting from 0\) has label {shown}, "
                                              r"expected an integer in 0\.\.1") as e:
        setup_imdb(tmp_path)
    assert "fix the file" in str(e.value)
    assert not list((tmp_path / "cache").glob("imdb-*")), "nothing cached from a refused file"


def test_parquet_integral_float_labels_are_accepted(tmp_path):
    """1.0 is the integer 1, as the CSV reader takes "1.0"."""
    write_imdb(tmp_path, train={"text": ["a", "b"], "label": [1.0, 0.0]})
    assert sorted(y for _, y in setup_imdb(tmp_path).splits["train"]) == [0, 1]


@pytest.mark.parametrize("ext", ["csv", "tsv"])
@pytest.mark.parametrize("label", ["0.5", "2", "-1", "nan", "inf", "", "one"])
def test_csv_tsv_labels(tmp_path, ext, label):
    write_imdb(tmp_path, train={"text": ["a", "b"], "label": ["1", label]}, ext=ext)
    with pytest.raises(DataFormatError, match=rf"train\.{ext}:3: .*label '{label}' is not an integer in 0\.\.1"):
        setup_imdb(tmp_path)


@pytest.mark.parametrize("label", ["10", "-1", "2.5", "inf", "nan", "x"])
def test_listops_labels(tmp_path, label):
    for split in ("train", "val", "test"):
        (tmp_path / f"basic_{split}.tsv").write_text(f"Source\tTarget\n( [MAX 2 3 ] )\t3\n( [MIN 1 ] )\t{label}\n")
    with pytest.raises(DataFormatError, match=rf"basic_train\.tsv:3: .*label '{label}' is not an integer in 0\.\.9"):
        ListOpsDataModule(data_dir=tmp_path, cache_dir=tmp_path / "cache").setup()


@pytest.mark.parametrize("source, token", [("( [FOO 1 2 ] )", "[FOO"), ("( [MAX 27 3 ] )", "27"),
                                           ("( [SM 1 <unk> ] )", "<unk>"), ("a plain sentence", "a")])
def test_listops_rows_that_are_not_listops_are_refused(tmp_path, source, token):
    # Before: trained with each unknown token read as <unk>, without a word
    for split in ("train", "val", "test"):
        (tmp_path / f"basic_{split}.tsv").write_text("Source\tTarget\n( [MAX 2 3 ] )\t3\n")
    (tmp_path / "basic_test.tsv").write_text(f"Source\tTarget\n( [MAX 2 3 ] )\t3\n{source}\t2\n{source}\t2\n")
    with pytest.raises(DataFormatError) as e:
        ListOpsDataModule(data_dir=tmp_path, cache_dir=tmp_path / "cache").setup()
    assert str(e.value) == (f"{tmp_path / 'basic_test.tsv'}:3: malformed row ({token!r} is not a ListOps token "
                            f"(those are [MIN [MAX [MED [SM ( ) ] and the digits 0-9)): '{source}\\t2'; fix or "
                            "delete this row")
    assert not list((tmp_path / "cache").glob("listops-*")), "nothing cached from a refused file"


@pytest.mark.parametrize("label", ["2", "-1", "0.5", "inf"])
def test_aan_labels(tmp_path, label):
    for split in ("train", "eval", "test"):
        (tmp_path / f"new_aan_pairs.{split}.tsv").write_text(f"1\ta\tb\tx\ty\n{label}\tc\td\tx\ty\n")
    with pytest.raises(DataFormatError,
                       match=rf"new_aan_pairs\.train\.tsv:2: .*label '{label}' is not an integer in 0\.\.1"):
        AANDataModule(data_dir=tmp_path, cache_dir=tmp_path / "cache").setup()


# -- texts ----------------------------------------------------------------------------------------
def test_parquet_null_text(tmp_path):
    write_imdb(tmp_path, train={"text": ["a", None, "c"], "label": [0, 1, 0]})
    with pytest.raises(DataFormatError, match=r"train\.parquet: row 1 \(counting from 0\) has no text \(null\)"):
        setup_imdb(tmp_path)


def test_parquet_text_of_the_wrong_type(tmp_path):
    write_imdb(tmp_path, train={"text": [1, 2], "label": [0, 1]})
    with pytest.raises(DataFormatError, match=r"train\.parquet: column 'text' holds int64, expected strings"):
        setup_imdb(tmp_path)


def test_missing_columns(tmp_path):
    write_imdb(tmp_path, train={"review": ["a"], "label": [0]})
    with pytest.raises(DataFormatError, match=r"train\.parquet: no column 'text' \(columns: \['review', 'label'\]\)"):
        setup_imdb(tmp_path)


# -- empty, truncated and garbage files -------------------------------------------------------------
@pytest.mark.parametrize("ext", ["parquet", "csv", "tsv"])
def test_empty_table(tmp_path, ext):
    write_imdb(tmp_path, ext=ext)
    empty = {"parquet": None, "csv": "text,label\n", "tsv": "text\tlabel\n"}[ext]
    if empty is None:
        pq.write_table(pa.table({"text": pa.array([], pa.string()), "label": pa.array([], pa.int64())}),
                       tmp_path / "train.parquet")
    else:
        (tmp_path / f"train.{ext}").write_text(empty)
    with pytest.raises(DataFormatError, match=rf"train\.{ext}: no rows"):
        setup_imdb(tmp_path)


def test_zero_byte_csv(tmp_path):
    write_imdb(tmp_path, ext="csv")
    (tmp_path / "train.csv").write_bytes(b"")
    with pytest.raises(DataFormatError, match=r"train\.csv:1: header must name columns 'text' and 'label'"):
        setup_imdb(tmp_path)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_unreadable_parquet(tmp_path, damage):
    write_imdb(tmp_path)
    path = tmp_path / "train.parquet"
    path.write_bytes({"truncated": path.read_bytes()[:-20], "garbage": b"<html>not parquet</html>" * 4,
                      "empty": b""}[damage])
    with pytest.raises(DataFormatError, match=r"train\.parquet: cannot read this parquet file .*fetch it again"):
        setup_imdb(tmp_path)


@pytest.mark.parametrize("reader", ["listops", "aan"])
def test_empty_tsv(tmp_path, reader):
    if reader == "listops":
        for split in ("train", "val", "test"):
            (tmp_path / f"basic_{split}.tsv").write_text("Source\tTarget\n( [MAX 2 3 ] )\t3\n")
        (tmp_path / "basic_val.tsv").write_text("Source\tTarget\n")
        dm, name = ListOpsDataModule(data_dir=tmp_path, cache_dir=tmp_path / "c"), r"basic_val\.tsv"
    else:
        for split in ("train", "eval", "test"):
            (tmp_path / f"new_aan_pairs.{split}.tsv").write_text("1\ta\tb\tx\ty\n")
        (tmp_path / "new_aan_pairs.test.tsv").write_bytes(b"")
        dm, name = AANDataModule(data_dir=tmp_path, cache_dir=tmp_path / "c"), r"new_aan_pairs\.test\.tsv"
    with pytest.raises(DataFormatError, match=rf"{name}: no rows"):
        dm.setup()


def test_listops_wrong_header_and_columns(tmp_path):
    for split in ("train", "val", "test"):
        (tmp_path / f"basic_{split}.tsv").write_text("Source\tTarget\n( [MAX 2 3 ] )\t3\n")
    (tmp_path / "basic_train.tsv").write_text("( [MAX 2 3 ] )\t3\n")
    with pytest.raises(DataFormatError, match=r"basic_train\.tsv:1: expected header 'Source<TAB>Target'"):
        ListOpsDataModule(data_dir=tmp_path, cache_dir=tmp_path / "c").setup()
    (tmp_path / "basic_train.tsv").write_text("Source\tTarget\n( [MAX 2 3 ] )\t3\textra\n")
    with pytest.raises(DataFormatError, match=r"basic_train\.tsv:2: expected 2 tab-separated fields, found 3"):
        ListOpsDataModule(data_dir=tmp_path, cache_dir=tmp_path / "c").setup()


# -- bytes that are not UTF-8 ---------------------------------------------------------------------
LATIN1 = "café".encode("latin1")  # b"caf\xe9"


@pytest.mark.parametrize("ext", ["csv", "tsv"])
def test_non_utf8_table(tmp_path, ext):
    write_imdb(tmp_path, ext=ext)
    sep = b"," if ext == "csv" else b"\t"
    blob = b"text" + sep + b"label\nok" + sep + b"1\n" + LATIN1 + sep + b"0\n"
    (tmp_path / f"train.{ext}").write_bytes(blob)
    offset = blob.index(b"\xe9")
    with pytest.raises(DataFormatError, match=rf"train\.{ext}: not UTF-8 text: line 3 \(byte offset {offset}\) holds "
                                              r"byte 0xe9, which is not valid UTF-8; re-save the file as UTF-8"):
        setup_imdb(tmp_path)


def test_non_utf8_listops_and_aan(tmp_path):
    for split in ("train", "val", "test"):
        (tmp_path / f"basic_{split}.tsv").write_text("Source\tTarget\n( [MAX 2 3 ] )\t3\n")
    blob = b"Source\tTarget\n( [MAX 2 3 ] )\t3\n\xff\t1\n"
    (tmp_path / "basic_test.tsv").write_bytes(blob)
    offset = blob.index(b"\xff")
    with pytest.raises(DataFormatError,
                       match=rf"basic_test\.tsv: not UTF-8 text: line 3 \(byte offset {offset}\) holds byte 0xff"):
        ListOpsDataModule(data_dir=tmp_path, cache_dir=tmp_path / "c").setup()
    for split in ("train", "eval", "test"):
        (tmp_path / f"new_aan_pairs.{split}.tsv").write_text("1\ta\tb\tx\ty\n")
    (tmp_path / "new_aan_pairs.eval.tsv").write_bytes(b"1\ta\tb\t" + LATIN1 + b"\ty\n")
    with pytest.raises(DataFormatError, match=r"new_aan_pairs\.eval\.tsv: not UTF-8 text: line 1 \(byte offset 9\)"):
        AANDataModule(data_dir=tmp_path, cache_dir=tmp_path / "c").setup()


def test_non_utf8_far_into_a_large_file(tmp_path):
    """The offset is exact past the reader's chunk boundary, with a character split across two chunks."""
    from seqssm.data.io import not_utf8

    line = "é" * 50 + "\n"  # 101 bytes: characters straddle every 1 MiB boundary
    head = (line * 20_000).encode()
    path = tmp_path / "big.tsv"
    path.write_bytes(head + b"\xc3(\n")
    err = not_utf8(path)
    assert f"line 20001 (byte offset {len(head)}) holds byte 0xc3" in str(err)


def test_non_utf8_acl_review(tmp_path):
    for split in ("train", "test"):
        for label in ("pos", "neg"):
            (tmp_path / "aclImdb" / split / label).mkdir(parents=True)
            (tmp_path / "aclImdb" / split / label / "0_1.txt").write_text("fine")
    bad = tmp_path / "aclImdb" / "test" / "pos" / "1_9.txt"
    bad.write_bytes(b"great\n" + LATIN1)
    with pytest.raises(DataFormatError, match=r"1_9\.txt: not UTF-8 text: line 2 \(byte offset 9\)"):
        setup_imdb(tmp_path)


def test_arrow_file_of_the_wrong_kind(tmp_path):
    (tmp_path / "x.arrow").write_bytes(b"not arrow at all")
    with pytest.raises(DataFormatError, match=r"x\.arrow: cannot read this Arrow file"):
        read_text_table(tmp_path / "x.arrow")


def test_unsupported_table_suffix(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(DataFormatError, match=r"x\.json: unsupported table format '\.json'"):
        read_text_table(tmp_path / "x.json")


# -- pretrained model folders (tokenizer.json / config.json) --------------------------------------
@pytest.mark.parametrize("content", [b"", b"{not json", b"\xff\xfe garbage", b'{"model": 3}'])
def test_garbage_tokenizer_json(tmp_path, content):
    pytest.importorskip("tokenizers")
    from seqssm.data.tokenized import PretrainedTokenizer

    (tmp_path / "tokenizer.json").write_bytes(content)
    with pytest.raises(DataFormatError, match=r"tokenizer\.json: not a tokenizers file"):
        PretrainedTokenizer(tmp_path)


@pytest.mark.parametrize("content, message", [(b"\xff{}", "not UTF-8 text"), (b"{", "not valid JSON"),
                                              (b"[1, 2]", "vocab_size is None")])
def test_garbage_config_json(tmp_path, content, message):
    from seqssm.data.tokenized import pretrained_vocab_size

    (tmp_path / "config.json").write_bytes(content)
    with pytest.raises(DataFormatError, match=rf"config\.json: .*{message}"):
        pretrained_vocab_size(tmp_path)


def test_garbage_digest_record(tmp_path):
    from seqssm.data.download import DigestRecord

    path = tmp_path / "digests.json"
    for content, message in ((b"\xff", "not UTF-8 text"), (b"{", "not valid JSON"), (b"[1]", "not a JSON object")):
        path.write_bytes(content)
        with pytest.raises(DataFormatError, match=rf"digests\.json: {message}.*delete it"):
            DigestRecord(path)
    path.write_text(json.dumps({"a": {"size": 1, "sha256": "0" * 64}}))
    assert DigestRecord(path).entries["a"]["size"] == 1


# -- arguments ------------------------------------------------------------------------------------
@pytest.mark.parametrize("option, value", [("max_length", 0), ("max_length", -3), ("max_length", 2.5),
                                           ("batch_size", 0), ("num_workers", -1)])
@pytest.mark.parametrize("module", [ListOpsDataModule, IMDBDataModule, AANDataModule])
def test_bad_sizes_are_refused_when_built(module, option, value):
    with pytest.raises(ValueError, match=rf"{option} must be an integer >= \d, got {value}"):
        module(**{option: value})
