"""All per-dataset metrics -> one table; after a run with failures, which failed and why
(rnnfleet.workflow.after_failures writes the table then)."""

from __future__ import annotations

import csv
import io
import json
import os
import sys

from rnnfleet.atomic_files import atomic_write
from rnnfleet.bars.quality import QUALITY_COLUMNS, quality_flags
from rnnfleet.errors import (
    DATA_ERROR_NOTE,
    ERROR_PREFIX,
    LOG_ROOM_BYTES,
    SETTINGS_ERROR_NOTE,
    last_marked_line,
    room_left,
)
from rnnfleet.heads import head_column, head_column_order
from rnnfleet.scores.multiple_testing import fleet_columns
from rnnfleet.scores.start_verdicts import COMPARE_COLUMNS, init_verdicts

SUMMARY_COLUMNS = (
    "dataset",
    # The test period (preprocess.test_fraction), never seen in training, first: the headline
    # (rnnfleet.train.evaluate.score_test_period).
    "test_skill",  # 1 - test_loss / naive_test_loss
    "test_skill_low",  # its 95% block-bootstrap interval
    "test_skill_high",
    "test_verdict",  # beats / not distinguishable from / worse than the baseline (rnnfleet.scores.test_period)
    # Over the datasets of the table (rnnfleet.scores.multiple_testing, the `fleet:` settings): test_dm_pvalue
    # adjusted for their number, the verdict that holds for the fleet, how many were tested
    "fleet_verdict",
    "fleet_qvalue",
    "fleet_tests",
    "fleet_correction",
    "quality_flags",  # the data-quality flags warned of (rnnfleet.bars.quality): a score of degenerate data is suspect
    # The validation part, which chose the epoch: its skill flatters the model.
    "val_loss",
    "naive_val_loss",
    "val_skill",  # 1 - val_loss / naive_val_loss (the metrics file's `skill`)
    # val_loss, val_skill and test_skill are all the first horizon's point forecast (the median) in `loss`.
    # With heads, the training loss on the validation part, which early stopping compared
    # (`early_stopping` names it, `objective` says what it is): quantiles the pinball loss over
    # every horizon and quantile, several horizons without quantiles the loss averaged over them.
    "val_pinball",
    "naive_val_pinball",
    "val_mean_loss",
    "naive_val_mean_loss",
    "test_loss",
    "naive_test_loss",
    "test_dm_stat",  # Diebold-Mariano test against the baseline (< 0: lower loss) and its p-value
    "test_dm_pvalue",
    "test_hit_rate",  # return targets: sign hit rate, mean net return per trade of trading the sign
    "test_trade_bps",
    "test_sharpe",  # per trade, of non-overlapping trades; deflated for the fleet's size (rnnfleet.scores.multiple_testing)
    "test_sharpe_deflated_prob",  # a probability: that its true Sharpe ratio beats fleet_sharpe_by_luck
    "fleet_sharpe_by_luck",  # the best Sharpe ratio that many datasets with no skill would show
    "test_sharpe_trades",
    "test_trade_skew",
    "test_trade_kurtosis",
    "interval_coverage",  # the forecast interval's nominal coverage (90%, or the nearest quantile pair's)
    "test_coverage",  # how often it held on the test period (rnnfleet.scores.intervals),
    "test_coverage_low",  # its 95% block-bootstrap interval, and the interval's mean width
    "test_coverage_high",
    "test_coverage_binomial_low",  # its 95% binomial interval (independent windows assumed: too narrow where misses cluster)
    "test_coverage_binomial_high",
    "test_interval_width",
    "test_pinball_skill",  # quantile heads: pinball loss against the training part's quantiles, with its interval
    "test_pinball_skill_low",
    "test_pinball_skill_high",
    "test_persistence_skill",  # |return| and volatility targets: skill against the last value
    "test_accuracy",  # direction target
    "test_windows",
    # Walk-forward (evaluate.folds): the folds' test skills (rnnfleet.train.walkforward.folds_summary)
    "folds_skill_mean",
    "folds_skill_sd",
    "folds_positive",  # folds whose test skill is above 0, of folds_scored
    "folds_scored",
    "product",  # which model the model file holds: scored, or refit on all rows (evaluate.production)
    "made",  # how: full (trained from scratch) or update N (the Nth update since, rnnfleet.train.updating)
    "init",  # train.init fleet: where its full fit started (fleet or scratch), and why (rnnfleet.train.fleet_start)
    "init_note",
    "init_pretraining",  # how many datasets the pretraining read of those it served, and why not the others
    "init_pretrained_sha256",  # the pretrained model file its full fit was given (from its lineage)
    *COMPARE_COLUMNS,  # train.compare_init: the fleet's start against scratch
    "model",  # which model, features and target the dataset trained with
    "features",
    "target",
    "baseline",  # the naive forecast naive_val_loss is the loss of (rnnfleet.prep.targets)
    "loss",  # what val_loss and test_loss measure: MSE of the scaled target, or log loss
    "early_stopping",  # the column whose lowest value chose the best epoch: val_loss, val_pinball, val_mean_loss
    "objective",  # the training loss in words (the loss curve's axis)
    "timezone",  # the zone the bars' times were read in: format.timezone, "UTC (assumed)", "UTC (epoch)", ...
    "val_accuracy",  # classification targets only, with the baseline's
    "naive_val_accuracy",
    "best_epoch",
    "epochs_run",
    "train_seconds",
    "cpu_seconds",  # the training's own CPU time and peak memory (not its job client's: runner.device.job_resources)
    "peak_rss_mb",
    "device",
    "rows",
    # The data-quality measures (rnnfleet.bars.quality.QUALITY_COLUMNS), shares of the bars.
    *(column for column in QUALITY_COLUMNS if column != "quality_flags"),
    "status",  # one of STATUSES
    "error",  # for a dataset that is not ok: the step, and the one line its log ends with
)
# The fleet's forecasts (results/forecasts.csv): one row per dataset, the forecast its model
# made at the last bar of its files (rnnfleet.forecast.predict.forecast_at_last_bar), or why there is none.
# The same vocabulary as rnnfleet predict's CSV (rnnfleet.forecast.predict.FORECAST_COLUMNS).
FORECAST_COLUMNS = (
    "dataset",
    "status",
    "time",  # of the bar the forecast is made at, UTC
    "close",  # that bar's close
    "horizon",  # bars ahead
    "target",  # what is forecast: log_return, ...
    "forecast",  # in the target's units
    "forecast_close",  # log_return: the close it implies
    "coverage",  # of its interval (0.9, or the nearest quantile pair's), in the target's units (rnnfleet.scores.intervals)
    "forecast_low",
    "forecast_high",
    "forecast_close_low",  # log_return: the closes the interval implies
    "forecast_close_high",
    "made",
    "test_skill",
    "test_verdict",
    "fleet_verdict",
    "model",  # the model file it came from; empty where there is none (the error says why)
    "error",
)
# Where each forecast column comes from in a dataset's metrics.
FORECAST_METRICS = {
    "time": "forecast_time",
    "close": "forecast_bar_close",
    "horizon": "forecast_horizon",
    "target": "forecast_target",
    "forecast": "forecast",
    "forecast_close": "forecast_close",
    "coverage": "forecast_coverage",
    "forecast_low": "forecast_low",
    "forecast_high": "forecast_high",
    "forecast_close_low": "forecast_close_low",
    "forecast_close_high": "forecast_close_high",
}
# ok; "data error": the input file needs fixing (it fails the same way until it is);
# "settings error": a setting the dataset cannot train with (the same, until it changes);
# "failed": a crash or out of memory, which may pass; "stopped": by a signal;
# "previous model kept": a re-train failed (the error starts with which of the above),
# the model from before is still in place (rnnfleet.workflow.previous_models); "not run": no job of it ran to an end (killed, or left out).
STATUSES = ("ok", "data error", "settings error", "failed", "stopped", "previous model kept", "not run")
SHOWN_FAILURES = 20


