"""Bad input to SequenceModel's forward, scan and step (issue 19): token ids and numeric inputs of the wrong
dtype, shape or range are refused naming what was expected; empty in, empty out where an empty output exists."""

import re

import pytest
import torch

from seqssm.models import build
from seqssm.ops.checks import InputDtypeError, InputShapeError

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


@pytest.mark.parametrize("how", ["save_pretrained", "convert", "export"])
def test_overwrite_never_deletes_a_users_files(tmp_path, capsys, how):
    from seqssm.cli import main
    from seqssm.errors import OutputExistsError

    src = seqssm_folder(tmp_path, "src")
    out = seqssm_folder(tmp_path, "out")  # a model folder, replaceable, but for the user's notes
    (out / "notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    if how == "save_pretrained":
        with pytest.raises(OutputExistsError, match=r"it holds notes\.txt, which no model folder holds; nothing was"):
            build("mamba-s6", vocab_size=VOCAB, **TINY).save_pretrained(out, overwrite=True)
    else:
        ckpt = tmp_path / "last.ckpt"
        torch.save({"seqssm_model_config": build("mamba-s6", vocab_size=VOCAB, **TINY).config.to_dict(),
                    "state_dict": {f"model.{k}": v for k, v in build("mamba-s6", vocab_size=VOCAB, **TINY)
                                   .state_dict().items()}}, ckpt)
        argv = ["convert", str(src), str(out), "--to", "seqssm"] if how == "convert" else ["export", str(ckpt), str(out)]
        with pytest.raises(SystemExit):
            main([*argv, "--overwrite"])
        assert "it holds notes.txt, which no model folder holds; nothing was written" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


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
