"""All per-dataset metrics -> one table."""

from __future__ import annotations

import csv
import io
import json
import os

from rnnfleet.checkpoint import atomic_write

SUMMARY_COLUMNS = (
    "dataset",
    "val_loss",
    "naive_val_loss",
    "skill",
    "best_epoch",
    "epochs_run",
    "train_seconds",
    "device",
    "rows",
)


def summary_rows(metrics_paths: list[str]) -> list[dict]:
    rows = []
    for path in metrics_paths:
        with open(path) as handle:
            metrics = json.load(handle)
        rows.append({column: metrics.get(column, "") for column in SUMMARY_COLUMNS})
    return sorted(rows, key=lambda row: row["dataset"])


def write_summary(metrics_paths: list[str], table_path: str | os.PathLike) -> list[dict]:
    rows = summary_rows(metrics_paths)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=SUMMARY_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    with atomic_write(table_path) as handle:
        handle.write(text.getvalue().encode())
    return rows