# The columns of a setting or target that may be off for the whole fleet: the table leaves
# them out where no row has a value (quantiles, several horizons, walk-forward folds, the
# fleet's head start and its comparison, the targets that have an accuracy or a persistence skill).
OPTIONAL_COLUMNS = frozenset(
    (
        "val_pinball",
        "naive_val_pinball",
        "val_mean_loss",
        "naive_val_mean_loss",
        "test_pinball_skill",
        "test_pinball_skill_low",
        "test_pinball_skill_high",
        "test_persistence_skill",
        "test_accuracy",
        "val_accuracy",
        "naive_val_accuracy",
        "folds_skill_mean",
        "folds_skill_sd",
        "folds_positive",
        "folds_scored",
        "init",
        "init_note",
        "init_pretraining",
        "init_pretrained_sha256",
        *COMPARE_COLUMNS,
    )
)


# Of a model of several horizons (train.horizons) or quantiles, the scores of each horizon
# (rnnfleet.train.evaluate: metrics["horizons"]) become columns <score>_h<horizon> after SUMMARY_COLUMNS.
HORIZON_SCORES = (
    "test_skill",
    "test_skill_low",
    "test_skill_high",
    "test_verdict",
    "test_coverage",
    "test_coverage_low",
    "test_coverage_high",
    "test_interval_width",
    "test_pinball_skill",
)


