"""Every recipe parses with the `seqssm` CLI and builds its DataModule, task and network."""

from pathlib import Path

import pytest
import torch

from seqssm.cli import make_cli
from seqssm.data import CharVocabulary, IMDBDataModule
from seqssm.tasks import SequenceTask
from seqssm.recipes import read_recipe

REPO = Path(__file__).parents[2]
PACKAGED = REPO / "seqssm" / "recipes"
# LightningCLI recipes of the training studies; seqssm/recipes/rl (seqssm rl) and seqssm/recipes/finetune (an imported
# Hugging Face folder) are checked by their own tests.
STUDIES = ("lra", "smnist", "rope", "bidirectional")
RECIPES = ["seqssm/recipes/quickstart.yaml"] + sorted(
    str(p.relative_to(REPO)) for study in STUDIES for p in (REPO / "seqssm" / "recipes" / study).rglob("*.yaml")
    if p.name != "base.yaml")
STUDY_MODELS = ["simple-s4", "simple-s4d", "mamba-s4", "mamba-s4d", "mamba-s6"]
LRA_TASKS = ["imdb", "listops", "aan", "cifar_num", "cifar_cat", "pathfinder_num", "pathfinder_cat", "pathx"]


def test_recipe_set_is_complete():
    expected = {f"seqssm/recipes/lra/{t}/{m}.yaml" for t in LRA_TASKS for m in STUDY_MODELS}
    expected |= {f"seqssm/recipes/bidirectional/{t}/{m}{v}.yaml" for t in ("imdb", "cifar_num")
                 for m in ("mamba-s4d", "mamba-s6") for v in ("", "-bi", "-placebo", "-sm")}
    expected |= {f"seqssm/recipes/lra/{t}/mamba2-ssd.yaml" for t in LRA_TASKS}
    expected |= {f"seqssm/recipes/smnist/{t}/mamba2-ssd.yaml" for t in ("sequential", "permuted")}
    expected |= {"seqssm/recipes/quickstart.yaml"}
    assert expected <= set(RECIPES)
    assert any(r.startswith("seqssm/recipes/smnist/") for r in RECIPES)
    assert {"seqssm/recipes/smnist/cpu/simple-s4d.yaml",
            "seqssm/recipes/smnist/cpu/simple-s4d-permuted.yaml"} <= set(RECIPES)
    # issue 28: a CPU-sized variant per suite, measured in recipes/README.md
    assert {f"seqssm/recipes/lra/cpu/{t}-simple-s4d.yaml"
            for t in ("imdb", "listops", "cifar_num", "pathfinder")} <= set(RECIPES)
    assert (REPO / "seqssm/recipes/species/cpu/finetune.yaml").is_file()
    assert any(r.startswith("seqssm/recipes/rope/") for r in RECIPES)


