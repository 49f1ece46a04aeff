"""docs/api.md is what the docstrings say: scripts/api_reference.py regenerates it, and this test fails until it is
rerun after a public name or docstring changes."""

import importlib
import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "api_reference.py"


def _script():
    spec = importlib.util.spec_from_file_location("api_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_api_reference_is_up_to_date():
    assert _script().main(["--check"]) == 0, "docs/api.md is stale: run python scripts/api_reference.py"


def test_the_api_reference_lists_every_public_name():
    script = _script()
    text = script.render()
    for name in script.PACKAGES:
        for attr in importlib.import_module(name).__all__:
            assert f"`{attr}" in text, f"{name}.{attr} is missing from the API reference"
