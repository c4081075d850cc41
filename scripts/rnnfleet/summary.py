"""All per-dataset metrics -> one table; after a run with failures, which failed and why."""

from __future__ import annotations

import csv
import io
import json
import os
import sys

from rnnfleet.checkpoint import atomic_write
from rnnfleet.errors import ERROR_PREFIX, last_marked_line

SUMMARY_COLUMNS = (
    "dataset",
    "val_loss",
    "naive_val_loss",
    "skill",  # 1 - val_loss / naive_val_loss
    "model",  # which model, features and target the dataset trained with
    "features",
    "target",
    "baseline",  # the naive forecast naive_val_loss is the loss of (rnnfleet.targets)
    "loss",  # what val_loss measures: MSE of the scaled target, or log loss
    "val_accuracy",  # classification targets only, with the baseline's
    "naive_val_accuracy",
    "best_epoch",
    "epochs_run",
    "train_seconds",
    "device",
    "rows",
    "status",  # ok, failed, stopped (by a signal) or not run
    "error",  # for a dataset that is not ok: the step, and the one line its log ends with
)
SHOWN_FAILURES = 20


def metrics_row(metrics_path: str | os.PathLike) -> dict:
    with open(metrics_path) as handle:
        metrics = json.load(handle)
    return {**{column: metrics.get(column, "") for column in SUMMARY_COLUMNS}, "status": "ok", "error": ""}


def summary_rows(metrics_paths: list[str]) -> list[dict]:
    return sorted((metrics_row(path) for path in metrics_paths), key=lambda row: row["dataset"])


def write_table(rows: list[dict], table_path: str | os.PathLike) -> None:
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=SUMMARY_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    with atomic_write(table_path) as handle:
        handle.write(text.getvalue().encode())


def write_summary(metrics_paths: list[str], table_path: str | os.PathLike) -> list[dict]:
    """The summarize job: every dataset trained."""
    rows = summary_rows(metrics_paths)
    write_table(rows, table_path)
    return rows


def outcome_row(dataset: str, step_logs: dict[str, str], metrics_path: str) -> dict:
    """What became of one dataset, from the last marked line of each step's log (in
    pipeline order) and the metrics file."""
    for step, log_path in step_logs.items():
        line = last_marked_line(log_path)
        if line is not None:
            status = "failed" if line.startswith(ERROR_PREFIX) else "stopped"
            return {"dataset": dataset, "status": status, "error": f"{step}: {line.split(': ', 1)[1]}"}
    try:
        return metrics_row(metrics_path)
    except FileNotFoundError:
        return {"dataset": dataset, "status": "not run", "error": ""}
    except (OSError, ValueError) as error:
        return {"dataset": dataset, "status": "failed", "error": f"summary: {metrics_path} is unreadable ({error})"}


def write_summary_after_failures(
    datasets: list[str], step_log_patterns: dict[str, str], metrics_pattern: str, table_path: str
) -> list[dict]:
    """Called when a run ended with failed or stopped jobs (Snakemake then skips the
    summarize job): write the table with a row for every dataset, tell the user on stderr
    which datasets are not ok, and return their rows.

    The patterns hold `{dataset}`. The table is back-dated to just before its oldest
    metrics file, so that Snakemake re-writes it with the summarize job as soon as every
    dataset succeeds, even if none of them needs training again.
    """
    metrics_paths = {dataset: metrics_pattern.format(dataset=dataset) for dataset in datasets}
    rows = [
        outcome_row(
            dataset,
            {step: pattern.format(dataset=dataset) for step, pattern in step_log_patterns.items()},
            metrics_paths[dataset],
        )
        for dataset in sorted(datasets)
    ]
    write_table(rows, table_path)
    metrics_mtimes = [os.stat(path).st_mtime for path in metrics_paths.values() if os.path.exists(path)]
    if metrics_mtimes:
        os.utime(table_path, (os.stat(table_path).st_atime, min(metrics_mtimes) - 1))
    not_ok = [row for row in rows if row["status"] != "ok"]
    print(failure_report(not_ok, len(rows), table_path), file=sys.stderr)
    return not_ok


def failure_report(not_ok: list[dict], total: int, table_path: str) -> str:
    lines = [f"rnnfleet: {len(not_ok)} of {total} datasets are not done; {table_path} has a row for every dataset:"]
    lines += [f"  {row['dataset']}: {row['status']}: {row['error']}" for row in not_ok[:SHOWN_FAILURES]]
    if len(not_ok) > SHOWN_FAILURES:
        lines.append(f"  ... and {len(not_ok) - SHOWN_FAILURES} more (see {table_path})")
    lines.append("Fix or remove what failed and run the same command again: finished models are kept.")
    return "\n".join(lines)
