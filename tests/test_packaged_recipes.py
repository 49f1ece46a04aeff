"""The recipes ship inside the package (seqssm/recipes/), `--config` takes a packaged recipe's name, and `seqssm
recipes list / copy` show and copy them; a built wheel holds them and works installed, outside the source tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from seqssm.cli import main
from seqssm.recipes import (RecipeError, config_args, copy_recipe, find_recipe, read_recipe, recipe_names,
                            recipes_root)

REPO = Path(__file__).resolve().parents[1]


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `seqssm ARGV` through the package's entry point."""
    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_recipes_are_found_through_the_package_not_the_checkout():
    assert recipes_root() == REPO / "seqssm" / "recipes"  # the editable install's package folder
    assert not (REPO / "recipes").exists()  # one copy of the recipes, the packaged one
    names = recipe_names()
    assert {"quickstart", "base", "lra/imdb/mamba-s4", "rl/repeat_first_easy/s5",
            "reproduce/repeat-previous/claim"} <= set(names)
    assert len(names) == len(list(recipes_root().rglob("*.yaml"))) and names == sorted(names)


def test_study_and_claims_read_the_packaged_recipes():
    from seqssm.study.reproduce.claim import RECIPES as CLAIMS
    from seqssm.study.species import RECIPES as SPECIES

    assert SPECIES == recipes_root() / "species" and (SPECIES / "finetune.yaml").is_file()
    assert CLAIMS == recipes_root() / "reproduce" and (CLAIMS / "repeat-previous" / "claim.yaml").is_file()


@pytest.mark.parametrize("value", ["lra/imdb/mamba-s4", "lra/imdb/mamba-s4.yaml", "recipes/lra/imdb/mamba-s4.yaml",
                                   "./recipes/lra/imdb/mamba-s4"])
