"""docs/api.md is what the docstrings say: scripts/api_reference.py regenerates it, and this test fails until it is
rerun after a public name or docstring changes."""

import importlib


def test_the_api_reference_is_up_to_date(load_script):
    assert load_script("api_reference").main(["--check"]) == 0, \
        "docs/api.md is stale: run python scripts/api_reference.py"


def test_the_api_reference_lists_every_public_name(load_script):
    script = load_script("api_reference")
    text = script.render()
    for name in script.PACKAGES:
        for attr in importlib.import_module(name).__all__:
            assert f"`{attr}" in text, f"{name}.{attr} is missing from the API reference"
