"""`seqssm export` / `seqssm convert` never overwrite a folder unasked, and --overwrite replaces it whole."""

from __future__ import annotations

import json

import pytest
import torch

from seqssm.cli import main
from seqssm.models import SequenceModel, build
from seqssm.models.hub import OutputExistsError, save_pretrained
from seqssm.models.loading import CHECKPOINT_MODEL_CONFIG


@pytest.fixture
def checkpoint(tmp_path):
    """A task checkpoint as `seqssm fit` writes it (the parts export reads)."""
    model = build("mamba-s6", vocab_size=12, n_classes=3, d_model=8, n_layers=1)
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                CHECKPOINT_MODEL_CONFIG: model.config.to_dict()}, path)
    return path, model


def folder_state(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_export_refuses_a_non_empty_folder_and_writes_nothing(tmp_path, checkpoint, capsys):
    ckpt, _ = checkpoint
    out = tmp_path / "my-model"
    out.mkdir()
    (out / "config.json").write_text('{"format": "seqssm", "note": "a model the user keeps"}')
    (out / "model.safetensors").write_bytes(b"old weights")
    before = folder_state(out)
    with pytest.raises(SystemExit) as info:
        main(["export", str(ckpt), str(out)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"seqssm export: error: {out} is not empty (config.json, model.safetensors); nothing was written" in err
    assert "--overwrite" in err
    assert folder_state(out) == before


def test_export_overwrite_replaces_a_model_folder_and_never_a_users_files(tmp_path, checkpoint, capsys):
    ckpt, model = checkpoint
    out = save_pretrained(build("mamba-s6", vocab_size=12, d_model=8, n_layers=1), tmp_path / "my-model")
    (out / "tokenizer.json").write_text("{}")  # from an earlier model: a stale file goes with it
    (out / "notes.txt").write_text("the user's own notes")
    before = folder_state(out)
    with pytest.raises(SystemExit):
        main(["export", str(ckpt), str(out), "--overwrite"])
    assert "it holds notes.txt, which no model folder holds; nothing was written" in capsys.readouterr().err
    assert folder_state(out) == before
    (out / "notes.txt").unlink()
    main(["export", str(ckpt), str(out), "--overwrite"])
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "my-model"], "no staging folder left"
    loaded = SequenceModel.from_pretrained(out)
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


def test_convert_overwrite_leaves_no_stale_tokenizer(tmp_path, capsys):
    src = save_pretrained(build("mamba-s6", vocab_size=32, d_model=8, n_layers=1), tmp_path / "src")
    dst = save_pretrained(build("mamba-s6", vocab_size=32, d_model=8, n_layers=1), tmp_path / "dst")
    (dst / "tokenizer.json").write_text("{}")  # from an earlier conversion of another model
    before = folder_state(dst)
    with pytest.raises(SystemExit):
        main(["convert", str(src), str(dst), "--to", "hf"])
    assert "is not empty (README.md, config.json, model.safetensors, tokenizer.json); nothing was written" in \
        capsys.readouterr().err
    assert folder_state(dst) == before

    main(["convert", str(src), str(dst), "--to", "hf", "--overwrite"])
    assert sorted(p.name for p in dst.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert json.loads((dst / "config.json").read_text())["model_type"] == "mamba"


def test_convert_validates_before_writing(tmp_path, capsys):
    src = save_pretrained(build("mamba-s4d", vocab_size=32, d_model=8, n_layers=1), tmp_path / "s4d")
    dst = save_pretrained(build("mamba-s6", vocab_size=32, d_model=8, n_layers=1), tmp_path / "dst")
    before = folder_state(dst)
    with pytest.raises(SystemExit):
        main(["convert", str(src), str(dst), "--to", "hf", "--overwrite"])  # Hugging Face Mamba holds no S4D
    assert "S6 cores only" in capsys.readouterr().err
    assert folder_state(dst) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst", "s4d"]


def test_overwrite_refuses_what_is_not_a_model_folder(tmp_path, monkeypatch):
    model = build("mamba-s6", vocab_size=32, d_model=8, n_layers=1)
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(OutputExistsError, match="not empty"):
        save_pretrained(model, tmp_path)  # the library refuses too, unless asked
    (tmp_path / "data").mkdir()
    with pytest.raises(OutputExistsError, match=r"it holds data/, notes.txt, which no model folder holds"):
        save_pretrained(model, tmp_path, overwrite=True)
    monkeypatch.chdir(tmp_path / "data")
    (tmp_path / "data" / "x.txt").write_text("")
    with pytest.raises(OutputExistsError, match="working directory"):
        save_pretrained(model, ".", overwrite=True)
    assert (tmp_path / "data" / "x.txt").is_file()


def test_export_of_a_model_folder_says_it_is_one_and_how_to_rewrite_it(tmp_path, capsys):
    folder = save_pretrained(build("mamba-s6", vocab_size=32, d_model=8, n_layers=1), tmp_path / "exported")
    with pytest.raises(SystemExit) as info:
        main(["export", str(folder), str(tmp_path / "out")])
    assert info.value.code == 2
    assert capsys.readouterr().err == (
        f"seqssm export: error: checkpoint: {folder} is a model folder already, not a task checkpoint of `seqssm fit`: "
        f"load it as it is, or rewrite it with `seqssm convert {folder} {tmp_path / 'out'} --to seqssm` (or --to hf)\n")
    assert not (tmp_path / "out").exists()


def test_a_hub_id_to_push_to_is_checked_before_anything_is_written(tmp_path, checkpoint, capsys):
    from seqssm.errors import UploadError
    from seqssm.models.hub import push_to_hub

    ckpt, _ = checkpoint
    with pytest.raises(SystemExit) as info:
        main(["export", str(ckpt), str(tmp_path / "out"), "--push-to-hub", "not/a/valid/id"])
    lines = capsys.readouterr().err.splitlines()
    assert info.value.code == 2 and len(lines) == 1 and "Traceback" not in lines[0]
    assert "--push-to-hub 'not/a/valid/id' is not a Hub repository id" in lines[0] and "repo_type" not in lines[0]
    assert not (tmp_path / "out").exists()
    with pytest.raises(UploadError, match=r"repo_id 'org/a--b' is not a Hub repository id \(Cannot have -- or \.\. in "
                                          r"repo_id: 'org/a--b'\); give ORG/NAME"):
        push_to_hub(tmp_path, "org/a--b")  # the library checks too, before it sends anything
