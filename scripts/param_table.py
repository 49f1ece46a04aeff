"""Print our trainable parameter counts beside Ulbaek 2024 thesis, tables 3 and 6, with their ratios.

    python scripts/param_table.py                    # table 6 with S4's IMDB character vocabulary (135)
    python scripts/param_table.py --vocab-size 259   # ... with the byte vocabulary instead

ratio = ours / thesis (table 3: whole model and inside the SSPs; table 6: whole model); "variant ratio" is a
variant's count over its regular model's, ours beside the thesis's.
"""

from __future__ import annotations

import argparse

from torch import nn

from seqssm.layers.s4 import S4
from seqssm.layers.s4d import S4D
from seqssm.layers.s6 import S6
from seqssm.models import THESIS_TABLE3, THESIS_TABLE6, THESIS_TABLE6_VOCAB_SIZE, build


def count(module: nn.Module) -> int:
    """Trainable parameters, each shared tensor once."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def ssp_count(model: nn.Module) -> int:
    """Trainable parameters inside the SSP layers (not the conv1d, as in table 3)."""
    return sum(count(m) for m in model.modules() if isinstance(m, (S4, S4D, S6)))


def table3() -> list[dict]:
    """Rows of table 3 (Cifar10-numerical: d_input 3, 10 classes): ours and the thesis's counts."""
    rows = []
    for name, (full, in_ssp) in THESIS_TABLE3.items():
        model = build(name, d_input=3, n_classes=10)
        rows.append({"model": name, "d": model.config.d_model, "ours": count(model), "thesis": full,
                     "ssp_ours": ssp_count(model), "ssp_thesis": in_ssp})
    return rows


def table6(vocab_size: int = THESIS_TABLE6_VOCAB_SIZE) -> list[dict]:
    """Rows of table 6 (IMDB: `vocab_size` token ids, 2 classes): ours and the thesis's counts."""
    rows = []
    for name, thesis in THESIS_TABLE6.items():
        model = build(name, vocab_size=vocab_size, n_classes=2)
        rows.append({"model": name, "d": model.config.d_model, "ours": count(model), "thesis": thesis})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=THESIS_TABLE6_VOCAB_SIZE,
                        help="IMDB vocabulary for table 6 (default: S4's character vocabulary, 135; bytes: 259)")
    args = parser.parse_args()

    print("Table 3 - Cifar10-numerical (d_input=3, 10 classes)")
    print(f"{'model':<14}{'d':>5}{'ours':>10}{'thesis':>10}{'ratio':>8}{'SSP ours':>10}{'SSP thesis':>12}{'ratio':>8}")
    for r in table3():
        print(f"{r['model']:<14}{r['d']:>5}{r['ours']:>10,}{r['thesis']:>10,}{r['ours'] / r['thesis']:>8.3f}"
              f"{r['ssp_ours']:>10,}{r['ssp_thesis']:>12,}{r['ssp_ours'] / r['ssp_thesis']:>8.3f}")

    print(f"\nTable 6 - IMDB ({args.vocab_size}-symbol vocabulary, 2 classes)")
    print(f"{'model':<16}{'d':>5}{'ours':>11}{'thesis':>11}{'ratio':>8}{'variant ratio ours':>20}{'thesis':>8}")
    regular = {}
    for r in table6(args.vocab_size):
        base = "-".join(r["model"].split("-")[:2])
        regular.setdefault(base, r)
        ours_ratio, thesis_ratio = r["ours"] / regular[base]["ours"], r["thesis"] / regular[base]["thesis"]
        print(f"{r['model']:<16}{r['d']:>5}{r['ours']:>11,}{r['thesis']:>11,}{r['ours'] / r['thesis']:>8.3f}"
              f"{ours_ratio:>20.3f}{thesis_ratio:>8.3f}")


if __name__ == "__main__":
    main()
