"""Model cards (README.md with the Hub's metadata block) written with every model folder, and push_to_hub through
huggingface_hub against the loopback Hub (issue 27)."""

from __future__ import annotations

import pytest
import torch

from seqssm.errors import UploadError
from seqssm.models import SequenceModel, build
from seqssm.models.hub import model_card

from .hub_server import Repo


def card_data(folder):
    from huggingface_hub import ModelCard

    return ModelCard.load(folder / "README.md").data.to_dict()


def test_export_writes_a_card_with_what_the_checkpoint_knows(tmp_path):
    from pathlib import Path

    from seqssm.cli import main

    ckpt = Path(__file__).parents[1] / "fixtures" / "flat_config" / "simple-classification.ckpt"
    main(["export", str(ckpt), str(tmp_path / "out")])
    data = card_data(tmp_path / "out")
    assert data["library_name"] == "seqssm" and data["pipeline_tag"] == "text-classification"
    assert {"state-space-model", "simple", "s4", "text-classification"} <= set(data["tags"])
    assert data["metrics"] == ["accuracy"]
    text = (tmp_path / "out" / "README.md").read_text()
    assert "- val_acc: 0.75" in text and "- lr: 0.003" in text


def test_a_card_with_a_dataset_holds_model_index_results(tmp_path):
    from huggingface_hub import ModelCard

    model = build("mamba-s6", vocab_size=16, d_model=8, n_layers=1, d_state=4)
    model.save_pretrained(tmp_path / "hf", format="hf", card={"task": "NextTokenPrediction", "datasets": ["species"],
                                                               "metrics": {"val_ppl": 3.5}})
    card = ModelCard.load(tmp_path / "hf" / "README.md")
    assert card.data.datasets == ["species"] and set(card.data.tags) >= {"mamba", "s6", "text-generation"}
    (result,) = card.data.eval_results
    assert (result.dataset_type, result.metric_type, result.metric_name, result.metric_value) == (
        "species", "perplexity", "val_ppl", 3.5)
    assert "saved by seqssm in the hf format" in card.text
    assert model_card(model).startswith("---\n") and "library_name: seqssm" in model_card(model)


def test_push_to_hub_uploads_a_folder_that_loads_back_by_id(hub, tmp_path):
    model = build("mamba-s6", vocab_size=16, d_model=8, n_layers=1, d_state=4).eval()
    url = model.push_to_hub("org/pushed", private=True)
    repo = hub.repos["org/pushed"]
    assert repo.private and url.endswith(repo.refs["main"])
    assert set(repo.commits[repo.refs["main"]]) == {"README.md", "config.json", "model.safetensors"}
    loaded = SequenceModel.from_pretrained("org/pushed").eval()
    ids = torch.randint(0, 16, (2, 5))
    with torch.no_grad():
        assert torch.equal(model(ids), loaded(ids))
    assert ("POST", "/api/repos/create") in hub.requests and ("POST", "/api/models/org/pushed/commit/main") in hub.requests


def test_export_push_to_hub_to_a_branch(hub, tmp_path, capsys):
    from pathlib import Path

    from seqssm.cli import main

    hub.repos["org/exp"] = Repo()
    hub.repos["org/exp"].commit({"README.md": b"first"})
    ckpt = Path(__file__).parents[1] / "fixtures" / "flat_config" / "simple-classification.ckpt"
    main(["export", str(ckpt), str(tmp_path / "out"), "--push-to-hub", "org/exp", "--revision", "v1"])
    assert "uploaded" in capsys.readouterr().out
    repo = hub.repos["org/exp"]
    assert set(repo.commits[repo.refs["v1"]]) == {"README.md", "config.json", "model.safetensors"}
    assert repo.commits[repo.refs["main"]] == {"README.md": b"first"}, "main is left alone"
    assert card_data(tmp_path / "out")["library_name"] == "seqssm"


def test_push_to_hub_failures_are_one_line(hub, tmp_path):
    model = build("mamba-s6", vocab_size=16, d_model=8, n_layers=1, d_state=4)
    hub.close()
    with pytest.raises(UploadError, match=r"org/x: the upload failed \(\w+: .*\); .* is intact"):
        model.push_to_hub("org/x")
