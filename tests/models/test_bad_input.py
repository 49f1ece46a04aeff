"""Bad input to SequenceModel's forward, scan and step (issue 19): token ids and numeric inputs of the wrong
dtype, shape or range are refused naming what was expected; empty in, empty out where an empty output exists."""

import os
import re

import pytest
import torch

from seqssm.models import build
from seqssm.errors import InputDtypeError, InputShapeError

VOCAB, D_INPUT = 11, 3
TINY = dict(d_model=8, n_layers=2, d_state=4, dropout=0.0)


@pytest.fixture(scope="module")
def lm():
    torch.manual_seed(0)
    return build("mamba-s6", vocab_size=VOCAB, **TINY).eval()


@pytest.fixture(scope="module")
def regressor():
    torch.manual_seed(0)
    return build("simple-s4d", d_input=D_INPUT, n_classes=2, pooling=None, **TINY).eval()


def test_token_ids_of_the_wrong_dtype_shape_or_range(lm):
    with pytest.raises(InputDtypeError, match=r"SequenceModel.forward: inputs must be integer token ids \(batch, L\) "
                                              r"\(torch.long\), got torch.float32"):
        lm(torch.ones(2, 5))
    with pytest.raises(InputShapeError, match=r"SequenceModel.scan: inputs must be token ids \(batch, L\), got shape "
                                              r"\(2, 5, 1\)"):
        lm.scan(torch.ones(2, 5, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=rf"inputs must lie in \[0, vocab_size\) = \[0, {VOCAB}\), "
                                         r"got ids from 0 to 12"):
        lm(torch.tensor([[0, 12]]))
    with pytest.raises(InputShapeError, match=r"SequenceModel.step: input_t must be token ids \(batch,\), got shape "
                                              r"\(2, 1\)"):
        lm.step(torch.ones(2, 1, dtype=torch.long), None)
    with pytest.raises(InputShapeError, match=r"state\[0\]\[0\] must have shape \(2, 16, 3\) .*got \(3, 16, 3\)"):
        lm.step(torch.ones(2, dtype=torch.long), lm.initial_state(3))


def test_numeric_inputs_of_the_wrong_dtype_or_width(regressor):
    with pytest.raises(InputDtypeError, match=r"inputs has dtype torch.int64.*cast to float: inputs.float\(\)"):
        regressor(torch.ones(2, 5, D_INPUT, dtype=torch.long))
    with pytest.raises(InputShapeError, match=rf"inputs must be \(batch, L, d_input\) = \(batch, L, {D_INPUT}\), "
                                              r"got \(2, 5, 4\)"):
        regressor.scan(torch.ones(2, 5, 4))
    with pytest.raises(InputShapeError, match=rf"input_t must be \(batch, d_input\) = \(batch, {D_INPUT}\), "
                                              rf"got \(2, 5, {D_INPUT}\)"):
        regressor.step(torch.ones(2, 5, D_INPUT), None)
    assert regressor(torch.randn(2, 5, D_INPUT, dtype=torch.float64)).shape == (2, 5, 2)


def test_masks_and_lengths(lm):
    ids = torch.randint(0, VOCAB, (2, 5))
    with pytest.raises(InputDtypeError, match=r"mask must be bool .*got torch.float32"):
        lm(ids, mask=torch.ones(2, 5))
    with pytest.raises(InputShapeError, match=r"mask must have shape \(batch, L\) = \(2, 5\), got \(2, 4\)"):
        lm(ids, mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, L\] = \[0, 5\], got values from 2 to 7"):
        lm(ids, lengths=torch.tensor([7, 2]))
    with pytest.raises(InputDtypeError, match=r"resets must be bool"):
        lm.scan(ids, None, resets=torch.zeros(2, 5))
    attention_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])  # a tokenizer's int64 0/1 mask
    torch.testing.assert_close(lm(ids, mask=attention_mask), lm(ids, lengths=torch.tensor([5, 3])), atol=0, rtol=0)


