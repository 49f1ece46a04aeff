"""Run the RoPE grid of Ulbaek 2024 thesis, 14.3.2, on a recipe of rope/ (seqssm/recipes/rope/).

Grid: base {10, 10000} x trainable θ {no, yes} x normalisation {no, yes (the rotation between the
first and last token of a `max_length`-token sequence is π)}; for S6 also every non-empty subset of
the SSP inputs that see RoPE(x): {x, B, C, Δ}. Plus the baseline without RoPE.
Each point gets its own config (written next to its run) and is trained with `seqssm fit`.

    python scripts/rope_sweep.py rope/imdb/mamba-s6 --dry-run                 # list the points
    python scripts/rope_sweep.py rope/imdb/mamba-s6 --only 0 5                # run points 0 and 5
    python scripts/rope_sweep.py rope/imdb/mamba-s6 -- --trainer.devices 2   # extra fit arguments
"""

from __future__ import annotations

import argparse
import copy
import itertools
import subprocess
import sys
from pathlib import Path

import yaml

from seqssm.errors import RecipeError
from seqssm.recipes import find_recipe, read_recipe

S6_TARGETS = ("x", "B", "C", "delta")


def grid(selective: bool, max_length: int) -> list[tuple[str, dict | None]]:
    """(name, rope settings or None for the baseline) for every point of the 14.3.2 grid."""
    target_sets = [None]
    if selective:
        target_sets = [list(c) for r in range(1, len(S6_TARGETS) + 1) for c in itertools.combinations(S6_TARGETS, r)]
    points: list[tuple[str, dict | None]] = [("no-rope", None)]
    for base, trainable, normalize, targets in itertools.product((10.0, 10000.0), (False, True), (False, True),
                                                                 target_sets):
        rope = {"base": base, "trainable": trainable, "normalize_len": max_length if normalize else None}
        name = f"base{int(base)}-{'train' if trainable else 'fixed'}-{'norm' if normalize else 'raw'}"
        if targets is not None:
            rope["targets"] = targets
            name += "-" + "".join(t[0] for t in targets)  # x B C d
        points.append((name, rope))
    return points


def point_config(recipe: dict, name: str, rope: dict | None) -> dict:
    """The recipe with `rope` in its model overrides and its own run folder."""
    config = copy.deepcopy(recipe)
    config["model"]["init_args"]["model_overrides"]["rope"] = rope
    config["trainer"]["default_root_dir"] = str(Path(recipe["trainer"]["default_root_dir"]) / "sweep" / name)
    return config


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", help="a packaged recipe rope/<task>/<model>, or a recipe file")
    parser.add_argument("--only", type=int, nargs="*", help="indices of the points to run (default: all)")
    parser.add_argument("--dry-run", action="store_true", help="list the points and commands, run nothing")
    argv = sys.argv[1:] if argv is None else list(argv)
    # everything after `--` goes to `seqssm fit` unchanged (e.g. -- --trainer.devices 2)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: len(argv) - len(extra) - (1 if "--" in argv else 0)])

    try:
        recipe = read_recipe(find_recipe(args.recipe))  # its bases merged in: each point's config stands alone
    except RecipeError as e:
        parser.error(str(e))
    model = recipe["model"]["init_args"]["model"]
    max_length = recipe["data"]["init_args"].get("max_length") or 1024
    points = grid(selective=model.startswith("mamba-s6"), max_length=max_length)
    chosen = range(len(points)) if args.only is None else args.only
    for i in chosen:
        if not 0 <= i < len(points):
            parser.error(f"--only: index {i} out of range 0..{len(points) - 1}")
        name, rope = points[i]
        config = point_config(recipe, name, rope)
        out = Path(config["trainer"]["default_root_dir"])
        command = ["seqssm", "fit", "--config", str(out / "sweep_config.yaml"), *extra]
        print(f"[{i}] {name}: {' '.join(command)}", flush=True)
        if args.dry_run:
            continue
        out.mkdir(parents=True, exist_ok=True)
        (out / "sweep_config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        result = subprocess.run(command)
        if result.returncode:
            sys.exit(f"point {i} ({name}) failed with exit code {result.returncode}")


if __name__ == "__main__":
    main()
