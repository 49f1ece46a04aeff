"""HyenaDNA's chromosome splits per species: which chromosomes train, validate and test."""

from __future__ import annotations

from typing import Sequence

DEFAULT_SPECIES = ("human", "lemur", "mouse", "pig", "hippo")  # HyenaDNA's five-species task, Ulbaek 2024's
_STD_VALID, _STD_TEST = ["1", "3", "12", "13"], ["5", "7", "9", "10", "11"]


def _split(train: Sequence[str]) -> dict[str, list[str]]:
    return {"train": list(train), "valid": list(_STD_VALID), "test": list(_STD_TEST)}


def _nums(a: int, b: int) -> list[str]:
    return [str(i) for i in range(a, b + 1)]


# HyenaDNA's chromosome splits (src/dataloaders/datasets/species_dataset.py), exactly.
SPECIES_SPLITS: dict[str, dict[str, list[str]]] = {
    "human": _split(["2", "4", "6", "8", *_nums(14, 22), "X", "Y"]),
    "lemur": _split(["2", "4", "6", "8", *_nums(14, 27), "X", "Y"]),
    "goat": _split(["2", "4", "6", "8", *_nums(14, 29), "X", "Y"]),
    "sheep": _split(["2", "4", "6", "8", *_nums(14, 26), "X", "Y"]),
    "pig": _split(["2", "4", "6", "8", *_nums(14, 18), "X", "Y"]),
    "mouse": _split(["2", "4", "6", "8", *_nums(14, 19), "X"]),
    "gorilla": _split(["2A", "2B", "4", "6", "8", *_nums(14, 22), "X", "Y"]),
    "orangutan": _split(["2A", "2B", "4", "6", "8", *_nums(14, 22), "X", "Y"]),
    "chimpanzee": _split(["2A", "2B", "4", "6", "8", *_nums(14, 22), "X", "Y"]),
    "hippo": _split(["2", "4", "6", "8", *_nums(14, 17), "X"]),
}
