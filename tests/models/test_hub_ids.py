"""Models by Hub id (issue 27): fetched once through huggingface_hub into the shared cache (blobs / refs /
snapshots), read from there offline, a local folder of that name first; seqssm, Hugging Face and mamba_ssm
repositories; a missing revision, a truncated download and offline mode, all against a loopback Hub."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import torch

from seqssm.errors import DownloadError, MissingFileError
from seqssm.models import SequenceModel, build
from seqssm.models.formats import mamba_ssm
from seqssm.models.formats.mamba_lm import external_keys
from seqssm.models.resolve import hub_id

from .hub_server import Repo, folder_files

VOCAB = 37


def tiny_lm(seed: int = 0, **kwargs) -> SequenceModel:
    torch.manual_seed(seed)
    return build("mamba-s6", vocab_size=VOCAB, d_model=16, n_layers=2, d_state=4, **kwargs).eval()


def write_mamba_ssm(model: SequenceModel, folder: Path) -> None:
    """`model` as mamba_ssm writes a MambaLMHeadModel: config.json and a torch.save'd state dict."""
    folder.mkdir(parents=True)
    names = external_keys(model.state_dict(), mamba_ssm.TOP_KEYS, model.config)
    torch.save({names[k]: v for k, v in model.state_dict().items()}, folder / "pytorch_model.bin")
    config = {"d_model": model.config.d_model, "n_layer": model.config.n_layers, "vocab_size": VOCAB,
              "ssm_cfg": {"d_state": 4}, "pad_vocab_size_multiple": model.config.pad_vocab_size_multiple,
              "tie_embeddings": model.config.tie_embeddings}
    (folder / "config.json").write_text(json.dumps(config))


def model_folder(model: SequenceModel, fmt: str, folder: Path) -> Path:
    """`model` written as a folder of format `fmt`, with a file no model needs (which is not fetched)."""
    if fmt == "mamba_ssm":
        write_mamba_ssm(model, folder)
    else:
        model.save_pretrained(folder, format=fmt)
    (folder / "training-log.txt").write_text("not a model file")
    return folder


