"""Readers of labelled text tables (parquet / CSV / TSV / Arrow) shared by the text datasets."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from ..errors import DataFormatError
from ..io import parse_int_label


def read_text_table(path: str | Path, n_classes: int = 2) -> tuple[list[str], list[int]]:
    """(texts, labels) from a parquet, Arrow, CSV or TSV file with columns `text` and `label`."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".arrow"):
        import pyarrow.parquet as pq
        import pyarrow as pa

        if suffix == ".parquet":
            table = pq.read_table(path)
        else:
            with pa.memory_map(str(path)) as source:
                try:
                    table = pa.ipc.open_stream(source).read_all()
                except pa.ArrowInvalid:
                    table = pa.ipc.open_file(source).read_all()
        for col in ("text", "label"):
            if col not in table.column_names:
                raise DataFormatError(f"{path}: no column {col!r} (columns: {table.column_names})")
        labels = table.column("label").to_pylist()
        bad = [i for i, y in enumerate(labels) if y is None or not 0 <= int(y) < n_classes]
        if bad:
            raise DataFormatError(f"{path}: row {bad[0]} has label {labels[bad[0]]!r}, expected 0..{n_classes - 1}")
        return table.column("text").to_pylist(), [int(y) for y in labels]
    if suffix not in (".csv", ".tsv"):
        raise DataFormatError(f"{path}: unsupported table format {suffix!r} (use .parquet, .csv or .tsv)")
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    texts, labels = [], []
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter="\t" if suffix == ".tsv" else ",")
        if not reader.fieldnames or not {"text", "label"} <= set(reader.fieldnames):
            raise DataFormatError(f"{path}:1: header must name columns 'text' and 'label', got {reader.fieldnames}")
        for row in reader:
            try:
                if row["text"] is None or row["label"] is None or None in row:
                    raise ValueError("wrong number of fields")
                labels.append(parse_int_label(row["label"], n_classes))
            except ValueError as e:
                raise DataFormatError(f"{path}:{reader.line_num}: malformed row ({e})") from None
            texts.append(row["text"])
    return texts, labels
