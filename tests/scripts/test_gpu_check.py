"""scripts/gpu_check.sh runs only where a GPU is lent, a few minutes at a time: every step's command line must be one
its script accepts, and every step must be one STEPS can name, before such a session spends its time finding out."""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.sh"


def steps() -> dict[str, list[str]]:
    """name -> the argument list of each `run NAME SECONDS COMMAND...` line, continuation lines joined."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    found = {}
    for line in text.splitlines():
        match = re.match(r"\s*run (\S+) (\d+) (.+)", line)
        if match:
            found[match.group(1)] = shlex.split(match.group(3))
    return found


class Parsed(Exception):
    """Raised instead of running a script once its arguments parsed."""


@pytest.mark.parametrize("name,command", [(n, c) for n, c in steps().items() if "scripts/" in " ".join(c)])
def test_every_scripts_step_passes_arguments_its_script_accepts(name, command, load_script, monkeypatch, tmp_path):
    script = next(arg for arg in command if arg.startswith("scripts/"))
    argv = [arg.replace("$OUT", str(tmp_path)) for arg in command[command.index(script) + 1:]]
    parse = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        raise Parsed(parse(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    monkeypatch.setattr(sys, "argv", [script, *argv])
    with pytest.raises(Parsed) as parsed:
        load_script(Path(script).stem).main()
    assert vars(parsed.value.args[0]).get("device", "cuda") == "cuda", "a GPU step measures on the GPU"


def test_the_steps_are_the_ones_the_header_names_for_steps():
    header = re.search(r"STEPS\s+the steps to run \(default all\) among (.+?):", SCRIPT.read_text(), re.DOTALL)
    named = {word.strip(" ,\n#") for word in header.group(1).split()} - {""}
    assert named == {*steps(), "compile-check"}


def test_the_gpu_tests_step_selects_registered_markers():
    import tomllib

    markers = {m.split(":")[0] for m in tomllib.loads((SCRIPT.parents[1] / "pyproject.toml").read_text())
               ["tool"]["pytest"]["ini_options"]["markers"]}
    command = steps()["gpu-tests"]
    expression = command[command.index("-m", command.index("pytest")) + 1]  # the -m after `-m pytest`
    assert set(re.findall(r"\w+", expression)) - {"and", "or", "not"} <= markers