def test_pooled_models_need_a_token_per_sequence():
    torch.manual_seed(0)
    classifier = build("mamba-s6", vocab_size=VOCAB, n_classes=3, **TINY).eval()
    with pytest.raises(InputShapeError, match=r"pooling='mean' classifies whole sequences .* got an empty sequence"):
        classifier(torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match=r"needs at least one token per sequence; lengths holds 0 at rows \[1\]"):
        classifier(torch.randint(0, VOCAB, (2, 4)), lengths=torch.tensor([4, 0]))
    assert classifier(torch.zeros(0, 4, dtype=torch.long)).shape == (0, 3)


@pytest.mark.parametrize("batch,length", [(2, 0), (0, 5)])
def test_empty_in_empty_out(lm, batch, length):
    ids = torch.zeros(batch, length, dtype=torch.long)
    assert lm(ids).shape == (batch, length, VOCAB)
    out, state = lm.scan(ids)
    assert out.shape == (batch, length, VOCAB)
    _, carried = lm.scan(torch.randint(0, VOCAB, (batch, 3)))
    _, after = lm.scan(ids[:, :0], carried)
    assert after is carried  # L = 0: the state passes through unchanged
    out, state = lm.step(torch.zeros(batch, dtype=torch.long), None)
    assert out.shape == (batch, VOCAB)


# -- model folders and the commands that read them (issue 27) -------------------------------------------------------
def seqssm_folder(tmp_path, name="m", **changes):
    """A tiny seqssm language-model folder whose config.json has `changes` applied (None deletes a key; a dotted
    key "model.block.X" changes an entry inside)."""
    import json

    folder = tmp_path / name
    build("mamba-s6", vocab_size=VOCAB, **TINY).save_pretrained(folder)
    meta = json.loads((folder / "config.json").read_text())
    for dotted, value in changes.items():
        *path, key = dotted.split(".")
        target = meta
        for part in path:
            target = target[part]
        if value is None:
            del target[key]
        else:
            target[key] = value
    (folder / "config.json").write_text(json.dumps(meta))
    return folder


BAD_CONFIGS = [  # (config.json changes, words of the error: the file, the key, what is expected)
    ({"model.d_model": 4}, r"model\.safetensors: tensor 'embedding\.weight' has shape \[11, 8\], but .*config\.json "
                           r"describes a model whose 'embedding\.weight' is \[11, 4\]: config\.json and the weights "
                           r"disagree"),
    ({"model.d_model": "abc"}, r"config\.json: 'model': d_model must be a positive integer, got 'abc'"),
    ({"format_version": "abc"}, r"config\.json: format_version is 'abc', expected an integer from 1 to 2"),
    ({"format_version": 9}, r"config\.json: format_version 9 is newer than this seqssm reads \(2\); upgrade seqssm"),
    ({"model": None}, r"config\.json: 'model' is missing, expected the model config as a JSON object"),
    ({"extra": 1}, r"config\.json: unknown key 'extra'; a seqssm config\.json holds \['format', 'format_version'"),
    ({"model.d_modle": 8}, r"config\.json: 'model': unknown model config entries \['d_modle'\]"),
    ({"model.block.expand": "x"}, r"config\.json: 'model': MambaBlockConfig: expand must be an integer >= 1, got 'x'"),
    ({"model.block.norm_eps": "x"}, r"config\.json: 'model': norm_eps must be a number > 0, got 'x'"),
]