def horizon_columns(metrics: dict) -> dict:
    """{<score>_h<horizon>: value} of each horizon's HORIZON_SCORES; {} for a single forecast."""
    return {
        f"{score}_h{entry['horizon']}": entry[score]
        for entry in metrics.get("horizons") or []
        for score in HORIZON_SCORES
        if score in entry
    }


def extra_columns(rows: list[dict], known: tuple[str, ...]) -> list[str]:
    """The columns some rows hold beyond `known`, in the order they first appear."""
    return list(dict.fromkeys(column for row in rows for column in row if column not in known))


def metrics_row(
    metrics_path: str | os.PathLike, quality_thresholds: dict | None = None, dataset_quality: dict | None = None
) -> dict:
    """A dataset's row from its metrics file; quality_flags judged with its own thresholds
    from dataset_quality ({dataset: its `quality:`}, the datasets sheet's), else with
    `quality_thresholds` (the run's `quality:` config; None: the defaults)."""
    with open(metrics_path) as handle:
        metrics = json.load(handle)
    return row_of_metrics(metrics, quality_thresholds, dataset_quality)


def row_of_metrics(metrics: dict, quality_thresholds: dict | None = None, dataset_quality: dict | None = None) -> dict:
    """metrics_row of metrics already read (a metrics file's, or those a model file holds)."""
    row = {column: metrics.get(column, "") for column in (*SUMMARY_COLUMNS, *FORECAST_METRICS.values())}
    start = (metrics.get("lineage") or {}).get("init") or {}
    row["init_pretrained_sha256"] = start.get("pretrained_sha256", "")
    row["val_skill"] = metrics.get("skill", "")
    thresholds = (dataset_quality or {}).get(metrics.get("dataset"), quality_thresholds)
    row |= {"quality_flags": quality_flags(metrics, thresholds), "status": "ok", "error": ""}
    return row | horizon_columns(metrics) | {"forecast_heads": metrics.get("forecast_heads") or {}}


def summary_rows(
    metrics_paths: list[str], quality_thresholds: dict | None = None, dataset_quality: dict | None = None
) -> list[dict]:
    rows = (metrics_row(path, quality_thresholds, dataset_quality) for path in metrics_paths)
    return sorted(rows, key=lambda row: row["dataset"])


def with_fleet_columns(rows: list[dict], fleet: dict) -> list[dict]:
    """The rows with the fleet's verdicts over them (`fleet`: the `fleet:` settings)."""
    return init_verdicts(fleet_columns(rows, fleet["method"], fleet["fdr"]), fleet["method"], fleet["fdr"])


def table_columns(rows: list[dict]) -> list[str]:
    """SUMMARY_COLUMNS but those of OPTIONAL_COLUMNS no row fills (a setting that is off
    everywhere), then the horizons' columns any row has (horizon_columns)."""
    known = (*SUMMARY_COLUMNS, *FORECAST_METRICS.values(), "forecast_heads")
    filled = {column for row in rows for column, value in row.items() if value not in ("", None)}
    shown = [column for column in SUMMARY_COLUMNS if column not in OPTIONAL_COLUMNS or column in filled]
    return [*shown, *extra_columns(rows, known)]


def table_text(rows: list[dict]) -> str:
    """The table, in table_columns."""
    text = io.StringIO()
    columns = table_columns(rows)
    writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()


def write_table(rows: list[dict], table_path: str | os.PathLike) -> None:
    with atomic_write(table_path) as handle:
        handle.write(table_text(rows).encode())


