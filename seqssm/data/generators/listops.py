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

from seqssm.errors import ConfigError, check_int

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
VALUE_P = 0.25
# Trees drawn in a row without a new expression in range before giving up (~5-60 s): a range that few trees reach,
# or fewer distinct expressions in it than asked for, would otherwise keep the loop drawing forever.
MAX_MISSES = 100_000


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


def longest(max_depth: int, max_args: int) -> int:
    """The most tokens a tree of `_tree` can have: max_args children at every level above max_depth."""
    length = 1
    for _ in range(max_depth - 1):
        length = 2 + max_args * length
    return length


def check_listops_arguments(n: int, max_depth: int, max_args: int, min_length: int, max_length: int) -> None:
    """ConfigError naming the argument unless every size is in range and some tree has a token count strictly
    between min_length and max_length."""
    check_int("listops", "n", n)
    check_int("listops", "max_depth", max_depth)
    check_int("listops", "max_args", max_args, minimum=2)
    check_int("listops", "min_length", min_length, minimum=0)
    check_int("listops", "max_length", max_length)
    if min_length + 1 >= max_length:
        raise ConfigError(f"listops: min_length = {min_length} must be below max_length - 1 = {max_length - 1}: "
                          "expressions of more than min_length and fewer than max_length tokens are kept")
    most = longest(max_depth, max_args)
    if min_length >= most:
        raise ConfigError(f"listops: min_length = {min_length}, but trees of max_depth {max_depth} and max_args "
                          f"{max_args} have at most {most} tokens: lower min_length (or raise max_depth)")


def generate_listops(n: int, seed: int, max_depth: int = 10, max_args: int = 10,
                     min_length: int = 500, max_length: int = 2000, desc: str = "listops") -> list[tuple[str, int]]:
    """`n` distinct (source, target) pairs with token count in (min_length, max_length)."""
    check_listops_arguments(n, max_depth, max_args, min_length, max_length)
    rng = random.Random(seed)
    seen: dict[str, int] = {}
    misses = 0
    with tqdm(total=n, desc=desc, leave=False) as bar:
        while len(seen) < n:
            tree, length = _tree(rng, 1, max_depth, max_args)
            s = to_string(tree) if min_length < length < max_length else None
            if s is None or s in seen:
                misses += 1
                if misses == MAX_MISSES:
                    raise ConfigError(
                        f"listops: {MAX_MISSES} trees in a row gave no new expression of more than min_length = "
                        f"{min_length} and fewer than max_length = {max_length} tokens ({len(seen)} of n = {n} "
                        "found): widen the range (--min-length, --max-length) or ask for fewer examples")
                continue
            misses = 0
            seen[s] = evaluate(tree)
            bar.update(1)
    return list(seen.items())


def write_listops(out_dir: str | Path, n_train: int = 96_000, n_val: int = 2_000, n_test: int = 2_000,
                  seed: int = 0, **kwargs) -> Path:
    """Write `out_dir/basic_{train,val,test}.tsv` (header `Source<TAB>Target`); returns out_dir."""
    for name, value in (("n_train", n_train), ("n_val", n_val), ("n_test", n_test)):
        check_int("listops", name, value)
    out_dir = Path(out_dir)
    rows = generate_listops(n_train + n_val + n_test, seed, **kwargs)
    out_dir.mkdir(parents=True, exist_ok=True)
    parts = {"train": rows[:n_train], "val": rows[n_train : n_train + n_val], "test": rows[n_train + n_val :]}
    for split, part in parts.items():
        with open(out_dir / f"basic_{split}.tsv", "w", encoding="utf-8") as f:
            f.write("Source\tTarget\n")
            f.writelines(f"{s}\t{t}\n" for s, t in part)
    return out_dir
