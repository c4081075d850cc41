"""The fleet's history in MLflow (`tracking.mlflow`; docs/tracking.md), logged once per run by
the run itself (its success and error handlers), never by a job.

What it promises:
- A run that trained or updated at least one dataset becomes one MLflow run in the experiment
  `tracking.mlflow.experiment` (default: the name of the folder the run works in): its
  parameters (the effective configuration, dotted keys), the fleet's metrics (datasets trained
  from scratch, updated, unchanged, not done; the test skills' spread; how many beat the
  baseline, before and after the fleet correction; with train.init fleet where the full fits
  started and the fleet's start's verdict, and the pretrained model's digest, cutoff and
  scores), tags (outcome, folder, rnnfleet's version) and as artifacts the summary table (one row per dataset), the forecasts, the
  report's table and skill chart. A run that trained nothing logs nothing.
- With `per_dataset_runs`, each dataset this run trained or updated gets a child run: its row
  of the table as parameters and metrics, its loss curves as metric histories (step = epoch),
  and its model file where `log_models` is on. Its cells that are words (verdicts, quality
  flags, the median step, what it is made of) are parameters, its finite numbers metrics:
  no cell is logged as a NaN metric.
- Tracking never fails, stops or slows the fleet for long: any failure is one warning line
  naming the store and what was not logged; requests to a server are not retried. MLflow's
  import and a new store's creation (seconds) start with the run (load_mlflow_early), so
  that its end waits only for the logging itself.
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rnnfleet.bars.formats import is_number
from rnnfleet.errors import one_line
from rnnfleet.report.summary import datasets_written_since
from rnnfleet.scores.multiple_testing import BEATS_AFTER, as_number
from rnnfleet.scores.start_verdicts import FLEET_START_BETTER, FLEET_START_WORSE, rows_start_verdict
from rnnfleet.scores.test_period import BEATS

# MLflow's limits on one parameter's value (characters); longer values are cut and marked.
PARAM_VALUE_LIMIT = 6000
# The table's columns that are always words, even where a cell reads as a number (a model
# named "1", a timezone): logged as a child run's parameters with every other cell that is not a number.
WORD_COLUMNS = (
    "made",
    "model",
    "features",
    "target",
    "baseline",
    "loss",
    "timezone",
    "device",
    "status",
    "product",
    "init",  # train.init fleet: where its full fit started, and the pretrained file's digest (hex may read as a number)
    "init_pretrained_sha256",
)

# The experiment's tag that makes MLflow's UI (3.x) open it on its runs, the classic view of
# model training, not on the GenAI view of traces (a kind the user set is left alone).
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")


# The thread importing MLflow while the run's jobs work (load_mlflow_early), if one was started.
_LOADING: list[threading.Thread] = []


def load_mlflow_early(settings: dict) -> None:
    """With tracking on, import MLflow and open its store (a new SQLite store is created and
    migrated then) in a background thread now; log_run_to_mlflow waits for it. Any error is
    left for log_run_to_mlflow to meet again, where it becomes the warning."""
    if settings["enabled"] and not _LOADING:

        def load() -> None:
            with contextlib.suppress(Exception):
                from mlflow.tracking import MlflowClient

                with quick_and_quiet():
                    MlflowClient(tracking_uri=settings["tracking_uri"]).search_experiments(max_results=1)

        _LOADING.append(threading.Thread(target=load, name="rnnfleet-mlflow-import", daemon=True))
        _LOADING[0].start()


@dataclass(frozen=True)
class TrackedPaths:
    table: str  # results/metrics.csv
    forecasts: str
    table_html: str
    skill_plot: str
    metrics: str  # the per-dataset metrics files, with {dataset}
    models: str  # the model files, with {dataset}
    pretrained_lineage: str = ""  # train.init fleet: the fleet's pretrained model's lineage JSON


def flattened(settings: dict, prefix: str = "") -> dict[str, str]:
    """{dotted.key: value as text} of a nested configuration (lists as JSON)."""
    flat = {}
    for key, value in settings.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat |= flattened(value, f"{name}.")
        else:
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            flat[name] = text if len(text) <= PARAM_VALUE_LIMIT else text[: PARAM_VALUE_LIMIT - 3] + "..."
    return flat


def fleet_metrics(rows: list[dict], trained_now: set[str]) -> dict[str, float]:
    """The fleet's numbers of one run, from its summary table's rows."""
    made = [row.get("made", "") for row in rows if row["dataset"] in trained_now]
    skills = sorted(skill for row in rows if math.isfinite(skill := as_number(row.get("test_skill"))))
    metrics = {
        "datasets": len(rows),
        "trained_from_scratch": sum(label == "full" for label in made),
        "updated": sum(label != "full" for label in made),
        "unchanged": len(rows) - len(made),
        "not_done": sum(row.get("status") != "ok" for row in rows),
        "flagged": sum(bool(row.get("quality_flags")) for row in rows),
        "scored": len(skills),
        "beats_baseline": sum(row.get("test_verdict") == BEATS for row in rows),
        "beats_baseline_after_fleet_correction": sum(row.get("fleet_verdict") == BEATS_AFTER for row in rows),
    }
    if any(row.get("init") for row in rows):  # train.init fleet: where the full fits started, and the verdict
        metrics |= {
            "init_fleet": sum(row.get("init") == "fleet" for row in rows),
            "init_scratch": sum(row.get("init") == "scratch" for row in rows),
            "init_compared": sum(bool(row.get("init_verdict")) for row in rows),
            "init_better_after_fleet_correction": sum(row.get("init_verdict") == FLEET_START_BETTER for row in rows),
            "init_worse_after_fleet_correction": sum(row.get("init_verdict") == FLEET_START_WORSE for row in rows),
        }
        if verdict := rows_start_verdict(rows):  # the fleet's verdict: a sign test across datasets
            metrics |= {
                "init_start_better": verdict.better,
                "init_start_worse": verdict.worse,
                "init_start_mean_difference": verdict.mean,
                "init_start_sign_pvalue": verdict.p_value,
            }
    if skills:
        metrics |= {
            "test_skill_mean": sum(skills) / len(skills),
            "test_skill_median": quantile(skills, 0.5),
            "test_skill_p10": quantile(skills, 0.1),
            "test_skill_p90": quantile(skills, 0.9),
            "test_skill_min": skills[0],
            "test_skill_max": skills[-1],
        }
    return {key: float(value) for key, value in metrics.items()}


def pretrained_facts(lineage_path: str) -> tuple[dict[str, str], dict[str, float]]:
    """(parameters, metrics) of the fleet's pretrained model from its lineage file: its digest,
    cutoff and the datasets it left out as parameters; how many datasets it served, trained on
    and left out, and its validation scores, as metrics. ({}, {}) without a readable file."""
    try:
        with open(lineage_path, encoding="utf-8") as handle:
            lineage = json.load(handle)
    except (OSError, ValueError):
        return {}, {}
    params = {
        "pretrained.sha256": str(lineage.get("sha256", "")),
        "pretrained.cutoff": str(lineage.get("cutoff", "")),
        "pretrained.left_out": json.dumps(sorted(lineage.get("left_out") or {})),
    }
    metrics = {
        f"pretrained_{key}": float(len(lineage.get(key) or ())) for key in ("datasets", "trained_on", "left_out")
    }
    for key, value in (lineage.get("scores") or {}).items():
        if math.isfinite(number := as_number(value)):
            metrics[f"pretrained_{key}"] = number
    return {key: value for key, value in params.items() if value}, metrics


def quantile(ordered: list[float], level: float) -> float:
    """Linear interpolation between order statistics (numpy's default), of a sorted list."""
    position = level * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def dataset_metrics(row: dict) -> dict[str, float]:
    """A dataset's row of the table: its cells that are finite numbers."""
    numbers = {}
    for key, value in row.items():
        if key not in WORD_COLUMNS and key != "dataset" and math.isfinite(number := as_number(value)):
            numbers[key] = number
    return numbers


def dataset_words(row: dict) -> dict[str, str]:
    """A dataset's row of the table: its cells that are words (the WORD_COLUMNS, verdicts,
    quality flags, the median step, an error), as parameters: cut to MLflow's limit. Empty
    cells and numbers (even NaN, a number missing) are not words."""
    words = {}
    for key, value in row.items():
        if key != "dataset" and value and (key in WORD_COLUMNS or not is_number(value)):
            words[key] = value if len(value) <= PARAM_VALUE_LIMIT else value[: PARAM_VALUE_LIMIT - 3] + "..."
    return words


def loss_histories(metrics_path: str) -> dict[str, list[tuple[int, float]]]:
    """{"epoch_train_loss": [(epoch, loss), ...], "epoch_val_loss": [...]} from a dataset's
    metrics file, each named as its history names the training loss (epoch_train_pinball,
    epoch_val_pinball for quantile heads, rnnfleet.train.loop.objective_key)."""
    try:
        with open(metrics_path, encoding="utf-8") as handle:
            history = json.load(handle).get("history", [])
    except (OSError, ValueError):
        return {}
    curves: dict[str, list[tuple[int, float]]] = {}
    for entry in history:
        for key in entry:
            if key.startswith(("train_", "val_")) and math.isfinite(value := as_number(entry[key])):
                curves.setdefault(f"epoch_{key}", []).append((int(entry["epoch"]), value))
    return curves


@contextlib.contextmanager
def quick_and_quiet() -> Iterator[None]:
    """No retries or long waits on a tracking server, and MLflow's and its database's INFO
    lines kept out of the run's output, for the duration."""
    quick = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
    before = {key: os.environ.get(key) for key in quick}
    os.environ.update(quick)
    loggers = [logging.getLogger(name) for name in ("mlflow", "alembic", "sqlalchemy")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def experiment_id(client, name: str, tracking_uri: str) -> str:
    """The experiment's id, created where it does not exist; a local store's artifacts go to
    mlartifacts/ beside it (not wherever the run happens to work). The experiment is marked as
    one of model training (EXPERIMENT_KIND) unless it already says what it is."""
    existing = client.get_experiment_by_name(name)
    if existing is not None:
        if EXPERIMENT_KIND[0] not in existing.tags:
            client.set_experiment_tag(existing.experiment_id, *EXPERIMENT_KIND)
        return existing.experiment_id
    location = None
    if tracking_uri.startswith("sqlite:///"):
        database = Path(tracking_uri.removeprefix("sqlite:///"))
        location = (database.absolute().parent / "mlartifacts").as_uri()
    return client.create_experiment(name, artifact_location=location, tags=dict([EXPERIMENT_KIND]))


def log_batches(client, run_id: str, metrics: Iterable = (), params: Iterable = (), tags: Iterable = ()) -> None:
    """log_batch within MLflow's limit of 1,000 metrics a call (it splits parameters itself)."""
    metrics, params, tags = list(metrics), list(params), list(tags)
    client.log_batch(run_id, metrics=metrics[:1000], params=params, tags=tags)
    for start in range(1000, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[start : start + 1000])


def log_run_to_mlflow(
    settings: dict,
    config: dict,
    paths: TrackedPaths,
    started: float,
    outcome: str,
    version: str,
) -> str | None:
    """See the module doc. settings: the `tracking.mlflow` section; outcome: "success" or
    "failed". Returns the MLflow run's id, or None where nothing was logged."""
    if not settings["enabled"]:
        return None
    uri = settings["tracking_uri"]
    try:
        with open(paths.table, encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    except OSError:
        return None
    trained_now = datasets_written_since(rows, paths.metrics, started)
    if not trained_now:
        return None
    step, logging_started = "connecting", time.perf_counter()
    for loading in _LOADING:
        loading.join(timeout=120)
    try:
        from mlflow.entities import Metric, Param  # before quick_and_quiet: its import sets log levels
        from mlflow.tracking import MlflowClient

        with quick_and_quiet():
            client = MlflowClient(tracking_uri=uri)
            experiment = experiment_id(client, settings["experiment"] or Path.cwd().name, uri)
            now = int(time.time() * 1000)
            step = "the run"
            run = client.create_run(
                experiment,
                start_time=int(started * 1000),
                run_name=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
                tags={"rnnfleet.outcome": outcome, "rnnfleet.folder": str(Path.cwd()), "rnnfleet.version": version},
            )
            run_id = run.info.run_id
            step = "its parameters and metrics"
            pretrained_params, pretrained_metrics = (
                pretrained_facts(paths.pretrained_lineage) if config["train"].get("init") == "fleet" else ({}, {})
            )
            metrics = fleet_metrics(rows, trained_now) | pretrained_metrics
            log_batches(
                client,
                run_id,
                metrics=[Metric(key, value, now, 0) for key, value in metrics.items()],
                params=[Param(key, value) for key, value in (flattened(config) | pretrained_params).items()],
            )
            step = "its files"
            for path in (paths.table, paths.forecasts, paths.table_html, paths.skill_plot):
                if os.path.exists(path):
                    client.log_artifact(run_id, path)
            if settings["per_dataset_runs"]:
                step = "the datasets' runs"
                for row in rows:
                    if row["dataset"] in trained_now:
                        log_dataset_run(client, experiment, run_id, row, paths, settings["log_models"], now)
            client.set_terminated(run_id, "FINISHED" if outcome == "success" else "FAILED")
        print(
            f"rnnfleet: MLflow run {run_id} logged to {uri} in {time.perf_counter() - logging_started:.2f} s",
            file=sys.stderr,
        )
        return run_id
    except ImportError as error:
        print(
            f"rnnfleet: WARNING: MLflow tracking is on but {one_line(error)}: this run was not logged; "
            "install it with pip install -r requirements-mlflow.txt",
            file=sys.stderr,
        )
        return None
    except Exception as error:  # a tracking problem never fails the fleet
        print(
            f"rnnfleet: WARNING: MLflow tracking ({uri}): {step} not logged ({type(error).__name__}: "
            f"{one_line(error)}); the fleet's results are in {paths.table} as always",
            file=sys.stderr,
        )
        return None


def log_dataset_run(client, experiment: str, parent_id: str, row: dict, paths: TrackedPaths, log_model: bool, now: int):
    """A child run of the fleet's run for one dataset: its row, its loss curves, its model file."""
    from mlflow.entities import Metric, Param

    dataset = row["dataset"]
    child = client.create_run(
        experiment, run_name=dataset, tags={"mlflow.parentRunId": parent_id, "rnnfleet.dataset": dataset}
    )
    metrics = [Metric(key, value, now, 0) for key, value in dataset_metrics(row).items()]
    for key, curve in loss_histories(paths.metrics.format(dataset=dataset)).items():
        metrics += [Metric(key, value, now, epoch) for epoch, value in curve]
    words = dataset_words(row)
    log_batches(client, child.info.run_id, metrics=metrics, params=[Param(k, v) for k, v in words.items()])
    model = paths.models.format(dataset=dataset)
    if log_model and os.path.exists(model):
        client.log_artifact(child.info.run_id, model)
    client.set_terminated(child.info.run_id, "FINISHED" if row.get("status") == "ok" else "FAILED")
