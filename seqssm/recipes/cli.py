"""`seqssm recipes list [PREFIX]` names the packaged recipes; `seqssm recipes copy NAME DIR` copies one, with the
`_base_` files it needs, into DIR to edit and run (`seqssm fit --config DIR/NAME.yaml`).

    seqssm recipes list lra/imdb
    seqssm recipes copy lra/imdb/mamba-s4 my-recipes/
"""

from __future__ import annotations

import os
import sys

from seqssm.arguments import ArgumentParser
from seqssm.errors import RecipeError

from . import copy_recipe, find_recipe, recipe_names, recipe_summary, recipes_root


def parser() -> ArgumentParser:
    """The parser of `seqssm recipes`: the subcommands list and copy."""
    p = ArgumentParser(prog="seqssm recipes", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="action", required=True, metavar="{list,copy}")
    ls = sub.add_parser("list", help="the packaged recipes' names, each with the first line of its header comment")
    ls.add_argument("prefix", nargs="?", default="", help="only the names that begin so (e.g. lra/imdb)")
    ls.add_argument("--names", action="store_true", help="the names alone, one per line")
    cp = sub.add_parser("copy", help="copy a recipe and its _base_ files into a folder, to edit and run")
    cp.add_argument("name", help="a packaged recipe's name (seqssm recipes list) or a recipe file")
    cp.add_argument("dir", help="folder to copy into (made if missing); existing files are never overwritten")
    return p


def main(argv: list[str]) -> None:
    """`seqssm recipes list|copy ...`: print the recipes' names, or copy one out of the package."""
    ns = parser().parse_args(argv)
    if ns.action == "list":
        prefix = ns.prefix.removeprefix("recipes/").rstrip("/")
        names = [n for n in recipe_names() if not prefix or n == prefix or n.startswith(prefix + "/")]
        if not names:
            raise RecipeError(f"no packaged recipe begins with {ns.prefix!r}; seqssm recipes list names them all")
        width, root = max(map(len, names)), recipes_root()
        summaries = {n: "" if ns.names else recipe_summary(root / f"{n}.yaml") for n in names}
        try:
            print("\n".join(f"{n.ljust(width)}  {s}" if s else n for n, s in summaries.items()), flush=True)
        except BrokenPipeError:  # `seqssm recipes list | head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    source = find_recipe(ns.name)
    written = copy_recipe(source, ns.dir)
    print(f"copied {source} -> {', '.join(map(str, written))}")
    print(f"run it with: seqssm fit --config {written[0]}   (or seqssm rl / the study that reads it)")
