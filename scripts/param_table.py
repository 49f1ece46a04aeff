"""Print our trainable parameter counts beside the thesis's tables 3 and 6.

    python scripts/param_table.py [--vocab-size 256]
"""

from __future__ import annotations

import argparse

from torch import nn

from seqssm.layers.s4 import S4
from seqssm.layers.s4d import S4D
from seqssm.layers.s6 import S6
from seqssm.models import THESIS_TABLE3, THESIS_TABLE6, build


def count(module: nn.Module) -> int:
    """Trainable parameters, each shared tensor once."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def ssp_count(model: nn.Module) -> int:
    """Trainable parameters inside the SSP layers (not the conv1d, as in table 3)."""
    return sum(count(m) for m in model.modules() if isinstance(m, (S4, S4D, S6)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=256, help="IMDB vocabulary for table 6 (bytes: 256)")
    args = parser.parse_args()

    print("Table 3 - Cifar10-numerical (d_input=3, 10 classes)")
    print(f"{'model':<14}{'d':>5}{'ours':>10}{'thesis':>10}{'diff':>8}{'SSP ours':>10}{'SSP thesis':>12}")
    for name, (full, in_ssp) in THESIS_TABLE3.items():
        m = build(name, d_input=3, n_classes=10)
        n = count(m)
        d = m.config.d_model
        print(f"{name:<14}{d:>5}{n:>10,}{full:>10,}{100 * (n / full - 1):>+7.1f}%{ssp_count(m):>10,}{in_ssp:>12,}")

    print(f"\nTable 6 - IMDB ({args.vocab_size}-symbol vocabulary, 2 classes)")
    print(f"{'model':<16}{'d':>5}{'ours':>11}{'thesis':>11}{'diff':>8}{'ratio ours':>12}{'ratio thesis':>14}")
    regular = {}
    for name, thesis in THESIS_TABLE6.items():
        m = build(name, vocab_size=args.vocab_size, n_classes=2)
        n = count(m)
        base = "-".join(name.split("-")[:2])
        regular.setdefault(base, (n, thesis))
        ours_ratio, thesis_ratio = n / regular[base][0], thesis / regular[base][1]
        print(
            f"{name:<16}{m.config.d_model:>5}{n:>11,}{thesis:>11,}{100 * (n / thesis - 1):>+7.1f}%"
            f"{ours_ratio:>12.3f}{thesis_ratio:>14.3f}"
        )


if __name__ == "__main__":
    main()
