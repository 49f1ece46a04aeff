"""Unpickling that runs no code: only the globals a pickled numpy data file needs are admitted.

A pickle is a program; `pickle.load` runs whatever callable it names (`os.system`, `exec`, ...).
Data files such as the CIFAR-10 python batches hold only dicts, lists, tuples, bytes / str,
numbers and numpy arrays. Of those, only arrays, dtypes and numpy scalars (and, in pickles
of protocol 0-2, bytes) are built by calling a global; every other global is refused
before anything is called, so a payload never runs.
"""

from __future__ import annotations

import _compat_pickle
import codecs
import pickle
from typing import BinaryIO

import numpy as np

from seqssm.errors import UnsafePickleError


def _latin1_encode(text: str, encoding: str = "utf-8") -> bytes:
    # Python 3 pickles bytes before protocol 3 as `_codecs.encode(text, "latin1")`; nothing else is admitted.
    if encoding not in ("latin1", "latin-1"):
        raise UnsafePickleError(f"_codecs.encode with encoding {encoding!r}")
    return codecs.encode(text, "latin1")


def _empty_bytes() -> bytes:
    # ... and an empty bytes as a call to `bytes()` with no argument (which cannot allocate anything).
    return b""


def _numpy_helpers() -> dict[str, object]:
    # Taken from numpy's own reductions, so they are right for the installed numpy whatever module holds them.
    return {"_reconstruct": np.zeros(1).__reduce__()[0], "scalar": np.int64(0).__reduce__()[0],
            "_frombuffer": np.zeros(1).__reduce_ex__(5)[0]}


def _allowed() -> dict[tuple[str, str], object]:
    helpers = _numpy_helpers()
    allowed: dict[tuple[str, str], object] = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
                                              ("_codecs", "encode"): _latin1_encode,
                                              ("builtins", "bytes"): _empty_bytes}
    # numpy 1 wrote `numpy.core.*`, numpy 2 writes `numpy._core.*`; files of both exist.
    for package in ("numpy.core", "numpy._core"):
        allowed[(f"{package}.multiarray", "_reconstruct")] = helpers["_reconstruct"]
        allowed[(f"{package}.multiarray", "scalar")] = helpers["scalar"]
        allowed[(f"{package}.numeric", "_frombuffer")] = helpers["_frombuffer"]
    return allowed


ALLOWED = _allowed()


class DataUnpickler(pickle.Unpickler):
    """`pickle.Unpickler` that admits only the globals in ALLOWED; any other raises UnsafePickleError."""

    def find_class(self, module: str, name: str):
        # Python 2 names (`__builtin__`, `commands`, ...) as pickle itself reads them, so errors name today's global
        module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        try:
            return ALLOWED[(module, name)]
        except KeyError:
            raise UnsafePickleError(f"{module}.{name}") from None

    def persistent_load(self, pid):
        raise UnsafePickleError(f"persistent id {pid!r}")


def load_data_pickle(file: BinaryIO, encoding: str = "bytes"):
    """Unpickle a data file from an open binary `file` without running code (`encoding` as `pickle.load`'s,
    "bytes" for Python 2 files). Raises UnsafePickleError naming the first disallowed global."""
    return DataUnpickler(file, encoding=encoding).load()
