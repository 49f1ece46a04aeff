"""ListOps: LRA TSV reader, S4 tokenisation, caching, errors, and the generator's labels."""

import numpy as np
import pytest

from seqssm.data import DataFormatError, DataNotFoundError, ListOpsDataModule, ListOpsTokenizer
from seqssm.data.generators.listops import generate_listops, write_listops

ROWS = {
    "train": [("( ( ( [MAX 2 ) 9 ) ] )", 9), ("( ( ( ( [SM 4 ) 8 ) ( ( ( [MIN 3 ) 1 ) ] ) ) ] )", 3)],
    "val": [("( ( ( [MED 1 ) 5 ) ] )", 3)],
    "test": [("( ( ( [MIN 7 ) 4 ) ] )", 4), ("5", 5), ("( ( ( ( [MED 9 ) 1 ) 8 ) ] )", 8)],
}


def write(d, rows=ROWS):
    d.mkdir(parents=True, exist_ok=True)
    for split, rs in rows.items():
        (d / f"basic_{split}.tsv").write_text("Source\tTarget\n" + "".join(f"{s}\t{t}\n" for s, t in rs))


def direct_eval(source: str) -> int:
    """Evaluate an LRA ListOps string independently of the generator (a token stack)."""
    stack = []
    for tok in source.replace("(", " ").replace(")", " ").split():
        if tok.startswith("["):
            stack.append([tok])
        elif tok == "]":
            op, *args = stack.pop()
            if op == "[MIN":
                v = min(args)
            elif op == "[MAX":
                v = max(args)
            elif op == "[SM":
                v = sum(args) % 10
            else:
                v = int(np.median(args))
            if not stack:
                return v
            stack[-1].append(v)
        else:
            if not stack:
                return int(tok)
            stack[-1].append(int(tok))
    raise AssertionError("unbalanced expression")


def test_tokenizer_fixed_vocab():
    tok = ListOpsTokenizer()
    assert tok.vocab_size == 18
    ids = tok.encode("( ( ( [MAX 2 ) 9 ) ] )")
    assert [tok.SPECIALS[i] if i < 3 else tok.TOKENS[i - 3] for i in ids] == ["[MAX", "2", "9", "X", "<eos>"]
    assert len(tok.encode("( [SM 1 2 3 4 5 6 7 ] )", max_length=4)) == 4
    assert tok.encode("( [SM 1 2 3 ] )", max_length=4)[-1] == tok.eos_token_id


def test_reader_batches_and_cache(tmp_path, monkeypatch):
    write(tmp_path / "lo")
    dm = ListOpsDataModule(data_dir=tmp_path / "lo", batch_size=4)
    assert (dm.vocab_size, dm.n_classes, dm.pad_token_id, dm.d_input) == (18, 10, 0, None)
    dm.setup("fit")
    batch = next(iter(dm.test_dataloader()))
    assert batch["labels"].tolist() == [4, 5, 8]
    assert batch["lengths"].tolist() == [5, 2, 6]  # tokens + <eos>
    assert batch["inputs"].shape == (3, 6) and batch["inputs"].dtype.is_floating_point is False
    assert batch["inputs"][1, 2:].eq(0).all()  # right padding with <pad>
    assert batch["inputs"][1, :2].tolist() == [3 + 4 + 5, 2]  # digit 5, <eos>
    assert len(dm.splits["train"]) == 2 and len(dm.splits["val"]) == 1
    # A second run reads the Arrow cache and never parses the TSV again.
    import seqssm.data.lra.listops as mod

    monkeypatch.setattr(mod, "read_listops", lambda *a: pytest.fail("cache not used"))
    dm2 = ListOpsDataModule(data_dir=tmp_path / "lo", batch_size=4)
    dm2.setup()
    assert next(iter(dm2.test_dataloader()))["labels"].tolist() == [4, 5, 8]


def test_max_length_truncates(tmp_path):
    write(tmp_path / "lo")
    dm = ListOpsDataModule(data_dir=tmp_path / "lo", max_length=3)
    dm.setup()
    assert max(len(dm.splits["train"][i][0]) for i in range(2)) == 3


def test_malformed_row_names_line(tmp_path):
    d = tmp_path / "lo"
    write(d)
    (d / "basic_val.tsv").write_text("Source\tTarget\n( [MAX 1 2 ] )\t2\n( [MAX 1 2 ] )\n")
    with pytest.raises(DataFormatError, match=r"basic_val.tsv:3"):
        ListOpsDataModule(data_dir=d).setup()
    (d / "basic_val.tsv").write_text("Source\tTarget\n( [MAX 1 2 ] )\t12\n")
    with pytest.raises(DataFormatError, match=r"basic_val.tsv:2"):
        ListOpsDataModule(data_dir=d).setup()


def test_missing_names_layout_and_command(tmp_path):
    with pytest.raises(DataNotFoundError) as e:
        ListOpsDataModule(data_dir=tmp_path / "nowhere").setup()
    msg = str(e.value)
    assert "basic_train.tsv" in msg and "seqssm data download listops --data-dir DIR" in msg
    assert f"seqssm data prepare listops --out {tmp_path / 'nowhere'}" in msg


def test_generator_deterministic_and_labels_correct():
    a = generate_listops(40, seed=3, min_length=10, max_length=300)
    b = generate_listops(40, seed=3, min_length=10, max_length=300)
    assert a == b and a != generate_listops(40, seed=4, min_length=10, max_length=300)
    tok = ListOpsTokenizer()
    for source, target in a:
        assert direct_eval(source) == target
        assert 10 < len(tok.split(source)) < 300
    assert len({t for _, t in a}) > 3  # labels are not degenerate


def test_generate_true_builds_readable_data(tmp_path):
    dm = ListOpsDataModule(data_dir=tmp_path / "gen", generate=True, generate_sizes=(20, 5, 5), batch_size=8)
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    assert batch["inputs"].shape[0] == 8 and int(batch["lengths"].max()) <= 2048
    assert batch["inputs"].max() < dm.vocab_size
    first = (tmp_path / "gen" / "basic_train.tsv").read_text().splitlines()[1]
    src, tgt = first.split("\t")
    assert direct_eval(src) == int(tgt)


def test_write_listops_layout(tmp_path):
    write_listops(tmp_path, 3, 2, 1, seed=0, min_length=5, max_length=50)
    lines = (tmp_path / "basic_train.tsv").read_text().splitlines()
    assert lines[0] == "Source\tTarget" and len(lines) == 4
