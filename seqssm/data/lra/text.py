"""Readers of labelled text tables (parquet / CSV / TSV / Arrow) shared by the text datasets."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from seqssm.errors import DataFormatError

from ..io import check_labels, not_utf8, parse_int_label

FIX = "fix the file or fetch it again"


def read_text_table(path: str | Path, n_classes: int = 2) -> tuple[list[str], list[int]]:
    """(texts, labels) from a parquet, Arrow, CSV or TSV file with columns `text` and `label`.

    Every row needs a text and an integer label in [0, n_classes); the first that has not,
    or a file without rows, raises DataFormatError naming the file and the row.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".arrow"):
        texts, labels = _read_arrow_table(path, n_classes)
    elif suffix in (".csv", ".tsv"):
        texts, labels = _read_delimited(path, n_classes)
    else:
        raise DataFormatError(f"{path}: unsupported table format {suffix!r} (use .parquet, .csv or .tsv)")
    if not texts:
        raise DataFormatError(f"{path}: no rows (the table is empty); {FIX}")
    return texts, labels


def _read_arrow_table(path: Path, n_classes: int) -> tuple[list[str], list[int]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    kind = "parquet" if path.suffix.lower() == ".parquet" else "Arrow"
    try:
        if kind == "parquet":
            table = pq.read_table(path)
        else:
            with pa.memory_map(str(path)) as source:
                try:
                    table = pa.ipc.open_stream(source).read_all()
                except pa.ArrowInvalid:
                    source.seek(0)
                    table = pa.ipc.open_file(source).read_all()
    except (pa.ArrowException, OSError) as e:
        raise DataFormatError(f"{path}: cannot read this {kind} file ({' '.join(str(e).split())}): it is truncated "
                              f"or not a {kind} file; fetch it again") from None
    for col in ("text", "label"):
        if col not in table.column_names:
            raise DataFormatError(f"{path}: no column {col!r} (columns: {table.column_names})")
    text = table.column("text")
    if not (pa.types.is_string(text.type) or pa.types.is_large_string(text.type) or pa.types.is_null(text.type)):
        raise DataFormatError(f"{path}: column 'text' holds {text.type}, expected strings; {FIX}")
    texts = text.to_pylist()
    if text.null_count:
        row = next(i for i, t in enumerate(texts) if t is None)
        raise DataFormatError(f"{path}: row {row} (counting from 0) has no text (null), {text.null_count} such "
                              f"row(s) in all; {FIX}")
    labels = check_labels(table.column("label").to_pylist(), n_classes, path, item="row")
    return texts, labels.tolist()


def _read_delimited(path: Path, n_classes: int) -> tuple[list[str], list[int]]:
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    texts, labels = [], []
    try:
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f, delimiter="\t" if path.suffix.lower() == ".tsv" else ",")
            if not reader.fieldnames or not {"text", "label"} <= set(reader.fieldnames):
                raise DataFormatError(f"{path}:1: header must name columns 'text' and 'label', got {reader.fieldnames}")
            for row in reader:
                try:
                    if row["text"] is None or row["label"] is None or None in row:
                        raise ValueError("wrong number of fields")
                    labels.append(parse_int_label(row["label"], n_classes))
                except ValueError as e:
                    raise DataFormatError(f"{path}:{reader.line_num}: malformed row ({e}); {FIX}") from None
                texts.append(row["text"])
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    return texts, labels
