"""Recipes that say only what differs from their base.

A recipe's first key may name the file it builds on, relative to the recipe's folder:

    _base_: ../base.yaml        # recipes/lra/imdb/mamba-s4.yaml
    trainer:
      default_root_dir: runs/lra/imdb/mamba-s4
    model:
      init_args: {model: mamba-s4}

The recipe is its base (itself resolved the same way) with the recipe's entries merged in: dicts key by key,
lists and values replaced. `seqssm fit --config RECIPE` reads recipes so (`RECIPE_PARSER_MODE`, the YAML
loader of the `seqssm` CLI parsers), and `--print_config` shows the merged result. jsonargparse's own
`config: FILE` entry inside a config file replaces whole top-level groups instead of merging into them, so
it cannot express "this base, but another model and lr".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from seqssm.arguments import yaml_problem
from seqssm.errors import RecipeError

BASE_KEY = "_base_"
RECIPE_PARSER_MODE = "seqssm_recipe"


def merge(base: dict, override: dict) -> dict:
    """`base` with `override` merged in, dicts recursively (lists and values replace)."""
    out = dict(base)
    for key, value in override.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def resolve_bases(data: Any, folder: Path, chain: tuple[Path, ...] = ()) -> Any:
    """`data` (a loaded recipe from `folder`) merged onto its `_base_` file, recursively; other values unchanged."""
    if not isinstance(data, dict) or BASE_KEY not in data:
        return data
    data = dict(data)
    base = data.pop(BASE_KEY)
    if not isinstance(base, str):
        raise RecipeError(f"{BASE_KEY} must be the path of one recipe file, got {base!r}")
    path = (folder / base).resolve()
    where = " <- ".join(str(p) for p in chain) or str(folder)
    if path in chain:
        raise RecipeError(f"recipe bases loop: {path} is its own base ({where})")
    if not path.is_file():
        raise RecipeError(f"{BASE_KEY}: no recipe file {path} (named in {where}; relative to that recipe's folder)")
    loaded = read_yaml(path)
    if not isinstance(loaded, dict):
        raise RecipeError(f"{path}: a recipe base must be a mapping of settings, got {type(loaded).__name__}")
    return merge(resolve_bases(loaded, path.parent, (*chain, path)), data)


def read_yaml(path: Path) -> Any:
    """The content of YAML file `path`; a syntax error is a RecipeError naming the file, line and column."""
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise RecipeError(f"{path}: not valid YAML: {yaml_problem(e) or e}") from e


def read_recipe(path: str | Path) -> dict:
    """The settings of the recipe file at `path`, bases merged in (what `seqssm fit --config path` parses)."""
    path = Path(path).resolve()
    return resolve_bases(read_yaml(path), path.parent, (path,))


def load_recipe_yaml(text: str) -> Any:
    """jsonargparse loader: YAML, with a top-level `_base_` resolved against the folder of the config file being
    read (jsonargparse reads config files with that folder as working directory, as for relative paths in them)."""
    return resolve_bases(yaml.safe_load(text), Path.cwd())


def register_recipe_loader() -> None:
    """Make `RECIPE_PARSER_MODE` a jsonargparse parser mode (idempotent)."""
    from jsonargparse import set_loader

    set_loader(RECIPE_PARSER_MODE, load_recipe_yaml, exceptions=(yaml.YAMLError, RecipeError))