def test_a_name_finds_the_packaged_recipe(value, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert find_recipe(value) == recipes_root() / "lra" / "imdb" / "mamba-s4.yaml"


def test_a_path_that_exists_wins_over_the_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quickstart").write_text("trainer: {max_steps: 1}\n")
    (tmp_path / "lra" / "imdb").mkdir(parents=True)
    (tmp_path / "lra" / "imdb" / "mamba-s4.yaml").write_text("trainer: {max_steps: 2}\n")
    assert find_recipe("quickstart") == Path("quickstart")
    assert find_recipe("lra/imdb/mamba-s4.yaml") == Path("lra/imdb/mamba-s4.yaml")
    assert find_recipe("lra/imdb/mamba-s4") == recipes_root() / "lra" / "imdb" / "mamba-s4.yaml"  # no such file


def test_config_args_rewrites_only_config_values(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "mine.yaml"
    mine.write_text("{}\n")
    argv = ["--config", "quickstart", "--config=lra/imdb/mamba-s4", "-c", str(mine), "--config", "{seed_everything: 3}",
            "--model.init_args.model", "quickstart", "--trainer.default_root_dir", "base"]
    assert config_args(argv) == [
        "--config", str(recipes_root() / "quickstart.yaml"),
        f"--config={recipes_root() / 'lra' / 'imdb' / 'mamba-s4.yaml'}", "-c", str(mine),
        "--config", "{seed_everything: 3}", "--model.init_args.model", "quickstart", "--trainer.default_root_dir", "base"]


@pytest.mark.parametrize("value, closest", [
    ("quikstart", "did you mean quickstart?"),
    ("lra/imdb/mamba-s5", "did you mean lra/imdb/mamba-s6, lra/imdb/mamba-s4"),
    ("lra/imbd/mamba-s4.yaml", "lra/imdb/mamba-s4"),
    ("recipes/smnist/cpu/simple-s4e.yaml", "smnist/cpu/simple-s4d"),
])
def test_a_bad_name_is_one_error_naming_the_closest_recipes(value, closest, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RecipeError, match=f"no recipe file or packaged recipe '{value}'; ") as e:
        find_recipe(value)
    assert closest in str(e.value) and "seqssm recipes list" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("value", ["../base", "/nowhere/base.yaml", "nothing-like-this-at-all-xyz"])
def test_names_outside_the_recipes_are_refused(value, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RecipeError, match="no recipe file or packaged recipe"):
        find_recipe(value)


def test_fit_takes_a_recipe_name_from_any_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["seqssm"])
    code, by_name, _ = run(["fit", "--config", "lra/imdb/mamba-s4", "--print_config"], capsys)
    assert code == 0 and "default_root_dir: runs/lra/imdb/mamba-s4" in by_name
    path = str(recipes_root() / "lra" / "imdb" / "mamba-s4.yaml")
    code, by_path, _ = run(["fit", "--config", path, "--print_config"], capsys)
    assert code == 0 and by_path == by_name
    code, old, _ = run(["fit", "--config", "recipes/lra/imdb/mamba-s4.yaml", "--print_config"], capsys)
    assert code == 0 and old == by_name  # a source checkout's old command line


def test_fit_with_a_bad_name_is_one_line_with_exit_code_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["fit", "--config", "lra/imdb/mamba-s5"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("seqssm fit: error: --config: no recipe file or packaged recipe 'lra/imdb/mamba-s5'; did you mean ")


def test_rl_takes_a_recipe_name(tmp_path, monkeypatch):
    pytest.importorskip("gymnasium")
    from seqssm.rl.cli import algorithm_of, rl_parser

    monkeypatch.chdir(tmp_path)
    argv = config_args(["--config", "rl/sac/best_arm/kalman"])
    assert algorithm_of(argv) == "sac"
    assert rl_parser("sac").parse_args(argv).env.name == read_recipe(find_recipe("rl/sac/best_arm/kalman"))["env"]["name"]


def test_recipes_list(capsys):
    code, out, _ = run(["recipes", "list"], capsys)
    lines = out.splitlines()
    assert code == 0 and [line.split()[0] for line in lines] == recipe_names()
    assert any(line.startswith("quickstart ") and "Quickstart" in line for line in lines)  # its header's first line
    code, out, _ = run(["recipes", "list", "--names", "lra/imdb"], capsys)
    assert code == 0 and out.split() == [n for n in recipe_names() if n.startswith("lra/imdb/")]
    code, _, err = run(["recipes", "list", "lra/imbd"], capsys)
    assert code == 2 and "no packaged recipe begins with 'lra/imbd'" in err


def test_recipes_copy_writes_a_standalone_recipe(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["seqssm"])
    code, out, _ = run(["recipes", "copy", "lra/imdb/mamba-s4", "mine"], capsys)
    assert code == 0 and "seqssm fit --config mine/mamba-s4.yaml" in out
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["base.yaml", "lra-imdb-base.yaml", "mamba-s4.yaml"]
    copy = (tmp_path / "mine" / "mamba-s4.yaml").read_text()
    assert "_base_: lra-imdb-base.yaml" in copy and copy.startswith("# LRA imdb, mamba-s4")  # the header kept
    assert "_base_: base.yaml" in (tmp_path / "mine" / "lra-imdb-base.yaml").read_text()
    assert read_recipe("mine/mamba-s4.yaml") == read_recipe(find_recipe("lra/imdb/mamba-s4"))
    code, mine, _ = run(["fit", "--config", "mine/mamba-s4.yaml", "--print_config"], capsys)
    code2, packaged, _ = run(["fit", "--config", "lra/imdb/mamba-s4", "--print_config"], capsys)
    assert code == code2 == 0 and mine == packaged


def test_recipes_copy_of_a_base_named_like_its_base(tmp_path):
    written = copy_recipe("lra/imdb/base", tmp_path)
    assert [p.name for p in written] == ["lra-imdb-base.yaml", "base.yaml"]
    assert read_recipe(written[0]) == read_recipe(find_recipe("lra/imdb/base"))
    alone = copy_recipe("base", tmp_path / "alone")
    assert [p.name for p in alone] == ["base.yaml"]


def test_recipes_copy_never_overwrites(tmp_path, capsys):
    (tmp_path / "base.yaml").write_text("mine: 1\n")
    code, _, err = run(["recipes", "copy", "lra/imdb/mamba-s4", str(tmp_path)], capsys)
    assert code == 2 and f"{tmp_path / 'base.yaml'} already exists" in err and "never overwrites" in err
    assert (tmp_path / "base.yaml").read_text() == "mine: 1\n" and not (tmp_path / "mamba-s4.yaml").exists()
    code, _, err = run(["recipes", "copy", "lra/imdb/mamba-s44", str(tmp_path / "new")], capsys)
    assert code == 2 and "did you mean lra/imdb/mamba-s4" in err and not (tmp_path / "new").exists()
    (tmp_path / "file").write_text("")
    code, _, err = run(["recipes", "copy", "quickstart", str(tmp_path / "file")], capsys)
    assert code == 2 and "is a file, not a folder" in err


def test_the_wheel_holds_the_recipes_and_works_installed(tmp_path):
    """Build the wheel, install it (not editable) into a fresh venv that sees this Python's packages, and run the
    installed `seqssm` from a folder with no recipes: `reproduce list` and `fit --config NAME --print_config`."""
    src = tmp_path / "src"  # a copy of what the wheel is built from, so no build/ of the checkout leaks in
    shutil.copytree(REPO / "seqssm", src / "seqssm", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels)], check=True, cwd=tmp_path)
    wheel = next(wheels.glob("seqssm-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        held = {n.removeprefix("seqssm/recipes/") for n in z.namelist() if n.startswith("seqssm/recipes/")}
    assert {f"{n}.yaml" for n in recipe_names()} <= held and "README.md" in held and "species/README.md" in held
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    # the editable install of this checkout is on the system site-packages too: the venv's copy must shadow it
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--force-reinstall", "-q",
                    str(wheel)],
                   check=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    seqssm = str(venv / "bin" / "seqssm")
    where = subprocess.run([str(python), "-c", "import seqssm.recipes as r; print(r.recipes_root())"], cwd=elsewhere,
                           env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(venv)) and "site-packages" in where
    listed = subprocess.run([seqssm, "reproduce", "list"], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    assert "repeat-previous" in listed.stdout
    fit = subprocess.run([seqssm, "fit", "--config", "quickstart", "--print_config"], cwd=elsewhere, env=env,
                         capture_output=True, text=True)
    assert fit.returncode == 0, fit.stderr
    assert "default_root_dir: runs/quickstart" in fit.stdout and "SpeciesDataModule" in fit.stdout
