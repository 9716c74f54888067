# Copyright the briskbert authors. Licensed under the Apache License, Version 2.0.
"""Torch-free checks and flags for scored-pair files (``sentence1``, ``sentence2``, ``score``): the commands look
at a file's columns before they import torch."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from briskbert.errors import UserError

SCORED_PAIR_COLUMNS = ("sentence1", "sentence2", "score")


def file_columns(path: str) -> list[str]:
    """The header of a TSV/CSV file, or the keys of the first row of JSON lines ([] when there is none)."""
    with open(path, encoding="utf-8", newline="") as handle:
        first = next((line for line in handle if line.strip()), "")
    if path.endswith((".tsv", ".csv")):
        delimiter = "\t" if path.endswith(".tsv") else ","
        return next(csv.reader([first], delimiter=delimiter, quoting=csv.QUOTE_NONE), [])
    try:
        row = json.loads(first)
    except json.JSONDecodeError:
        return []
    return list(row) if isinstance(row, dict) else []


def has_scored_pair_columns(path: str) -> bool:
    return all(column in file_columns(path) for column in SCORED_PAIR_COLUMNS)


def check_scored_pair_file(path: str, flag: str) -> None:
    """A :class:`UserError` naming ``flag`` unless ``path`` is a TSV, CSV or JSON lines file of scored pairs."""
    if not Path(path).is_file():
        raise UserError(f"{flag} {path} does not exist.")
    columns = file_columns(path)
    missing = [column for column in SCORED_PAIR_COLUMNS if column not in columns]
    if missing:
        raise UserError(
            f"{flag} {path} lacks the column(s) {', '.join(missing)}: give a TSV, CSV or JSON lines file with "
            f"{', '.join(SCORED_PAIR_COLUMNS)} (found {', '.join(columns) or 'no header'})."
        )
