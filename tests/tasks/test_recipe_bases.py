"""Recipes that name their `_base_`: merged as `seqssm fit` reads them, relative to the recipe; errors name files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from seqssm.cli import make_cli
from seqssm.recipes import RecipeError, merge, read_recipe

REPO = Path(__file__).parents[2]


@pytest.fixture(autouse=True)
def keep_torch_threads():
    """Recipes may set `torch_threads`, a process-wide setting: put it back for the tests that follow."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_merge_goes_into_dicts_and_replaces_lists_and_values():
    base = {"a": {"x": 1, "y": [1, 2], "z": {"deep": 1}}, "b": 2}
    assert merge(base, {"a": {"y": [3], "z": {"other": 2}}, "c": None}) == {
        "a": {"x": 1, "y": [3], "z": {"deep": 1, "other": 2}}, "b": 2, "c": None}
    assert base == {"a": {"x": 1, "y": [1, 2], "z": {"deep": 1}}, "b": 2}  # inputs are left as they were


def test_bases_chain_relative_to_each_recipe(tmp_path, monkeypatch):
    write(tmp_path / "suite" / "base.yaml", "trainer: {max_epochs: 3, max_steps: 10}\nmodel: {init_args: {lr: 0.1}}\n")
    write(tmp_path / "suite" / "task" / "base.yaml", "_base_: ../base.yaml\ntrainer: {max_epochs: 5}\n")
    recipe = write(tmp_path / "suite" / "task" / "run.yaml", "_base_: base.yaml\nmodel: {init_args: {lr: 0.2}}\n")
    monkeypatch.chdir(tmp_path)  # not the recipe's folder: bases resolve against the folder of the file naming them
    assert read_recipe(recipe) == {"trainer": {"max_epochs": 5, "max_steps": 10}, "model": {"init_args": {"lr": 0.2}}}


def test_base_errors_name_the_files(tmp_path):
    missing = write(tmp_path / "a.yaml", "_base_: nowhere.yaml\n")
    with pytest.raises(RecipeError, match=r"no recipe file .*nowhere.yaml \(named in .*a.yaml"):
        read_recipe(missing)
    write(tmp_path / "x.yaml", "_base_: y.yaml\n")
    loop = write(tmp_path / "y.yaml", "_base_: x.yaml\n")
    with pytest.raises(RecipeError, match="recipe bases loop: .*y.yaml is its own base"):
        read_recipe(loop)
    write(tmp_path / "list.yaml", "- 1\n")
    with pytest.raises(RecipeError, match="list.yaml: a recipe base must be a mapping"):
        read_recipe(write(tmp_path / "b.yaml", "_base_: list.yaml\n"))
    with pytest.raises(RecipeError, match="_base_ must be the path of one recipe file"):
        read_recipe(write(tmp_path / "c.yaml", "_base_: [x.yaml, y.yaml]\n"))


def print_config(args: list[str], capsys) -> str:
    with pytest.raises(SystemExit):
        make_cli(["fit", *args, "--print_config"])
    return capsys.readouterr().out


@pytest.mark.parametrize("recipe", ["seqssm/recipes/lra/pathx/simple-s4.yaml",
                                    "seqssm/recipes/species/pretrain_mlm_bi.yaml"])
def test_the_cli_reads_a_recipe_as_its_merged_settings(recipe, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["seqssm"])
    monkeypatch.chdir(tmp_path)  # jsonargparse resolves the bases, from any working directory
    flat = write(tmp_path / "flat.yaml", yaml.safe_dump(read_recipe(REPO / recipe), sort_keys=False))
    assert "_base_" not in flat.read_text()
    assert print_config(["--config", str(REPO / recipe)], capsys) == print_config(["--config", str(flat)], capsys)


def test_a_recipe_on_a_base_trains_what_it_says(tmp_path, monkeypatch):
    base = write(tmp_path / "suite" / "base.yaml", f"_base_: {REPO / 'seqssm' / 'recipes' / 'quickstart.yaml'}\n"
                                                   "model: {init_args: {model_overrides: {n_layers: 1}}}\n")
    recipe = write(tmp_path / "suite" / "run" / "mamba-s4d.yaml",
                   f"_base_: ../{base.name}\nmodel: {{init_args: {{model: mamba-s4d, lr: 0.02}}}}\n")
    monkeypatch.chdir(REPO)
    monkeypatch.setattr("sys.argv", ["seqssm"])
    task = make_cli(["--config", str(recipe)], run=False).model
    assert task.hparams.model == "mamba-s4d" and task.hparams.lr == 0.02
    assert task.hparams.model_overrides == {"d_model": 64, "n_layers": 1, "dropout": 0.0}  # merged key by key
    assert task.model.config.n_layers == 1 and task.model.config.block.ssp.layer == "s4d"