def forecast_row(row: dict, model_pattern: str) -> dict:
    """A dataset's row of the forecasts table, from its row of the summary table (with the
    forecast entries of its metrics); the error says why a dataset has no forecast."""
    forecast = {column: row.get(key, "") for column, key in FORECAST_METRICS.items()}
    # The metrics of an earlier rnnfleet lack the target's name and the interval's coverage.
    forecast["target"] = forecast["target"] or str(row.get("target", "")).split(" over ")[0]
    if forecast["forecast"] != "":
        forecast["coverage"] = forecast["coverage"] or (
            row.get("interval_coverage", "") if forecast["forecast_low"] != "" else ""
        )
    heads = {head_column(name): value for name, value in (row.get("forecast_heads") or {}).items()}
    error = row.get("error", "")
    model = model_pattern.format(dataset=row["dataset"])
    has_model = os.path.exists(model)  # a deploy script reads this column: never a file that is not there
    if row.get("status", "ok") == "ok" and forecast["forecast"] == "":
        error = (
            "no forecast: its model or array file is from an earlier rnnfleet (delete the array file to train it again)"
        )
    elif row.get("status", "ok") != "ok":
        error = f"{'no forecast this run' if has_model else 'no model'}: {error}"
    return {
        **{column: row.get(column, "") for column in FORECAST_COLUMNS},
        **forecast,
        "status": row.get("status", "ok"),
        "model": model if has_model else "",
        "error": error,
        **{name: heads[name] for name in sorted(heads, key=head_column_order)},
    }


def write_forecasts(rows: list[dict], model_pattern: str, forecasts_path: str | os.PathLike) -> None:
    """results/forecasts.csv: every dataset of the table, its forecast or why it has none;
    after FORECAST_COLUMNS, the columns of each horizon and quantile of the models that have
    them (rnnfleet.forecast.predict.head_columns)."""
    forecasts = [forecast_row(row, model_pattern) for row in rows]
    text = io.StringIO()
    columns = [*FORECAST_COLUMNS, *extra_columns(forecasts, FORECAST_COLUMNS)]
    writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(forecasts)
    with atomic_write(forecasts_path) as handle:
        handle.write(text.getvalue().encode())


def print_quality_warnings(rows: list[dict]) -> None:
    """One line on stderr for each dataset the table flags for data quality."""
    for row in rows:
        if row.get("quality_flags"):
            print(f"{row['dataset']}: warning: data quality: {row['quality_flags']}", file=sys.stderr)


def write_summary(
    metrics_paths: list[str],
    table_path: str | os.PathLike,
    forecasts_path: str | os.PathLike,
    model_pattern: str,
    fleet: dict,
    quality_thresholds: dict | None = None,
    dataset_quality: dict | None = None,
) -> list[dict]:
    """The summarize job: every dataset trained. model_pattern: the model files' path, with {dataset}."""
    rows = with_fleet_columns(summary_rows(metrics_paths, quality_thresholds, dataset_quality), fleet)
    print_quality_warnings(rows)
    write_table(rows, table_path)
    write_forecasts(rows, model_pattern, forecasts_path)
    return rows


def unwritten_log(log_path: str) -> bool:
    """Whether a step's log is empty in a file system too full for a job's log (less than
    LOG_ROOM_BYTES left, where its job stops at once): its job ran, its lines were lost. (A
    re-train's job frees its old log's room first, so "full" is not "0 bytes left".)"""
    try:
        if os.path.getsize(log_path) != 0:
            return False
    except OSError:
        return False
    room = room_left(os.path.dirname(log_path) or ".")
    return room is not None and room < LOG_ROOM_BYTES


def outcome_row(
    dataset: str,
    step_logs: dict[str, str],
    metrics_path: str,
    quality_thresholds: dict | None = None,
    dataset_quality: dict | None = None,
) -> dict:
    """What became of one dataset, from the last marked line of each step's log (in
    pipeline order) and the metrics file."""
    for step, log_path in step_logs.items():
        line = last_marked_line(log_path)
        if line is not None:
            if not line.startswith(ERROR_PREFIX):
                status = "stopped"
            elif DATA_ERROR_NOTE in line:
                status, line = "data error", line.replace(DATA_ERROR_NOTE, "")
            elif SETTINGS_ERROR_NOTE in line:
                status, line = "settings error", line.replace(SETTINGS_ERROR_NOTE, "")
            else:
                status = "failed"
            return {"dataset": dataset, "status": status, "error": f"{step}: {line.split(': ', 1)[1]}"}
    try:
        return metrics_row(metrics_path, quality_thresholds, dataset_quality)
    except FileNotFoundError:
        for step, log_path in step_logs.items():
            if unwritten_log(log_path):
                error = f"{step}: its log {log_path} could not be written (no space left in its file system)"
                return {"dataset": dataset, "status": "failed", "error": error}
        return {"dataset": dataset, "status": "not run", "error": ""}
    except (OSError, ValueError) as error:
        return {"dataset": dataset, "status": "failed", "error": f"summary: {metrics_path} is unreadable ({error})"}