@pytest.fixture(autouse=True)
def keep_torch_threads():
    """Recipes may set `torch_threads`, a process-wide setting: put it back for the tests that follow."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


IMDB_TRAIN = [("good " * 8, 1), ("bad", 0)]  # "o" 16 times: the one character at S4's min_freq 15


@pytest.fixture(scope="module")
def imdb_dir(tmp_path_factory):
    """A few IMDB reviews: Ulbaek 2024's IMDB recipes build S4's character vocabulary from the training split."""
    folder = tmp_path_factory.mktemp("imdb")
    (folder / "train.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in IMDB_TRAIN))
    (folder / "test.csv").write_text("text,label\nfine,1\n")
    return folder


def recipe_args(recipe: str, imdb_dir: Path) -> list[str]:
    """`seqssm fit` arguments that build `recipe` here: IMDB recipes read the tiny reviews above."""
    config = read_recipe(REPO / recipe)
    if config["data"]["class_path"].endswith("IMDBDataModule"):
        return ["--config", recipe, "--data.init_args.data_dir", str(imdb_dir)]
    return ["--config", recipe]


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_builds(recipe, monkeypatch, imdb_dir):
    monkeypatch.chdir(REPO)
    monkeypatch.setattr("sys.argv", ["seqssm"])
    cli = make_cli(recipe_args(recipe, imdb_dir), run=False)
    task, data = cli.model, cli.datamodule
    assert isinstance(task, SequenceTask)
    # the dimensions reached the network through the CLI links
    assert task.hparams.vocab_size == data.vocab_size and task.hparams.d_input == data.d_input
    assert task.hparams.n_classes == data.n_classes
    assert task.model.head.out_features == data.n_classes
    assert sum(p.numel() for p in task.model.parameters()) > 0
    if recipe == "seqssm/recipes/quickstart.yaml":
        return
    # Ulbaek 2024's settings (recipes/README.md): 12.2.4 initialisation, 12.1.4 dropout place, S4's IMDB characters;
    # sMNIST is no thesis task: S4's initialisation (S4D-Lin for S4D) and S4's example.py optimiser settings
    block = task.model.config.block
    hp = task.hparams
    if recipe.startswith("seqssm/recipes/smnist/"):
        assert block.ssp.init == "default" and block.dropout == 0.1
        assert block.ssp.layer != "s4d" or block.ssp.layer_kwargs == {"init": "lin"}
        # S4's code trains C at the full lr (it tags A, B, Δ only); S6's and the SSD's C come from a projection
        assert block.ssp.plain_params == ([] if block.ssp.layer in ("s6", "ssd") else ["C"])
        assert (hp.lr, hp.weight_decay, hp.min_lr_ratio, hp.warmup_steps) == (0.01, 0.0, 0.0, 0)
        assert data.batch_size == 64 and data.val_fraction == 0.1
        assert (data.permutation is not None) == ("permuted" in recipe)
    else:  # the thesis's initialisation (12.2.4) is defined for S4, S4D and S6; the SSD keeps mamba_ssm's
        assert block.ssp.init == ("default" if block.ssp.layer == "ssd" else "thesis")
    assert block.kind == "simple" or block.dropout_position == "ssp_input"
    if isinstance(data, IMDBDataModule):
        expected = CharVocabulary.build([t for t, _ in IMDB_TRAIN], 15, data.max_length)
        assert data.tokens == "chars" and data.vocab_size == expected.vocab_size == 3 + 1


def test_rope_sweep_grid_builds(tmp_path, monkeypatch, imdb_dir, load_script):
    import yaml

    sweep = load_script("rope_sweep")
    # Ulbaek 2024 thesis, 14.3.2: base x trainable x normalised (8), times the 15 non-empty S6 input subsets;
    # plus no RoPE
    assert len(sweep.grid(selective=False, max_length=1024)) == 1 + 8
    points = sweep.grid(selective=True, max_length=1024)
    assert len(points) == 1 + 8 * 15 and len({name for name, _ in points}) == len(points)

    recipe = read_recipe(REPO / "seqssm/recipes/rope/imdb/mamba-s6.yaml")
    name, rope = next(p for p in points if p[1] and p[1]["trainable"] and p[1]["normalize_len"] and p[1]["targets"] == ["B"])
    path = tmp_path / "point.yaml"
    config = sweep.point_config(recipe, name, rope)
    config["data"]["init_args"]["data_dir"] = str(imdb_dir)
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setattr("sys.argv", ["seqssm"])
    cli = make_cli(["--config", str(path)], run=False)
    assert cli.model.hparams.model_overrides["rope"] == rope
    assert any(type(m).__name__ == "RotarySSP" and m.targets == ("B",) and m.rope.trainable
               for m in cli.model.model.modules())


def readme_recipe_globs(heading: str) -> list[str]:
    """The backquoted recipe patterns in the first column of the table under `heading` in recipes/README.md."""
    import re

    text = (REPO / "seqssm" / "recipes" / "README.md").read_text()
    if heading not in text:
        raise AssertionError(f"seqssm/recipes/README.md has no section {heading!r}")
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    first_cells = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return [g for cell in first_cells for g in re.findall(r"`([^`]+)`", cell)]


@pytest.mark.parametrize("heading", ["## Where each setting comes from", "## Targets"])
def test_readme_gives_every_recipe_a_source_and_a_target(heading):
    """Issue 28: every training recipe has its settings' source and its full-scale target in recipes/README.md."""
    from fnmatch import fnmatch

    globs = readme_recipe_globs(heading)
    assert globs
    every = [r.removeprefix("seqssm/recipes/") for r in RECIPES]
    every += [str(p.relative_to(PACKAGED)) for p in (PACKAGED / "species").glob("*.yaml")
              if p.name != "base.yaml"]
    every += [str(p.relative_to(PACKAGED)) for p in (PACKAGED / "species" / "cpu").glob("*.yaml")]
    if heading.startswith("## Targets"):  # CPU variants are measured in their own table
        every = [r for r in every if "/cpu/" not in r]
    missing = [r for r in every if not any(fnmatch(r, g) for g in globs)]
    assert not missing, f"seqssm/recipes/README.md ({heading}) names no source / target for {missing}"


@pytest.mark.parametrize("recipe", [r for r in RECIPES if r != "seqssm/recipes/quickstart.yaml"])
def test_recipe_headers_state_a_target(recipe):
    """Each task's base recipe says what its source reports at full scale (`expected`), or that none is published."""
    base = REPO / recipe
    while base.name != "base.yaml":
        import yaml

        base = (base.parent / yaml.safe_load(base.read_text())["_base_"]).resolve()
    header = "".join(line for line in base.read_text().splitlines(True) if line.startswith("#"))
    if "smnist/cpu/" in recipe or base.parent.parent.name in ("rope", "bidirectional"):
        return  # the CPU variants point at the measured table; rope / bidirectional report figures only
    assert "expected" in header, f"{base.relative_to(REPO)}: no `expected` accuracy in its header"
