"""Command-line parsers whose mistakes are one line.

An unknown or misspelt option, or a value of the wrong type, raises `UsageError` naming the option (and the
closest valid one), which `seqssm` prints as `seqssm CMD: error: MESSAGE` with exit code 2, instead of
argparse's usage block or jsonargparse's multi-screen report (SEQSSM_DEBUG=1 shows that report in the
traceback). `ArgumentParser` is argparse's parser so changed; `ShortErrors` goes before a jsonargparse
parser class (`class Parser(ShortErrors, jsonargparse.ArgumentParser)`), so this module imports neither
jsonargparse nor Lightning.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import inspect
import os
import re
from typing import TYPE_CHECKING

from seqssm.errors import ConfigError, SeqssmError, UsageError

if TYPE_CHECKING:
    import torch

# Lines of jsonargparse's reports that say how it searched, not what is wrong.
NOISE = ("Does not validate against any of the Union subtypes", "Subtypes:", "Errors:", "Given value type:")


def closest(word: str, candidates, cutoff: float = 0.75) -> str | None:
    """The candidate most like `word`: a typo of it (at least `cutoff` alike by difflib's ratio), else the only one
    it begins; None when there is no such candidate."""
    found = difflib.get_close_matches(word, list(candidates), n=1, cutoff=cutoff)
    extended = [c for c in candidates if c.startswith(word)]
    return found[0] if found else extended[0] if len(extended) == 1 else None


def unknown_option(option: str, candidates: list[str], owner: str | None = None, prefix: str = "") -> str:
    """"unknown option 'X'; did you mean 'Y'?", or what `owner` takes when no candidate is close. `option` is
    `prefix` + a name compared with `candidates` (the names `owner` takes)."""
    match = closest(option.removeprefix(prefix), candidates)
    if match:
        return f"unknown option {option!r}; did you mean {prefix + match!r}?"
    if owner and candidates:
        return f"unknown option {option!r}; {owner} takes {', '.join(candidates)}"
    return f"unknown option {option!r}"


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, raising UsageError (one line, with the closest option for a misspelt one) instead of
    printing its usage and exiting; `-h` works as before. Abbreviated options are refused (`allow_abbrev=False`)."""

    def __init__(self, *args, **kwargs):
        # a prefix of an option taken for it (--max-new for --max-new-tokens) hides typos; refused, with the closest
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        raise UsageError(unrecognized(message, self) or message, prog=self.prog)


class ShortErrors:
    """Mixin for jsonargparse parsers: a parse error raises UsageError with one line naming the option (the full
    report rides along as its cause). Nested parsers that jsonargparse tries and discards keep its behaviour."""

    def error(self, message: str, ex: Exception | None = None):
        if not self.exit_on_error or os.environ.get("JSONARGPARSE_DEBUG"):
            return super().error(message, ex)
        report = argparse.ArgumentError(None, message)
        report.__cause__ = ex
        raise UsageError(short_report(message, ex, getattr(ex, "subcommand_parser", None) or self)) from report


def short_report(message: str, ex: BaseException | None, parser) -> str:
    """One line for jsonargparse's error `message` (raised with `ex`, by `parser`)."""
    cause = ex
    while cause is not None:  # a recipe reader's own error, or a YAML syntax error, says it best
        if isinstance(cause, SeqssmError):
            return str(cause)
        if yaml_problem(cause):
            return f"not valid YAML: {yaml_problem(cause)}"
        cause = cause.__cause__ or cause.__context__
    refused = re.search(r"does not accept option '([^']+)'", message)
    if refused:
        return unknown_option(refused[1], option_keys(parser))
    return unrecognized(message, parser) or nested_report(message, parser)


def unrecognized(message: str, parser) -> str | None:
    """For argparse's "unrecognized arguments: --X ...": "unknown option '--X'" with the closest option of `parser`;
    None for any other message."""
    found = re.match(r"unrecognized arguments: (\S+)", message)
    if not found:
        return None
    return unknown_option(found[1].split("=")[0], [o for action in parser._actions for o in action.option_strings])


def yaml_problem(error: BaseException) -> str | None:
    """What a YAML syntax error says is wrong and where ("expected ',' or ']' (line 2, column 1)"); None for an
    error that is no YAML syntax error."""
    mark = getattr(error, "problem_mark", None)
    if mark is None:
        return None
    return f"{error.problem} (line {mark.line + 1}, column {mark.column + 1})"


def nested_report(message: str, parser) -> str:
    """One line for a report of nested `Parser key "a":` / `Problem with given class_path 'C':` sections: the dotted
    key (a.init_args.b) and what is wrong with it."""
    key, owner, owner_key, details = [], None, "", []
    for line in message.splitlines():
        line = line.strip().removeprefix("- ")
        section = re.match(r'Parser key "([^"]+)":\s*(.*)', line)
        if section:
            key.append(section[1])
            line = section[2]
        class_path = re.match(r"Problem with given class_path '([^']+)':", line)
        if class_path:
            owner, owner_key = class_path[1], ".".join(key)
            key.append("init_args")
            continue
        if line and not line.startswith(NOISE):
            details.append(line)
    where = ".".join(key)
    expected, given = [], None
    for line in details:
        refused = re.match(r"Option '([^']+)' is not accepted", line)
        if refused and owner:
            name = owner.rsplit(".", 1)[-1]
            return unknown_option(f"{where}.{refused[1]}", init_parameters(owner), name, prefix=f"{where}.")
        if refused:
            return unknown_option(refused[1], option_keys(parser))
        no_class = re.match(r"module '([^']+)' has no attribute '([^']+)'", line)
        if no_class:
            match = closest(no_class[2], public_classes(no_class[1]))
            hint = f"; did you mean '{no_class[1]}.{match}'?" if match else ""
            return f"{owner_key}: no class '{owner}'{hint}"
        missing = re.match(r"File does not exist: '(.+)'", line)
        if missing:
            return f"{missing[1]} not found (given as --{where})"
        wrong = re.match(r"Expected a (.+?)\. Got value: (.*)", line)
        if wrong:
            return f"{where} = {wrong[2]!r}: expected {type_name(wrong[1])}"
        if line.startswith("Expected a "):
            expected.append(type_name(line.removeprefix("Expected a ")))
        elif line.startswith("Given value: "):
            given = line.removeprefix("Given value: ")
    if expected and given is not None:
        return f"{where} = {given!r}: expected {' or '.join(expected)}"
    detail = next((line for line in details if not line.startswith("Given value")), message.splitlines()[0])
    return f"{where}: {detail}" if where else detail


def type_name(text: str) -> str:
    """"<class 'float'>" -> "float", "<class 'NoneType'>" -> "None", "typing.Literal['a', 'b']" -> "one of 'a', 'b'"."""
    literal = re.fullmatch(r"typing\.Literal\[(.*)\]", text)
    if literal:
        return f"one of {literal[1]}"
    return re.sub(r"<class '(?:[\w.]+\.)?(\w+)'>", lambda m: "None" if m[1] == "NoneType" else m[1], text)


def option_keys(parser) -> list[str]:
    """The dotted keys a jsonargparse `parser` takes ("trainer.max_epochs", "model", ...)."""
    return [action.dest for action in parser._actions if action.dest != "help"]


def init_parameters(class_path: str) -> list[str]:
    """The keyword parameters of the class at `class_path` ("seqssm.tasks.Classification"); [] if it won't import."""
    try:
        module, _, name = class_path.rpartition(".")
        signature = inspect.signature(getattr(importlib.import_module(module), name))
    except (ImportError, AttributeError, ValueError, TypeError):
        return []
    return [p.name for p in signature.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def public_classes(module: str) -> list[str]:
    """The public class names of `module` ([] if it won't import)."""
    try:
        namespace = vars(importlib.import_module(module))
    except ImportError:
        return []
    return [name for name, value in namespace.items() if isinstance(value, type) and not name.startswith("_")]


def resolve_device(name: str) -> torch.device:
    """The torch device that a `--device` option names: "auto" is CUDA when available, else the CPU; ConfigError for a
    name torch does not know or a CUDA device this machine lacks."""
    import torch  # here: `seqssm --help` imports no torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as e:
        raise ConfigError(f"--device = {name!r} is not a device; use auto, cpu, cuda or cuda:N") from e
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device = {name!r} but torch sees no CUDA device here; use --device auto or cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ConfigError(f"--device = {name!r} but this machine has {torch.cuda.device_count()} CUDA device(s)")
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"--device = {name!r}: only cpu and cuda devices are supported")
    return device