def failure_report(not_ok: list[dict], total: int, table_path: str) -> str:
    lines = [f"rnnfleet: {len(not_ok)} of {total} datasets are not done; {table_path} has a row for every dataset:"]
    lines += [f"  {row['dataset']}: {row['status']}: {row['error']}" for row in not_ok[:SHOWN_FAILURES]]
    if len(not_ok) > SHOWN_FAILURES:
        lines.append(f"  ... and {len(not_ok) - SHOWN_FAILURES} more (see {table_path})")

    def count(status: str) -> int:  # "previous model kept" rows start their error with what happened
        return sum(status in (row["status"], row["error"].split(": ", 1)[0]) for row in not_ok)

    if count("data error"):
        lines.append(
            f"{count('data error')} of them are data errors: those files need fixing (or removing) before they train."
        )
    if count("settings error"):
        lines.append(
            f"{count('settings error')} of them are settings errors: the settings each names need changing before it trains."
        )
    lines.append("Run the same command again to retry what is not done: finished models are kept.")
    return "\n".join(lines)


def run_summary(rows: list[dict], trained_now: set[str], table_path: str, forecasts_path: str) -> str:
    """The line that ends a run that re-wrote the table: how many of its datasets were trained
    from scratch or updated in this run, how many were left as they were, and where the table
    and the forecasts are (trained_now: the datasets whose metrics this run wrote)."""
    now = [row for row in rows if row["dataset"] in trained_now]
    made = [str(row.get("made", "")) for row in now]
    full = sum(label == "full" for label in made)
    # train.init fleet: full fits that started from the fleet's pretrained model (rnnfleet.train.pretraining)
    fleet = sum(str(row.get("made", "")) == "full" and row.get("init") == "fleet" for row in now)
    started = f"{full - fleet} trained from scratch" + (f", {fleet} from the fleet's pretrained model" if fleet else "")
    coverage = next((row["init_pretraining"] for row in now if row.get("init") and row.get("init_pretraining")), "")
    if coverage:
        started += f" ({coverage})"
    forecasts = sum(row.get("forecast", "") != "" for row in rows)
    return (
        f"rnnfleet: {len(rows)} dataset(s): {started}, {len(made) - full} updated, "
        f"{len(rows) - len(made)} unchanged; table {table_path}; {forecasts} forecast(s) in {forecasts_path}"
    )


def print_run_summary(table_path: str, forecasts_path: str, metrics_pattern: str, started: float) -> None:
    """run_summary on stderr when this run (started at `started`, time.time()) wrote the table."""
    try:
        if os.stat(table_path).st_mtime < started:
            return
        with open(table_path, encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        with open(forecasts_path, encoding="utf-8") as handle:
            forecasts = {row["dataset"]: row["forecast"] for row in csv.DictReader(handle)}
    except (OSError, KeyError, csv.Error):
        return  # a summary line never fails a run that succeeded
    for row in rows:
        row["forecast"] = forecasts.get(row["dataset"], "")
    trained_now = datasets_written_since(rows, metrics_pattern, started)
    print(run_summary(rows, trained_now, table_path, forecasts_path), file=sys.stderr)


def datasets_written_since(rows: list[dict], metrics_pattern: str, started: float) -> set[str]:
    """The datasets of the table's rows whose metrics file (metrics_pattern, with {dataset})
    was written at or after `started` (time.time()): those trained or updated by this run."""
    written = set()
    for row in rows:
        try:
            if os.stat(metrics_pattern.format(dataset=row["dataset"])).st_mtime >= started:
                written.add(row["dataset"])
        except OSError:
            pass
    return written