@pytest.mark.parametrize("changes, words", BAD_CONFIGS, ids=[str(c) for c, _ in BAD_CONFIGS])
def test_a_bad_config_json_names_the_file_the_key_and_the_expected_value(tmp_path, capsys, changes, words):
    from seqssm.cli import main
    from seqssm.errors import PretrainedFormatError
    from seqssm.models import SequenceModel

    folder = seqssm_folder(tmp_path, **changes)
    with pytest.raises(PretrainedFormatError, match=words):
        SequenceModel.from_pretrained(folder)
    for argv in (["generate", str(folder), "--prompt", "1 2"], ["convert", str(folder), str(tmp_path / "o"), "--to", "hf"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        lines = capsys.readouterr().err.strip().splitlines()
        assert exit_info.value.code == 2 and len(lines) == 1, lines
        assert re.search(words, lines[0]) and str(folder) in lines[0] and "Traceback" not in lines[0]
    assert not (tmp_path / "o").exists()


def test_generate_names_a_missing_folder_or_hub_id_not_its_tokenizer(tmp_path, capsys, monkeypatch):
    from seqssm.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main(["generate", "no_such_folder", "--prompt", "hi"])
    err = capsys.readouterr().err
    assert "PATH: no_such_folder: no such file or folder (nor a Hub id, which reads ORG/NAME)" in err
    assert "tokenizer" not in err


def task_checkpoint(path):
    """A task checkpoint of the tiny language model, as `seqssm fit` stores the parts that export reads."""
    model = build("mamba-s6", vocab_size=VOCAB, **TINY)
    torch.save({"seqssm_model_config": model.config.to_dict(),
                "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}}, path)
    return path


def users_folder(tmp_path, content: str):
    """A folder --overwrite must not replace: a model folder with the user's notes, or the user's own files."""
    if content == "notes":  # a model folder, replaceable, but for the user's notes
        out = seqssm_folder(tmp_path, "out")
        (out / "notes.txt").write_text("mine")
        return out
    out = tmp_path / "out"
    out.mkdir()
    (out / "README.md").write_text("# my project")
    if content == "own config":
        (out / "config.json").write_text('{"learning_rate": 0.1}')
        (out / "tokenizer_config.json").write_text("{}")
    if content == "no weights":  # a model's config.json, but its weights are gone: nothing to replace
        (seqssm_folder(tmp_path, "m") / "config.json").rename(out / "config.json")
    return out


OVERWRITE_REFUSALS = {  # what the folder holds -> the words of the refusal
    "notes": r"it holds notes\.txt, which no model folder holds; nothing was written",
    "readme only": r"it holds README\.md but no config\.json, so it is no model folder \(those may be your own "
                   r"files\); nothing was written",
    "own config": r"it holds README\.md, config\.json, tokenizer_config\.json but its config\.json names no seqssm, "
                  r"Hugging Face or mamba_ssm model, so it is no model folder",
    "no weights": r"it holds README\.md, config\.json but no weights \(model\.safetensors\.index\.json, "
                  r"model\.safetensors, pytorch_model\.bin\), so it is no model folder",
}


@pytest.mark.parametrize("content", OVERWRITE_REFUSALS)
@pytest.mark.parametrize("how", ["save_pretrained", "convert", "export"])
def test_overwrite_never_deletes_a_users_files(tmp_path, capsys, how, content):
    from seqssm.cli import main
    from seqssm.errors import OutputExistsError

    src = seqssm_folder(tmp_path, "src")
    out = users_folder(tmp_path, content)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    words = rf"refusing to replace {re.escape(str(out))}: {OVERWRITE_REFUSALS[content]}"
    if how == "save_pretrained":
        with pytest.raises(OutputExistsError, match=words):
            build("mamba-s6", vocab_size=VOCAB, **TINY).save_pretrained(out, overwrite=True)
    else:
        argv = (["convert", str(src), str(out), "--to", "seqssm"] if how == "convert"
                else ["export", str(task_checkpoint(tmp_path / "last.ckpt")), str(out)])
        with pytest.raises(SystemExit) as exit_info:
            main([*argv, "--overwrite"])
        lines = capsys.readouterr().err.strip().splitlines()
        assert exit_info.value.code == 2 and len(lines) == 1 and re.search(words, lines[0]), lines
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not list(tmp_path.glob(".out.*")), "no staging folder left"


@pytest.mark.parametrize("umask", [0o022, 0o027], ids=oct)
def test_weights_are_as_readable_as_the_other_files_of_the_folder(tmp_path, capsys, umask):
    from seqssm.cli import main

    old = os.umask(umask)
    try:
        build("mamba-s6", vocab_size=VOCAB, **TINY).save_pretrained(tmp_path / "seqssm")
        build("mamba-s6", vocab_size=VOCAB, **TINY).save_pretrained(tmp_path / "hf", format="hf")
        main(["export", str(task_checkpoint(tmp_path / "last.ckpt")), str(tmp_path / "export")])
        main(["convert", str(tmp_path / "hf"), str(tmp_path / "convert"), "--to", "seqssm"])
    finally:
        os.umask(old)
    for folder in ("seqssm", "hf", "export", "convert"):
        modes = {p.name: oct(p.stat().st_mode & 0o777) for p in (tmp_path / folder).iterdir()}
        assert modes == dict.fromkeys(["README.md", "config.json", "model.safetensors"], oct(0o666 & ~umask)), folder


def shard(folder, names: tuple[str, ...] = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")):
    """Split the model.safetensors of `folder` into the shards `names` (relative to the folder, as its index
    names them) and write model.safetensors.index.json; returns the index's weight_map."""
    import json

    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    weight_map = {key: names[i % len(names)] for i, key in enumerate(sorted(tensors))}
    for name in names:
        save_file({k: v for k, v in tensors.items() if weight_map[k] == name}, str(folder / name))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return weight_map


SHARDS_OUTSIDE = {  # how the index reaches out of the folder -> the words of the refusal
    "absolute path": r"model\.safetensors\.index\.json: names the file '/.*/elsewhere/b\.safetensors', which is not a "
                     r"file of .*/m: a model folder reads only its own files",
    "dot-dot": r"model\.safetensors\.index\.json: names the file '\.\./elsewhere/b\.safetensors', which is not a file",
    "link out": r"model\.safetensors\.index\.json: b\.safetensors links to .*/elsewhere/b\.safetensors, which is "
                r"not in .*/m: a model folder reads only its own files\. Copy the file into the folder",
}


@pytest.mark.parametrize("how", SHARDS_OUTSIDE)
def test_a_shard_outside_the_folder_is_refused_before_any_is_opened(tmp_path, capsys, monkeypatch, how):
    import json

    from seqssm.cli import main
    from seqssm.models import SequenceModel
    from seqssm.models.formats import files

    folder = seqssm_folder(tmp_path)
    assert SequenceModel.from_pretrained(folder) is not None
    shard(folder, ("a.safetensors", "b.safetensors"))  # a sharded folder loads; now move one shard away
    (tmp_path / "elsewhere").mkdir()
    (folder / "b.safetensors").rename(tmp_path / "elsewhere" / "b.safetensors")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    name = {"absolute path": str(tmp_path / "elsewhere" / "b.safetensors"), "dot-dot": "../elsewhere/b.safetensors",
            "link out": "b.safetensors"}[how]
    if how == "link out":
        (folder / "b.safetensors").symlink_to(tmp_path / "elsewhere" / "b.safetensors")
    index["weight_map"] = {k: name if v == "b.safetensors" else v for k, v in index["weight_map"].items()}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    opened = []
    monkeypatch.setattr(files, "read_safetensors", opened.append)
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", str(folder), str(tmp_path / "out"), "--to", "seqssm"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(lines) == 1 and re.search(SHARDS_OUTSIDE[how], lines[0]), lines
    assert opened == [] and not (tmp_path / "out").exists()


def safetensors_bytes(header) -> bytes:
    """A safetensors file whose header is `header` (any JSON value) and 8 bytes of data."""
    import json

    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + bytes(8)


BAD_SAFETENSORS = {  # model.safetensors -> the words of the one error line
    "a JSON list": (safetensors_bytes([1, 2]), r"not a safetensors file: its header is a JSON list, not an object of "
                                               r"tensors\. Write or fetch it again\."),
    "no data_offsets": (safetensors_bytes({"w": {"dtype": "F32", "shape": [2]}}),
                        r"not a safetensors file: its header gives tensor 'w' no valid 'data_offsets'"),
    "random bytes": (bytes(range(256)) * 8, r"not a safetensors file \(no JSON header after its first 8 bytes\)"),
    "five bytes": (b"\x01\x02\x03\x04\x05", r"truncated, or not a safetensors file: 5 bytes, fewer than a safetensors "
                                          r"header"),
    "cut in its header": (None, r"truncated inside its safetensors header \(100 bytes, the header alone declares "
                                r"\d+\)"),
}


@pytest.mark.parametrize("case", BAD_SAFETENSORS)
def test_a_file_that_is_no_safetensors_file_says_so_in_one_line(tmp_path, capsys, case):
    from seqssm.cli import main

    folder = seqssm_folder(tmp_path)
    data, words = BAD_SAFETENSORS[case]
    weights = folder / "model.safetensors"
    weights.write_bytes(data if data is not None else weights.read_bytes()[:100])
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", str(folder), str(tmp_path / "out"), "--to", "hf"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(lines) == 1, lines
    assert re.search(re.escape(str(weights)) + ": " + words, lines[0]), lines
    assert not (tmp_path / "out").exists()


class Payload:
    """Unpickling this runs os.system: a file that holds it must be refused, never loaded."""

    def __reduce__(self):
        return os.system, (f"touch {os.environ['PAYLOAD_MARK']}",)


def test_a_legacy_format_pickle_is_refused_as_one_never_called_truncated(tmp_path, capsys, monkeypatch):
    from seqssm.cli import main
    from seqssm.models.loading import read_weights

    monkeypatch.setenv("PAYLOAD_MARK", str(tmp_path / "payload-ran"))
    state = {f"model.{k}": v for k, v in build("mamba-s6", vocab_size=VOCAB, **TINY).state_dict().items()}
    torch.save({"state_dict": state}, tmp_path / "plain.ckpt", _use_new_zipfile_serialization=False)
    assert read_weights(tmp_path / "plain.ckpt")[0].keys() == {k[len("model."):] for k in state}  # read as before
    torch.save({"state_dict": state, "x": Payload()}, tmp_path / "evil.ckpt", _use_new_zipfile_serialization=False)
    (tmp_path / "cut.ckpt").write_bytes((tmp_path / "plain.ckpt").read_bytes()[:60])
    for name, words in (("evil.ckpt", "refused: it holds Python objects beyond tensors and plain values, and seqssm "
                                      "never unpickles those"),
                        ("cut.ckpt", "unreadable, damaged file of torch.save's legacy format (EOFError")):
        with pytest.raises(SystemExit) as exit_info:
            main(["export", str(tmp_path / name), str(tmp_path / "out")])
        lines = capsys.readouterr().err.strip().splitlines()
        assert exit_info.value.code == 2 and len(lines) == 1, lines
        assert lines[0].startswith(f"seqssm export: error: {tmp_path / name}: {words}"), lines
    assert not (tmp_path / "payload-ran").exists() and not (tmp_path / "out").exists()


def test_init_strict_false_says_which_tensors_were_skipped_and_which_are_new(caplog):
    import logging

    from seqssm.tasks.pretrained import load_weights

    source = build("mamba-s6", vocab_size=VOCAB, **{**TINY, "n_layers": 1}).state_dict()
    source["extra.weight"] = torch.zeros(1)
    source["head.weight"] = torch.zeros(3, 8)
    target = build("mamba-s6", vocab_size=VOCAB, **TINY)
    with caplog.at_level(logging.WARNING, logger="seqssm.tasks.pretrained"):
        report = load_weights(target, source, strict=False, source="init_from=small")
    (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    message = record.getMessage()
    assert message.startswith("init_from=small loaded only in part (init_strict: false)")
    assert f"missing from the weights ({len(report.missing)}): backbone.layers.1." in message
    assert "(newly initialised)" in message and "unexpected, not in the model (1): extra.weight (skipped)" in message
    assert "shape mismatch: head.weight: weights [3, 8] vs model [11, 8] (skipped; newly initialised)" in message


@pytest.mark.parametrize("fmt, key, value, words", [
    ("hf", "hidden_size", "abc", r"config\.json: hidden_size='abc' is not supported: seqssm's Mamba block needs a "
                                 r"positive integer here"),
    ("hf", "layer_norm_epsilon", "x", r"config\.json: could not convert string to float: 'x'"),
    ("mamba_ssm", "n_layer", 0, r"config\.json: n_layer=0 is not supported"),
])
def test_a_bad_foreign_config_names_the_key_as_the_file_spells_it(tmp_path, fmt, key, value, words):
    import json

    from seqssm.errors import PretrainedFormatError
    from seqssm.models import SequenceModel

    folder = tmp_path / "m"
    build("mamba-s6", vocab_size=VOCAB, **TINY).save_pretrained(folder, format="hf")
    config = json.loads((folder / "config.json").read_text())
    if fmt == "mamba_ssm":
        config = {"d_model": 8, "n_layer": 2, "vocab_size": VOCAB, "ssm_cfg": {"d_state": 4}}
    config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(PretrainedFormatError, match=words):
        SequenceModel.from_pretrained(folder)
