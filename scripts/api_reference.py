"""Write docs/api.md, the API reference, from the docstrings: every name in the `__all__` of seqssm's public
packages, with its signature and docstring (a class also with its public methods' first lines).

    python scripts/api_reference.py            # rewrite docs/api.md
    python scripts/api_reference.py --check    # exit 1 if docs/api.md is not what the code says (the tests run this)
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from pathlib import Path

PACKAGES = ("seqssm.ops", "seqssm.layers", "seqssm.blocks", "seqssm.models", "seqssm.tasks", "seqssm.data",
            "seqssm.rl")
OUT = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def signature(obj) -> str:
    """`(a, b=1)` of a function or a class's constructor, or "" where Python cannot tell."""
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""


def doc(obj) -> str:
    """The object's own docstring, dedented, or a line saying it has none."""
    text = inspect.getdoc(obj) if obj.__doc__ else None
    return text.strip() if text else "(no docstring)"


def first_line(obj) -> str:
    """": " and the first line of obj's docstring, its own or the one it overrides (torch's nn.Module hooks such as
    forward and extra_repr have none), or "" without one."""
    text = inspect.getdoc(obj)
    return f": {text.strip().splitlines()[0]}" if text and text.strip() else ""


def methods(cls) -> list[str]:
    """Lines for the public methods and properties a class defines itself: name(signature): first docstring line."""
    lines = []
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            lines.append(f"- `{name}` (property){first_line(member)}")
        elif isinstance(member, (classmethod, staticmethod)) or inspect.isfunction(member):
            func = getattr(cls, name)  # bound through the class, so that getdoc finds an overridden method's text
            lines.append(f"- `{name}{signature(func)}`{first_line(func)}")
    return lines


def package_section(name: str) -> list[str]:
    """The markdown of one package: its docstring, then each of its public names."""
    package = importlib.import_module(name)
    lines = [f"## `{name}`", "", doc(package), ""]
    for attr in getattr(package, "__all__", ()):
        obj = getattr(package, attr)
        if inspect.isclass(obj):
            lines += [f"### class `{attr}{signature(obj)}`", "", doc(obj), ""]
            own = methods(obj)
            lines += own + ([""] if own else [])
        elif callable(obj):
            lines += [f"### `{attr}{signature(obj)}`", "", doc(obj), ""]
        else:
            lines += [f"### `{attr}`", "", f"A {type(obj).__name__}: {', '.join(map(str, obj)) if isinstance(obj, (dict, tuple, list, frozenset, set)) else repr(obj)}", ""]
    return lines


def render() -> str:
    """docs/api.md as the code says it."""
    lines = ["# API reference", "",
             "Generated from the docstrings by `python scripts/api_reference.py`: the names in the `__all__` of "
             "seqssm's public packages. The design behind them: [design.md](design.md).", ""]
    lines += [f"- [`{name}`](#{name.replace('.', '')})" for name in PACKAGES] + [""]
    for name in PACKAGES:
        lines += package_section(name)
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="compare with docs/api.md instead of writing it")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.is_file() or OUT.read_text() != text:
            print(f"{OUT} is not what the docstrings say: run python scripts/api_reference.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
