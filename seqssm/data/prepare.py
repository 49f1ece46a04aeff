"""`seqssm data prepare`: generate a dataset offline, or unpack published files the user already has.

A dataset's generator and its options are those of its `DATASETS` entry (seqssm/data/sources.py);
`source` unpacks local copies of the published files exactly as `seqssm data download` unpacks
fetched ones.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from seqssm.errors import ConfigError, DataNotFoundError, check_int

from .missing import path_problem
from .extract import unpack
from .sources import DATASETS, Dataset


def local_sources(d: Dataset, source: Path) -> dict[str, Path]:
    """{source name: path}: `source` is the file itself (single-file datasets) or a folder holding
    every source file under its published name (e.g. `human/chr1.fna.gz`, the four MNIST files)."""
    if source.is_file() and len(d.files) == 1:
        return {d.files[0].name: source}
    if not source.is_dir():
        raise DataNotFoundError(f"{source} does not exist" if not source.exists() else
                                f"{d.name} has {len(d.files)} source files: pass the folder holding them, not {source}")
    found = {f.name: source / f.name for f in d.files}
    absent = [n for n, p in found.items() if not p.is_file()]
    if absent:
        raise DataNotFoundError(f"{source}: no {absent[0]} ({len(absent)} of the {len(d.files)} files of {d.name} "
                                f"absent); `seqssm data download {d.name}` fetches them")
    return found


def prepare(name: str, out: str | Path, source: str | Path | None = None, seed: int = 0,
            progress: bool | None = None, **options) -> Path:
    """Write dataset `name` into folder `out`: unpacked from `source`, else generated. Returns `out`.

    `options` are the generator's options of the `DATASETS` entry (e.g. listops `n_train`), by their
    option names; those not given take the entry's defaults.
    """
    if name not in DATASETS:
        raise DataNotFoundError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    d, out = DATASETS[name], Path(out)
    problem = path_problem(out, folder=True)
    if problem:
        raise ConfigError(f"data prepare {name}: cannot write into {out}: {problem}; pass --out (or --data-dir) "
                          "naming a folder, or a path where one can be made")
    if source is not None:
        files = local_sources(d, Path(source))
        unpack([(d, out)], files, {n: {"from": str(p)} for n, p in files.items()}, progress)
        return out
    if d.generator is None:
        names = [f.name for f in d.files]
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        where = "the file itself" if len(names) == 1 else "the folder holding them"
        raise DataNotFoundError(
            f"{name} has no generator: `seqssm data download {name}` fetches it (from {d.files[0].urls[0]}); "
            f"offline, bring its published file{'s' if len(names) > 1 else ''} ({shown}) over from a machine that "
            f"can reach it and pass --source with {where}")
    flags = {o.name: "--" + o.name.replace("_", "-") for o in d.generator.options}
    unknown = [key for key in options if key not in flags]
    if unknown:
        raise ConfigError(f"data prepare {name}: its generator takes no --{unknown[0].replace('_', '-')}; it takes "
                          f"{' '.join(flags.values())}")
    values = {o.name: options.get(o.name, o.default) for o in d.generator.options}
    for o in d.generator.options:
        if o.count:
            check_int(f"data prepare {name}", flags[o.name], values[o.name])
    module, function = d.generator.function.split(":")
    generate = getattr(importlib.import_module(module), function)
    generate(out, seed=seed, **{o.keyword or o.name: values[o.name] for o in d.generator.options})
    return out
