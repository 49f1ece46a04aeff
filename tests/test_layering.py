"""Dependencies point one way (docs/design.md): ops, data <- layers <- blocks <- models <- tasks | rl <- study <- cli.

Every module of the package is parsed with `ast`; each import in it (at the top, inside a function or
behind a condition alike) is resolved to an absolute module name and checked against the layering.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import seqssm

PACKAGE_DIR = Path(seqssm.__file__).parent

# Rank of each part of the package: a module may import its own part and parts of lower rank only.
# Parts sharing a rank are peers that must not import each other (ops / data, tasks / rl).
# `testing` (the layer-contract checks the tests share) reads layer states, so it sits beside blocks.
RANKS = {"ops": 0, "data": 0, "layers": 1, "blocks": 2, "testing": 2, "models": 3, "tasks": 4, "rl": 4, "study": 5,
         "cli": 6}
# Top-level modules that every part may use; they import no part of the package themselves.
BASE = {"seqssm", "seqssm.arguments", "seqssm.errors", "seqssm.files", "seqssm.optim", "seqssm.recipes"}
LIGHTNING = ("lightning", "pytorch_lightning", "lightning_fabric")
NO_LIGHTNING = ("ops", "layers", "blocks", "models")


def module_name(path: Path) -> str:
    """seqssm/models/hub.py -> "seqssm.models.hub"; a package's __init__.py -> the package."""
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_package_module(name: str) -> bool:
    """Whether `name` ("seqssm.tasks.base") is a module or package of seqssm."""
    if not name.startswith("seqssm."):
        return False
    path = PACKAGE_DIR.joinpath(*name.split(".")[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported_modules(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import anywhere in `tree`; `from a import b` yields a.b when that is
    a module of the package (`from seqssm import tasks`), else a."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            submodules = [f"{source}.{alias.name}" for alias in node.names if is_package_module(f"{source}.{alias.name}")]
            found += [(node.lineno, name) for name in submodules or [source]]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return found


def part(module: str) -> str | None:
    """The part of the package ("models", "cli", ...) a module belongs to; None for the base modules."""
    return None if ".".join(module.split(".")[:2]) in BASE else module.split(".")[1]


def violation(importer: str, imported: str) -> str | None:
    """Why `importer` may not import `imported`, or None if it may."""
    own = part(importer)
    if imported.split(".")[0] in LIGHTNING:
        return "Lightning" if own in NO_LIGHTNING else None
    if imported.split(".")[0] != "seqssm" or imported == "seqssm":
        return None
    target = part(imported)
    if target is None or target not in RANKS or target == own:
        return None
    if own is None:
        return f"a base module imports the part {target!r}"
    if RANKS[target] > RANKS[own]:
        return f"{own} (rank {RANKS[own]}) imports {target} (rank {RANKS[target]})"
    if RANKS[target] == RANKS[own]:
        return f"{own} and {target} are peers and do not import each other"
    return None


def all_violations() -> list[str]:
    """One line per upward import in the package: `module:line imports module (why)`."""
    out = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        module = module_name(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, imported in imported_modules(tree, module, path.name == "__init__.py"):
            why = violation(module, imported)
            if why:
                out.append(f"{module}:{line} imports {imported} ({why})")
    return sorted(set(out))


def test_every_part_of_the_package_is_ranked():
    parts = {p.name.removesuffix(".py") for p in PACKAGE_DIR.iterdir()
             if (p.is_dir() and (p / "__init__.py").is_file()) or p.suffix == ".py"}
    parts -= {"__init__"}
    unranked = sorted(parts - RANKS.keys() - {m.split(".")[1] for m in BASE if "." in m})
    assert not unranked, f"place {unranked} in RANKS (or BASE) of this test and in docs/design.md's layering"


def test_no_upward_imports():
    violations = all_violations()
    assert not violations, "imports against the layering of docs/design.md:\n" + "\n".join(violations)


@pytest.mark.parametrize("importer, source, line, expected", [
    ("seqssm.models.surgery", "def f():\n    from seqssm.tasks.export import x\n", 2, "seqssm.tasks.export"),
    ("seqssm.models.interop.cli", "from ...tasks import y\n", 1, "seqssm.tasks"),
    ("seqssm.data.lra.imdb", "import seqssm.rl.core\n", 1, "seqssm.rl.core"),
    ("seqssm.layers.s4", "from seqssm import models\n", 1, "seqssm.models"),
    ("seqssm.tasks.base", "from ..rl import core\n", 1, "seqssm.rl.core"),
    ("seqssm.blocks.stack", "import lightning as L\n", 1, "lightning"),
])
def test_upward_imports_are_caught(importer, source, line, expected):
    tree = ast.parse(source)
    flagged = [(n, m) for n, m in imported_modules(tree, importer, False) if violation(importer, m)]
    assert (line, expected) in flagged


def test_downward_imports_pass():
    tree = ast.parse("from ..hub import read_config\nfrom seqssm.data import SeqDataModule\nfrom .. import __version__\n"
                     "import torch\nfrom seqssm.optim import tag_param\n")
    assert not [m for _, m in imported_modules(tree, "seqssm.models.loading", False)
                if violation("seqssm.models.loading", m)]
