"""A run with failed datasets still delivers everything for the datasets that succeeded.

Snakemake skips the summarize and plots jobs when any dataset failed (their inputs include
every dataset's metrics). The run's error handler calls write_results_after_failures,
which promises:

- the summary table with a row for every dataset: its metrics, or its status (see
  summary.STATUSES: a data error to fix apart from a failure that may pass, or "previous
  model kept") and the one line its log ended with;
- the figures the report shows, for the datasets that succeeded: the table's HTML page
  (listing the datasets that are not done), the skill overview and a loss curve each, so
  that `snakemake --report` works after such a run;
- when nothing changed since the last such run (the same datasets failed again the same
  way), nothing is rewritten or redrawn, and only new or newer loss curves are ever drawn;
- Snakemake's own summarize and plots jobs take over as soon as every dataset succeeds:
  through the new metrics files of the datasets that were retried, or, where a dataset
  that was not done is gone from data_dir (or has metrics now: its forecast had failed),
  through the list of datasets not done (ResultPaths.not_done), which then becomes an
  input of summarize (not_done_list_if_stale). Otherwise `snakemake -n` names exactly the
  retried datasets' metrics as summarize's reason.

The work is one pass over the datasets' metrics and logs, done only after a run with
failures; at parse time one small file is read (the list, when there is one).
"""

from __future__ import annotations

import csv
import io
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rnnfleet.atomic_files import atomic_write
from rnnfleet.errors import UserError
from rnnfleet.faults import pause_point
from rnnfleet.report.charts import draw_coverage_overview, draw_skill_overview
from rnnfleet.report.loss_curves import refresh_loss_curves
from rnnfleet.report.start_page import write_start_page
from rnnfleet.report.summary import (
    failure_report,
    metrics_row,
    outcome_row,
    print_quality_warnings,
    row_of_metrics,
    table_columns,
    table_text,
    with_fleet_columns,
    write_forecasts,
    write_table,
)
from rnnfleet.report.table_page import write_table_html
from rnnfleet.workflow.previous_models import KEPT_STATUS


@dataclass(frozen=True)
class ResultPaths:
    """Where the summarize and plots rules write (the same paths)."""

    table: str
    table_html: str
    skill_plot: str
    coverage_plot: str
    loss_curves: str
    not_done: str  # the datasets not done, one a line, written with the table
    start_template: str  # the report's start page: its template, and the page with the verdicts
    start_page: str
    forecasts: str  # the fleet's forecasts, one row per dataset

    def published(self) -> list[str]:
        """The outputs of the summarize and plots rules."""
        return [self.table, self.forecasts, self.table_html, self.skill_plot, self.coverage_plot, self.start_page]


