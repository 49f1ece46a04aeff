"""The dataset registry (issue 35): every `DATASETS` entry has what `seqssm data list / download / prepare` need, and
the command offers exactly the registry's datasets and generator options."""

from __future__ import annotations

import importlib
import inspect

import pytest

from seqssm.data.base import SeqDataModule
from seqssm.data.cli import OPTION, build_parser, shown
from seqssm.data.download import listing
from seqssm.data.sources import DATASETS, Dataset
from seqssm.errors import UsageError


def load(path: str):
    """The object a "module:name" path names."""
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("d", DATASETS.values(), ids=list(DATASETS))
def test_every_entry_is_complete(d: Dataset):
    assert d.files and d.expected and d.summary
    assert all(f.urls and all(u.startswith(("https://", "http://")) for u in f.urls) for f in d.files)
    assert all(f.md5 is None or len(f.md5) == 32 for f in d.files)
    datamodule = load(d.datamodule)
    assert issubclass(datamodule, SeqDataModule) and datamodule.name == d.folder  # it reads where downloads go
    if d.generator is not None:  # prepare's call, with every option at its default, binds
        defaults = {o.keyword or o.name: o.default for o in d.generator.options}
        inspect.signature(load(d.generator.function)).bind("out", seed=0, **defaults)
        assert all(isinstance(o.default, int) for o in d.generator.options if o.count)


def test_the_command_lists_and_accepts_exactly_the_registry(tmp_path):
    assert [row["dataset"] for row in listing(tmp_path)] == list(DATASETS)
    for command in ("download", "prepare"):
        with pytest.raises(UsageError) as e:
            build_parser().parse_args([command, "dragons"])
        assert str(e.value).endswith("(choose from " + ", ".join(map(repr, DATASETS)) + ")")
    options = [o for d in DATASETS.values() if d.generator is not None for o in d.generator.options]
    given = [arg for o in options for arg in ("--" + o.name.replace("_", "-"), *shown(o.default).split())]
    ns = vars(build_parser().parse_args(["prepare", "listops", *given]))
    assert {k.removeprefix(OPTION) for k in ns if k.startswith(OPTION)} == {o.name for o in options}
    ns = vars(build_parser().parse_args(["prepare", "listops"]))
    assert not [k for k in ns if k.startswith(OPTION)]  # options not given take the entry's defaults


def test_prepare_refuses_an_option_of_another_generator(tmp_path, capsys):
    from seqssm.cli import main

    with pytest.raises(SystemExit) as e:
        main(["data", "prepare", "listops", "--out", str(tmp_path / "lo"), "--n", "5"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "data prepare listops: its generator takes no --n; it takes --n-train" in err
    assert not (tmp_path / "lo").exists()
