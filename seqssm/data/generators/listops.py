"""ListOps generator following LRA's grammar; writes `basic_{train,val,test}.tsv`.

Trees: with probability 0.25 (or always, below `max_depth`) a node is an operator
`[MIN [MAX [MED [SM` over 2..`max_args` children, else a digit. MED is the integer part of
the median, SM the sum mod 10. Only trees with `min_length < length < max_length` tokens
are kept, without duplicates, written as LRA writes them (with parentheses).
"""

from __future__ import annotations

import random
from pathlib import Path

from tqdm.auto import tqdm

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
VALUE_P = 0.25


def _tree(rng: random.Random, depth: int, max_depth: int, max_args: int):
    """(tree, token count); a tree is an int or (op, [children])."""
    if depth >= max_depth or rng.random() > VALUE_P:
        return rng.randrange(10), 1
    length, children = 2, []
    for _ in range(rng.randint(2, max_args)):
        child, n = _tree(rng, depth + 1, max_depth, max_args)
        children.append(child)
        length += n
    return (rng.choice(OPERATORS), children), length


def evaluate(tree) -> int:
    """Value 0..9 of a tree."""
    if isinstance(tree, int):
        return tree
    op, children = tree
    values = sorted(evaluate(c) for c in children)
    if op == "[MIN":
        return values[0]
    if op == "[MAX":
        return values[-1]
    if op == "[SM":
        return sum(values) % 10
    mid = len(values) // 2  # median, truncated to int (LRA: int(np.median(values)))
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) // 2


def to_string(tree) -> str:
    """LRA's text form, e.g. `( ( ( [MAX 2 ) 9 ) ] )`: every (left, right) pair in parentheses."""
    if isinstance(tree, int):
        return str(tree)
    op, children = tree
    s = op
    for c in children + ["]"]:
        s = f"( {s} {c if isinstance(c, str) else to_string(c)} )"
    return s


def generate_listops(n: int, seed: int, max_depth: int = 10, max_args: int = 10,
                     min_length: int = 500, max_length: int = 2000, desc: str = "listops") -> list[tuple[str, int]]:
    """`n` distinct (source, target) pairs with token count in (min_length, max_length)."""
    rng = random.Random(seed)
    seen: dict[str, int] = {}
    with tqdm(total=n, desc=desc, leave=False) as bar:
        while len(seen) < n:
            tree, length = _tree(rng, 1, max_depth, max_args)
            if min_length < length < max_length:
                s = to_string(tree)
                if s not in seen:
                    seen[s] = evaluate(tree)
                    bar.update(1)
    return list(seen.items())


def write_listops(out_dir: str | Path, n_train: int = 96_000, n_val: int = 2_000, n_test: int = 2_000,
                  seed: int = 0, **kwargs) -> Path:
    """Write `out_dir/basic_{train,val,test}.tsv` (header `Source<TAB>Target`); returns out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = generate_listops(n_train + n_val + n_test, seed, **kwargs)
    parts = {"train": rows[:n_train], "val": rows[n_train : n_train + n_val], "test": rows[n_train + n_val :]}
    for split, part in parts.items():
        with open(out_dir / f"basic_{split}.tsv", "w", encoding="utf-8") as f:
            f.write("Source\tTarget\n")
            f.writelines(f"{s}\t{t}\n" for s, t in part)
    return out_dir