def read_text_or_none(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def kept_model_scores(
    metrics_path: str, model_path: str, quality_thresholds: dict | None, dataset_quality: dict | None
) -> dict:
    """The table's columns of a kept model: from its metrics file where one is there (a step
    before its re-train failed, so the file is the kept model's), else from the metrics the
    model file holds (a failed re-train's metrics file is gone); {} when neither can be read."""
    try:
        return metrics_row(metrics_path, quality_thresholds, dataset_quality)
    except FileNotFoundError:
        pass
    except (OSError, ValueError):
        return {}
    from rnnfleet.train.modelfile import ModelFileError, load_checkpoint

    try:
        return row_of_metrics(load_checkpoint(model_path)["metrics"], quality_thresholds, dataset_quality)
    except (ModelFileError, KeyError, TypeError):
        return {}


def write_results_after_failures(
    datasets: list[str],
    step_log_patterns: dict[str, str],
    metrics_pattern: str,
    model_pattern: str,
    paths: ResultPaths,
    fleet: dict,
    quality_thresholds: dict | None = None,
    dataset_quality: dict | None = None,
    unpublished: Callable[[list[str]], None] | None = None,
) -> list[dict]:
    """See the module doc. unpublished: called with every path of the table and figures
    when one of them could not be written (what was there before stays): the next run must
    write them again. The patterns hold `{dataset}`. A dataset that is not done but has
    a model (put back by previous_models, or untouched because an earlier step failed) is
    marked "previous model kept", its error starting with what happened (e.g. "data error: "),
    with the kept model's scores (kept_model_scores) and loss curve.
    Tells the user on stderr which datasets are not done and returns their rows."""
    metrics_paths = {dataset: metrics_pattern.format(dataset=dataset) for dataset in datasets}
    rows = []
    for dataset in sorted(datasets):
        row = outcome_row(
            dataset,
            {step: pattern.format(dataset=dataset) for step, pattern in step_log_patterns.items()},
            metrics_paths[dataset],
            quality_thresholds,
            dataset_quality,
        )
        model_path = model_pattern.format(dataset=dataset)
        if row["status"] not in ("ok", "not run") and os.path.exists(model_path):
            scores = kept_model_scores(metrics_paths[dataset], model_path, quality_thresholds, dataset_quality)
            row = {**scores, "dataset": dataset, "status": KEPT_STATUS, "error": f"{row['status']}: {row['error']}"}
        rows.append(row)
    rows = with_fleet_columns(rows, fleet)
    not_ok = [row for row in rows if row["status"] != "ok"]
    text = table_text(rows)
    try:
        unchanged = read_text_or_none(paths.table) == text and all(
            os.path.exists(path)
            for path in (paths.table_html, paths.skill_plot, paths.coverage_plot, paths.loss_curves, paths.forecasts)
        )
        if not unchanged:
            write_table(rows, paths.table)
            write_forecasts(rows, model_pattern, paths.forecasts)
            ok_metrics = [metrics_paths[row["dataset"]] for row in rows if row["status"] == "ok"]
            # A kept model keeps its curve: redrawn from its metrics file where that is its
            # (the new bars failed before training), else left as it was drawn.
            kept = [row["dataset"] for row in rows if row["status"] == KEPT_STATUS]
            ok_metrics += [metrics_paths[name] for name in kept if os.path.exists(metrics_paths[name])]
            as_read_back = list(csv.DictReader(io.StringIO(text)))  # what the plots job sees
            write_table_html(as_read_back, table_columns(rows), paths.table_html)
            draw_skill_overview(as_read_back, paths.skill_plot)
            draw_coverage_overview(as_read_back, paths.coverage_plot)
            write_start_page(paths.start_template, as_read_back, paths.start_page)
            refresh_loss_curves(ok_metrics, paths.loss_curves, keep=kept)
            with atomic_write(paths.not_done) as handle:  # written after the table: newer than it
                handle.write("".join(f"{row['dataset']}\n" for row in not_ok).encode())
    except UserError as error:  # a WriteError: disk full, read-only folder, ...
        print(f"rnnfleet: ERROR: {error}", file=sys.stderr)
        if unpublished is not None:
            unpublished(paths.published())
    pause_point("after-failures")
    print_quality_warnings(rows)
    print(failure_report(not_ok, len(rows), paths.table), file=sys.stderr)
    return not_ok


def not_done_list_if_stale(not_done_path: str, datasets: Iterable[str], metrics_pattern: str) -> list[str]:
    """[not_done_path] when the table written after failures is out of date although no
    dataset will train again: a dataset it lists is gone from `datasets` or has metrics now.
    [] otherwise (also when there is no list). Reads that one file, stats its datasets."""
    listed = read_text_or_none(not_done_path)
    if not listed:
        return []
    present = set(datasets)
    for dataset in listed.split():
        if dataset not in present or os.path.exists(metrics_pattern.format(dataset=dataset)):
            return [not_done_path]
    return []


def drop_not_done_list_if_replaced(not_done_path: str, table_path: str) -> None:
    """After a successful run: the list goes once summarize has rewritten the table (a run
    of other targets leaves it)."""
    try:
        if os.stat(table_path).st_mtime > os.stat(not_done_path).st_mtime:
            os.unlink(not_done_path)
    except FileNotFoundError:
        pass
