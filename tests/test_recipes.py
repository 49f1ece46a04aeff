"""Every recipe parses with the `seqssm` CLI and builds its DataModule, task and network."""

from pathlib import Path

import pytest

from seqssm.cli import make_cli
from seqssm.tasks import SequenceTask

REPO = Path(__file__).parents[1]
# LightningCLI recipes of the training studies; recipes/rl (seqssm rl) and recipes/finetune (an imported
# Hugging Face folder) are checked by their own tests.
STUDIES = ("lra", "smnist", "rope", "bidirectional")
RECIPES = ["recipes/quickstart.yaml"] + sorted(
    str(p.relative_to(REPO)) for study in STUDIES for p in (REPO / "recipes" / study).rglob("*.yaml"))
STUDY_MODELS = ["simple-s4", "simple-s4d", "mamba-s4", "mamba-s4d", "mamba-s6"]
LRA_TASKS = ["imdb", "listops", "aan", "cifar_num", "cifar_cat", "pathfinder_num", "pathfinder_cat", "pathx"]


def test_recipe_set_is_complete():
    expected = {f"recipes/lra/{t}/{m}.yaml" for t in LRA_TASKS for m in STUDY_MODELS}
    expected |= {f"recipes/bidirectional/{t}/{m}{v}.yaml" for t in ("imdb", "cifar_num")
                 for m in ("mamba-s4d", "mamba-s6") for v in ("", "-bi", "-placebo", "-sm")}
    expected |= {"recipes/quickstart.yaml"}
    assert expected <= set(RECIPES)
    assert any(r.startswith("recipes/smnist/") for r in RECIPES)
    assert any(r.startswith("recipes/rope/") for r in RECIPES)


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_builds(recipe, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setattr("sys.argv", ["seqssm"])
    cli = make_cli(["--config", recipe], run=False)
    task, data = cli.model, cli.datamodule
    assert isinstance(task, SequenceTask)
    # the dimensions reached the network through the CLI links
    assert task.hparams.vocab_size == data.vocab_size and task.hparams.d_input == data.d_input
    assert task.hparams.n_classes == data.n_classes
    assert task.model.head.out_features == data.n_classes
    assert sum(p.numel() for p in task.model.parameters()) > 0
