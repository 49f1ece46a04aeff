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

The recipes ship inside this package (`seqssm/recipes/**.yaml`, found with `importlib.resources`, so they install
with `pip install seqssm`), and `--config` takes a recipe's name as well as a path: a path that exists wins;
otherwise the value, without `.yaml` and without a leading `recipes/`, names a packaged recipe (`find_recipe`).
`seqssm recipes list` names them, `seqssm recipes copy NAME DIR` copies one with its bases (`copy_recipe`).
"""

from __future__ import annotations

import difflib
import re
from importlib.resources import files
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from seqssm.arguments import yaml_problem
from seqssm.errors import RecipeError

BASE_KEY = "_base_"
RECIPE_PARSER_MODE = "seqssm_recipe"
SUFFIX = ".yaml"
# the folder a source checkout's commands named recipes by (`--config recipes/quickstart.yaml`)
SOURCE_PREFIX = "recipes/"
CONFIG_OPTIONS = ("--config", "-c")
_BASE_LINE = re.compile(rf"^{BASE_KEY}:[ \t]*(?P<value>.*?)[ \t]*(?P<comment>#.*)?$", re.MULTILINE)


def differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two nested configs, as "key: old -> new"."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new), key=str)
                for d in differences(old.get(k), new.get(k), f"{prefix}{k}.")]
    return [] if old == new else [f"{prefix.rstrip('.')}: {old!r} -> {new!r}"]


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


# -- the packaged recipes -----------------------------------------------------------------------------------------


def recipes_root() -> Path:
    """The folder of the packaged recipes (this package's folder, wherever seqssm is installed)."""
    root = files(__name__)
    if not isinstance(root, Path):
        raise RecipeError(f"seqssm's recipes are not plain files here ({root}); install seqssm unzipped "
                          "(pip install seqssm)")
    return root


def recipe_names() -> list[str]:
    """The names of every packaged recipe, sorted: paths under `recipes_root()` without `.yaml`."""
    root = recipes_root()
    return sorted(p.relative_to(root).with_suffix("").as_posix() for p in root.rglob(f"*{SUFFIX}") if p.is_file())


def recipe_name(value: str) -> str:
    """`value` as a packaged recipe's name: `/` separators, without a leading `recipes/` or `./` and `.yaml`."""
    name = str(value).replace("\\", "/").strip()
    while name.startswith("./"):
        name = name[2:]
    return name.removeprefix(SOURCE_PREFIX).removesuffix(SUFFIX)


def find_recipe(value: str | Path) -> Path:
    """The recipe file `value` names: an existing path, else a packaged recipe's name (`recipe_name`); a
    RecipeError naming the closest packaged recipes when it is neither."""
    if Path(value).is_file():
        return Path(value)
    name = recipe_name(str(value))
    parts = PurePosixPath(name).parts
    if name and not PurePosixPath(name).is_absolute() and ".." not in parts:
        path = recipes_root().joinpath(*parts).with_suffix(SUFFIX)
        if path.is_file():
            return path
    raise RecipeError(f"no recipe file or packaged recipe {str(value)!r}; {closest_recipes(name)}")


def closest_recipes(name: str, n: int = 3) -> str:
    """A hint naming the packaged recipes most like `name`, and how to list them all."""
    names = recipe_names()
    close = difflib.get_close_matches(name, names, n=n, cutoff=0.5)
    close = close or [c for c in names if c.startswith(name.rstrip("/") + "/")][:n]
    if not close:  # the right file name in the wrong folder
        last = set(difflib.get_close_matches(PurePosixPath(name).name, {PurePosixPath(c).name for c in names}))
        close = [c for c in names if PurePosixPath(c).name in last][:n]
    listing = "seqssm recipes list names them all"
    return f"did you mean {', '.join(close)}? ({listing})" if close else listing


def config_args(argv: list[str]) -> list[str]:
    """`argv` with each `--config` / `-c` value that is not an existing path replaced by the packaged recipe it
    names (`find_recipe`); a value that is YAML text (jsonargparse takes config strings) stays as it is."""
    out, i = list(argv), 0
    while i < len(out):
        arg = out[i]
        option, eq, value = arg.partition("=")
        if option in CONFIG_OPTIONS and eq:
            out[i] = f"{option}={config_value(value)}"
        elif arg in CONFIG_OPTIONS and i + 1 < len(out):
            out[i + 1] = config_value(out[i + 1])
            i += 1
        elif arg == "--":
            break
        i += 1
    return out


def config_value(value: str) -> str:
    """One `--config` value: itself when it is an existing path or YAML text, else the packaged recipe's path."""
    if Path(value).exists() or any(c in value for c in ":{}[]\n") and not re.match(r"^[A-Za-z]:[\\/]", value):
        return value
    try:
        return str(find_recipe(value))
    except RecipeError as e:
        raise RecipeError(f"--config: {e}") from None


def recipe_summary(path: Path) -> str:
    """The first line of the comment that opens recipe file `path` (without `#`), or "" when it has none."""
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
        if line.strip():
            return ""
    return ""


def base_chain(path: Path) -> list[Path]:
    """Recipe file `path` and the files its `_base_` entries name, in order (the recipe first)."""
    chain = [path.resolve()]
    while True:
        data = read_yaml(chain[-1])
        base = data.get(BASE_KEY) if isinstance(data, dict) else None
        if base is None:
            return chain
        if not isinstance(base, str):
            raise RecipeError(f"{chain[-1]}: {BASE_KEY} must be the path of one recipe file, got {base!r}")
        nxt = (chain[-1].parent / base).resolve()
        if nxt in chain:
            raise RecipeError(f"recipe bases loop: {nxt} is its own base ({' <- '.join(map(str, chain))})")
        if not nxt.is_file():
            raise RecipeError(f"{BASE_KEY}: no recipe file {nxt} (named in {chain[-1]}; relative to that recipe's "
                              "folder)")
        chain.append(nxt)


def copy_recipe(value: str | Path, dest: str | Path) -> list[Path]:
    """Copy recipe `value` (a name or path) and every `_base_` file it needs into folder `dest`, each base's
    `_base_` rewritten to its copy, so the copy runs on its own; refuses to overwrite a file. The files written,
    the recipe first."""
    chain = base_chain(find_recipe(value))
    root = recipes_root().resolve()
    dest = Path(dest)
    names = [flat_name(p, root) for p in chain]
    if chain[0].name not in names[1:]:
        names[0] = chain[0].name  # the recipe itself keeps its own file name when no base takes it
    targets = [dest / n for n in names]
    existing = [str(t) for t in targets if t.exists() or t.is_symlink()]
    if existing:
        raise RecipeError(f"{', '.join(existing)} already exist{'s' if len(existing) == 1 else ''}; copy into "
                          "another folder or remove them first (copy never overwrites)")
    if dest.exists() and not dest.is_dir():
        raise RecipeError(f"{dest} is a file, not a folder: give a folder to copy the recipe into")
    dest.mkdir(parents=True, exist_ok=True)
    for i, (source, target) in enumerate(zip(chain, targets)):
        text = source.read_text()
        if i + 1 < len(chain):
            text = rewrite_base(text, names[i + 1], source)
        with open(target, "x") as f:  # "x": a file made meanwhile is not overwritten either
            f.write(text)
    return targets


def flat_name(path: Path, root: Path) -> str:
    """The file name of recipe `path` in a copy: its path under `root` with `-` for `/` (the file name, outside)."""
    try:
        return "-".join(path.relative_to(root).parts)
    except ValueError:
        return path.name


def rewrite_base(text: str, base: str, path: Path) -> str:
    """Recipe text `text` (of `path`) with its top-level `_base_:` value replaced by `base`, comments kept."""
    new, count = _BASE_LINE.subn(lambda m: f"{BASE_KEY}: {base}" + (f"  {m['comment']}" if m["comment"] else ""),
                                 text, count=1)
    if count != 1:
        raise RecipeError(f"{path}: its {BASE_KEY} is not one `{BASE_KEY}: FILE` line at the top level, so the "
                          "copy cannot point it at the copied base; copy the files by hand")
    return new