def same_outputs(a: SequenceModel, b: SequenceModel) -> bool:
    ids = torch.randint(0, VOCAB, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return torch.equal(a.eval()(ids), b.eval()(ids))


def publish(hub, repo_id: str, folder: Path, branch: str = "main") -> str:
    repo = hub.repos.setdefault(repo_id, Repo())
    return repo.commit(folder_files(folder), branch)


@pytest.mark.parametrize("fmt", ["seqssm", "hf", "mamba_ssm"])
def test_each_format_loads_by_id_once_and_then_from_the_cache(hub, tmp_path, fmt):
    from huggingface_hub import constants, scan_cache_dir, try_to_load_from_cache

    kwargs = {"tie_embeddings": True, "n_classes": None, "pooling": None}
    if fmt == "mamba_ssm":
        kwargs["pad_vocab_size_multiple"] = 8
    model = tiny_lm(**kwargs)
    sha = publish(hub, "org/tiny", model_folder(model, fmt, tmp_path / "src"))
    loaded = SequenceModel.from_pretrained("org/tiny")
    assert same_outputs(model, loaded)
    cache = Path(constants.HF_HUB_CACHE)
    snapshot = cache / "models--org--tiny" / "snapshots" / sha
    assert (cache / "models--org--tiny" / "refs" / "main").read_text() == sha
    assert "training-log.txt" not in {p.name for p in snapshot.iterdir()}, "only model files are fetched"
    assert try_to_load_from_cache("org/tiny", "config.json", cache_dir=cache) == str(snapshot / "config.json")
    (info,) = scan_cache_dir(cache).repos
    assert info.repo_id == "org/tiny" and {r.commit_hash for r in info.revisions} == {sha}
    assert all((snapshot / f.file_name).is_symlink() for f in next(iter(info.revisions)).files)

    fetched = len(hub.requests)
    constants.HF_HUB_OFFLINE = True  # the fixture restores it
    assert same_outputs(model, SequenceModel.from_pretrained("org/tiny"))
    assert len(hub.requests) == fetched, "offline: not one request"
    constants.HF_HUB_OFFLINE = False
    hub.close()  # unreachable now: huggingface_hub falls back on the cache
    assert same_outputs(model, SequenceModel.from_pretrained("org/tiny"))


def test_revisions_by_argument_or_after_an_at(hub, tmp_path):
    old, new = tiny_lm(0), tiny_lm(1)
    publish(hub, "org/m", model_folder(old, "seqssm", tmp_path / "old"), branch="v1")
    sha = publish(hub, "org/m", model_folder(new, "seqssm", tmp_path / "new"))
    assert same_outputs(new, SequenceModel.from_pretrained("org/m"))
    assert same_outputs(old, SequenceModel.from_pretrained("org/m", revision="v1"))
    assert same_outputs(old, SequenceModel.from_pretrained("org/m@v1"))
    assert same_outputs(new, SequenceModel.from_pretrained("org/m", revision=sha))
    with pytest.raises(MissingFileError, match=r"the Hub model org/m at revision 'v9' does not exist: the Hub has no "
                                               r"such branch, tag or commit"):
        SequenceModel.from_pretrained("org/m", revision="v9")


def test_a_missing_repository_and_a_mistyped_path_say_which(hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MissingFileError, match=r"no local folder org/nothere, and the Hub model org/nothere at "
                                               r"revision 'main' does not exist \(or is private"):
        SequenceModel.from_pretrained("org/nothere")
    for typo in ("./runs/model", "runs/last.ckpt", "mymodel", "/abs/org/name"):
        with pytest.raises(MissingFileError, match=r": no such file or folder \(nor a Hub id, which reads ORG/NAME\)"):
            SequenceModel.from_pretrained(typo)
    assert not any(path.startswith("/api/models/runs") for _, path in hub.requests)
    assert hub_id("state-spaces/mamba-130m-hf") == ("state-spaces/mamba-130m-hf", None)
    assert hub_id("org/name@v1.0") == ("org/name", "v1.0") and hub_id("a/b/c") is None


def test_a_local_folder_of_that_name_wins(hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    local, remote = tiny_lm(0), tiny_lm(1)
    publish(hub, "org/m", model_folder(remote, "seqssm", tmp_path / "remote"))
    local.save_pretrained(tmp_path / "org" / "m")
    assert same_outputs(local, SequenceModel.from_pretrained("org/m"))
    assert hub.requests == []


def test_offline_or_unreachable_without_a_cached_copy_says_how_to_fetch_it(hub, tmp_path):
    from huggingface_hub import constants

    publish(hub, "org/m", model_folder(tiny_lm(), "seqssm", tmp_path / "src"))
    constants.HF_HUB_OFFLINE = True
    with pytest.raises(MissingFileError, match=r"org/m at revision 'main' is not in the Hugging Face cache .*"
                                               r"HF_HUB_OFFLINE is set; fetch it on a machine with access "
                                               r"\(`hf download org/m --revision main`"):
        SequenceModel.from_pretrained("org/m")
    constants.HF_HUB_OFFLINE = False
    hub.close()
    with pytest.raises(MissingFileError, match=r"is not in the Hugging Face cache .*the Hub cannot be reached"):
        SequenceModel.from_pretrained("org/m", revision="v2")


def test_a_truncated_download_is_never_used(hub, tmp_path):
    from huggingface_hub import constants

    model = tiny_lm()
    sha = publish(hub, "org/m", model_folder(model, "seqssm", tmp_path / "src"))
    hub.truncate.add("org/m/model.safetensors")
    with pytest.raises(DownloadError, match=r"org/m at revision 'main' could not be fetched .*nothing half-written"):
        SequenceModel.from_pretrained("org/m")
    snapshot = Path(constants.HF_HUB_CACHE) / "models--org--m" / "snapshots" / sha
    assert not (snapshot / "model.safetensors").exists(), "the snapshot holds no part of the file"
    constants.HF_HUB_OFFLINE = True
    with pytest.raises(MissingFileError, match=r"is only partly \(an interrupted download\) in the Hugging Face cache"):
        SequenceModel.from_pretrained("org/m")
    constants.HF_HUB_OFFLINE = False
    hub.truncate.clear()
    assert same_outputs(model, SequenceModel.from_pretrained("org/m"))  # the next run completes it


def lay_out_cache(src: Path, cache: Path, repo_id: str = "org/hand") -> Path:
    """The files of folder `src` as huggingface_hub lays out a fetched repository in `cache`: blobs named by
    digest, refs/main holding the commit, snapshot entries linking to the blobs; returns the snapshot folder."""
    repo, sha = cache / f"models--{repo_id.replace('/', '--')}", "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(sha)
    for name, data in folder_files(src).items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(exist_ok=True)
        blob.write_bytes(data)
        link = repo / "snapshots" / sha / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("../..") / "blobs" / blob.name)
    return repo / "snapshots" / sha


def test_a_cache_laid_out_by_hand_reads_offline(tmp_path, monkeypatch):
    """The layout huggingface_hub documents, checked with huggingface_hub's own cache scanner, then read with
    HF_HUB_OFFLINE."""
    from huggingface_hub import constants, scan_cache_dir, try_to_load_from_cache

    model = tiny_lm()
    lay_out_cache(model_folder(model, "hf", tmp_path / "src"), tmp_path / "cache")
    (info,) = scan_cache_dir(tmp_path / "cache").repos
    assert info.repo_id == "org/hand" and next(iter(info.revisions)).refs == frozenset({"main"})
    assert try_to_load_from_cache("org/hand", "config.json", cache_dir=tmp_path / "cache") is not None
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert same_outputs(model, SequenceModel.from_pretrained("org/hand", cache_dir=tmp_path / "cache"))


def test_a_cached_sharded_model_reads_through_its_links_and_never_outside(tmp_path, monkeypatch):
    import json

    from huggingface_hub import constants

    from seqssm.errors import PretrainedFormatError

    from .test_bad_input import shard

    model = tiny_lm()
    src = model_folder(model, "hf", tmp_path / "src")
    weight_map = shard(src)
    lay_out_cache(src, tmp_path / "cache")  # each shard a link into blobs/: the snapshot's own files
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert same_outputs(model, SequenceModel.from_pretrained("org/hand", cache_dir=tmp_path / "cache"))
    # a repository whose index names a file elsewhere on the machine: refused, also when it is a safetensors file
    elsewhere = tmp_path / "elsewhere.safetensors"
    model.save_pretrained(tmp_path / "other", format="hf")
    (tmp_path / "other" / "model.safetensors").rename(elsewhere)
    index = {"weight_map": dict.fromkeys(weight_map, str(elsewhere))}
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    lay_out_cache(src, tmp_path / "cache", "org/bad")
    with pytest.raises(PretrainedFormatError, match=rf"model\.safetensors\.index\.json: names the file "
                                                    rf"'{elsewhere}', which is not a file of .*snapshots"):
        SequenceModel.from_pretrained("org/bad", cache_dir=tmp_path / "cache")


PARTLY_CACHED = {  # how a cache entry was broken -> what the message says is missing
    "a missing blob": r"model\.safetensors links to a blob that is missing",
    "an interrupted download": r"no weights: .*; blobs/[0-9a-f]{64}\.incomplete is an interrupted download",
    "a snapshot without weights": r"no weights: expected model\.safetensors\.index\.json, model\.safetensors, "
                                  r"pytorch_model\.bin",
}


@pytest.mark.parametrize("broken", PARTLY_CACHED)
def test_a_model_only_partly_in_the_cache_says_how_to_fetch_it_again(tmp_path, monkeypatch, capsys, broken):
    from huggingface_hub import constants

    from seqssm.cli import main

    snapshot = lay_out_cache(model_folder(tiny_lm(), "hf", tmp_path / "src"), tmp_path / "cache")
    blob = (snapshot / "model.safetensors").resolve()
    if broken == "a missing blob":
        blob.unlink()
    else:
        (snapshot / "model.safetensors").unlink()
        if broken == "an interrupted download":
            blob.rename(blob.with_name(blob.name + ".incomplete"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", "org/hand", "out", "--to", "seqssm"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(lines) == 1, lines
    assert re.search(rf"the Hub model org/hand at commit {snapshot.name} is only partly in the Hugging Face cache "
                     rf"{tmp_path / 'cache'} \({PARTLY_CACHED[broken]}\): fetch it again with `hf download org/hand "
                     rf"--revision {snapshot.name}`", lines[0]), lines
    assert not (tmp_path / "out").exists()


def test_commands_init_from_and_core_init_from_take_ids(hub, tmp_path, monkeypatch, capsys):
    pytest.importorskip("gymnasium", reason="an agent's core needs the rl extra: pip install 'seqssm[rl]'")
    from seqssm.cli import main
    from seqssm.models.loading import read_weights
    from seqssm.rl.core import load_core

    monkeypatch.chdir(tmp_path)
    model = tiny_lm(tie_embeddings=True)
    publish(hub, "org/m", model_folder(model, "hf", tmp_path / "src"))
    main(["generate", "org/m", "--prompt", "1 2 3", "--max-new-tokens", "4"])
    expected = model.generate(torch.tensor([[1, 2, 3]]), 4, temperature=0)[0].tolist()
    assert capsys.readouterr().out.split() == [str(i) for i in expected]
    main(["convert", "org/m", "out", "--to", "seqssm"])
    assert same_outputs(model, SequenceModel.from_pretrained(tmp_path / "out"))
    state, _ = read_weights("org/m")
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    core, config = load_core("org/m")
    assert config["d_model"] == 16 and torch.equal(core.state_dict()["norm_f.weight"],
                                                   model.state_dict()["backbone.norm_f.weight"])
