"""`seqssm data list | download | prepare`: what is on disk, fetching the published files, offline generation.

    seqssm data list                                        # every dataset, its source, size and status
    seqssm data download imdb cifar10                       # into data/imdb, data/cifar10
    seqssm data download listops aan pathfinder --data-dir /scratch/data   # the LRA release, fetched once
    seqssm data download mnist --mirror https://mirror.example.org/seqssm  # or SEQSSM_DATA_MIRROR
    seqssm data prepare listops                             # generate with LRA's grammar
    seqssm data prepare pathfinder --resolution 64 --n 20000
    seqssm data prepare imdb --source aclImdb_v1.tar.gz     # unpack a file you already have
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from seqssm.arguments import ArgumentParser
from seqssm.errors import ConfigError

from .missing import path_problem
from .sources import DATASETS

OPTION = "option:"  # prefix of the dest of a generator option, so that main hands exactly those to prepare


def build_parser() -> ArgumentParser:
    """The `seqssm data` parser with its three subcommands."""
    parser = ArgumentParser(prog="seqssm data", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    def data_dir(p):
        p.add_argument("--data-dir", type=Path, default=Path("data"),
                       help="root of the dataset folders; each dataset goes to DATA_DIR/<name> (default: data)")

    data_dir(commands.add_parser("list", help="every dataset: source files, download size, folder, status"))

    p = commands.add_parser("download", help="fetch, verify and unpack datasets where the DataModules look")
    p.add_argument("names", nargs="+", metavar="NAME", choices=list(DATASETS), help=", ".join(DATASETS))
    data_dir(p)
    p.add_argument("--mirror", help="fetch every file from MIRROR/<file name> (a URL or a local folder) instead of "
                                    "its official location (default: $SEQSSM_DATA_MIRROR)")
    p.add_argument("--no-verify", action="store_true", help="skip the digest checks, e.g. for a mirror of modified files")

    p = commands.add_parser("prepare", help="generate a dataset offline, or unpack a local copy of its published file")
    p.add_argument("name", choices=list(DATASETS))
    data_dir(p)
    p.add_argument("--out", type=Path, help="folder to write (default: DATA_DIR/<name>, where the DataModule looks)")
    p.add_argument("--source", type=Path, help="published file (or folder of them) to unpack instead of generating")
    p.add_argument("--seed", type=int, default=0)
    generator_options(p)
    return parser


def generator_options(parser: argparse.ArgumentParser) -> None:
    """Add every registered generator's options to `parser`, each flag once, its help naming the datasets taking it."""
    takers: dict[str, list] = {}
    for d in DATASETS.values():
        for o in d.generator.options if d.generator is not None else ():
            takers.setdefault(o.name, []).append((d.name, o))
    for name, uses in takers.items():
        default = uses[0][1].default
        kind = {"type": int} if isinstance(default, int) else {"nargs": "+"} if isinstance(default, tuple) else {}
        parser.add_argument("--" + name.replace("_", "-"), dest=OPTION + name, metavar=name.upper(),
                            default=argparse.SUPPRESS, **kind,
                            help="; ".join(f"{dataset}{': ' + o.help if o.help else ''} (default: {shown(o.default)})"
                                           for dataset, o in uses))


def shown(value) -> str:
    """An option's default as it is typed on the command line."""
    return " ".join(value) if isinstance(value, tuple) else str(value)


def main(argv: list[str]) -> None:
    """Run `seqssm data ...` (its errors are the `seqssm` command's to print)."""
    ns = build_parser().parse_args(argv)
    problem = path_problem(ns.data_dir, folder=True) if ns.command != "prepare" or ns.out is None else None
    if problem:
        raise ConfigError(f"--data-dir {ns.data_dir}: {problem}; pass a folder, or a path where one can be made")
    try:
        if ns.command == "list":
            print_listing(ns.data_dir)
        elif ns.command == "download":
            from .download import download

            download(ns.names, ns.data_dir, mirror=ns.mirror, verify=not ns.no_verify)
        else:
            from .prepare import prepare

            out = ns.out or ns.data_dir / DATASETS[ns.name].folder
            options = {k.removeprefix(OPTION): v for k, v in vars(ns).items() if k.startswith(OPTION)}
            prepare(ns.name, out, ns.source, seed=ns.seed, **options)
            print(f"{ns.name}: written to {out}")
    except KeyboardInterrupt:
        print("seqssm data: interrupted; run the same command again to continue where it stopped", file=sys.stderr)
        sys.exit(130)


def print_listing(data_dir: Path) -> None:
    """Print `seqssm data list`'s table."""
    from .download import listing

    rows = listing(data_dir)
    columns = list(rows[0])
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns[:-1]}
    for row in [dict(zip(columns, columns))] + rows:
        print("  ".join(row[c].ljust(widths[c]) for c in columns[:-1]) + "  " + row[columns[-1]])
