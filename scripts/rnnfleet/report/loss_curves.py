"""Each trained dataset's loss curves and test-period forecasts as one SVG (rnnfleet.report.svg_chart),
drawn only for new or re-trained datasets (refresh_loss_curves), in several processes when
there are enough of them to pay for one."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from pathlib import Path

from rnnfleet.atomic_files import atomic_write
from rnnfleet.report.svg_chart import Band, Line, Mark, Panel, chart_svg

# The loss curves' format (rules/datasets.smk's LOSS_CURVE_FORMAT), and those of earlier
# rnnfleets, whose curves are replaced.
LOSS_CURVE_FORMAT = "svg"


LOSS_CURVE_FORMATS = ("svg", "png")


# matplotlib's default colours (tab:blue, tab:orange, tab:red), as the other figures use them.
BLUE, ORANGE, RED = "#1f77b4", "#ff7f0e", "#d62728"


# Drawing one curve is cheap next to starting a process (on Windows and macOS each one
# imports this module and numpy again, about as long as drawing 60 curves): fewer than this
# many per process do not pay for a second one.
MIN_CURVES_PER_PROCESS = 100


def draw_loss_curves(metrics_paths: list[str], folder: str | os.PathLike) -> list[Path]:
    """One SVG per dataset, <dataset>.svg: training and validation loss per epoch, the best
    epoch and the naive forecast's validation loss above; the test period's forecasts against
    the actual values below. Datasets whose metrics hold no per-epoch history (no model) get
    no curve, and lose the one they had."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for metrics_path in metrics_paths:
        with open(metrics_path) as handle:
            metrics = json.load(handle)
        dataset = Path(metrics_path).stem
        path = loss_curve_path(folder, dataset)
        if not metrics.get("history"):
            path.unlink(missing_ok=True)
            continue
        with atomic_write(path, durable=False) as handle:  # drawn again from its metrics if lost
            handle.write(chart_svg(loss_curve_panels(dataset, metrics)))
        written.append(path)
    return written


def loss_curve_panels(dataset: str, metrics: dict) -> tuple[Panel, ...]:
    """The panels of a dataset's loss curve, from its metrics: the losses per epoch, then the
    test period of each horizon (one for a model of a single horizon)."""
    epochs, val_losses = validation_points(metrics)
    compared = early_stopping_key(metrics)
    naive_loss = metrics[f"naive_{compared}"]
    losses = Panel(
        title=f"{dataset}: {skill_text(metrics)}\n{training_description(metrics)}",
        x_label="epoch",
        y_label=metrics.get("objective") or metrics.get("loss", "loss"),
        plot_height=210,
        lines=(
            Line(
                *curve_points(metrics["history"], compared.replace("val_", "train_", 1)), "training", BLUE, markers=True
            ),
            Line(epochs, val_losses, "validation", ORANGE, markers=True),
            Line(
                epochs,
                [naive_loss] * len(epochs),
                f"naive: {metrics.get('baseline', 'naive forecast')}, validation",
                "#808080",
                dash="6 3",
            ),
        ),
        marks=(Mark(metrics["best_epoch"], f"best epoch ({metrics['best_epoch']})", "#bbbbbb"),),
        x_axis="integer",
    )
    horizons = metrics.get("horizons") or []
    if len(horizons) < 2:
        return losses, test_period_panel(metrics)
    first = test_period_panel(metrics, f"horizon {horizons[0]['horizon']}")
    others = [test_period_panel(entry, f"horizon {entry['horizon']}") for entry in horizons[1:]]
    return losses, first, *others


def test_period_panel(scores: dict, horizon: str = "") -> Panel:
    """Forecast against actual over the test period (the scores' test_series: the metrics',
    or those of one horizon of metrics["horizons"], whose test skill the title gives), titled
    with the walk-forward folds' test skills where there are folds; x the forecasts' times,
    or the window numbers where the array file of an older rnnfleet kept no times."""
    series = scores.get("test_series") or {"window": [], "actual": [], "forecast": [], "units": ""}
    timed = "time" in series
    positions = series["time"] if timed else series["window"]
    bands = series.get("bands") or ([series] if "low" in series else [])
    title = "test period: forecast vs actual" if series["window"] else "no test period"
    if horizon and "test_skill" in scores:
        title = f"{title}, {horizon}: test skill {test_skill_interval(scores)}"
    return Panel(
        title=f"{title}\n{folds_text(scores)}".rstrip(),
        x_label="time of the forecast (UTC)" if timed else "test window",
        y_label=series["units"],
        plot_height=170,
        lines=(
            Line(positions, series["actual"], "actual", "#8c8c8c", width=0.8),
            Line(positions, series["forecast"], "forecast", RED, width=1.0),
        ),
        bands=tuple(
            Band(positions, band["low"], band["high"], f"{band['coverage']:.0%} interval", RED)
            for band in sorted(bands, key=lambda band: -band["coverage"])  # the widest underneath
        ),
        x_axis="time" if timed else "integer",
    )


def loss_curve_path(folder: str | os.PathLike, dataset: str) -> Path:
    return Path(folder) / f"{dataset}.{LOSS_CURVE_FORMAT}"


def curve_points(history: list[dict], key: str) -> tuple[list, list]:
    return [entry["epoch"] for entry in history], [entry[key] for entry in history]


def validation_points(metrics: dict) -> tuple[list, list]:
    """(epochs, validation losses) of the loss curve; an update's curve starts at epoch 0,
    the previous model's weights on the new validation windows (which "best epoch (0)" marks
    when no epoch of the update beat them)."""
    compared = early_stopping_key(metrics)
    epochs, losses = curve_points(metrics["history"], compared)
    if metrics.get(f"update_start_{compared}") is not None:
        return [0, *epochs], [metrics[f"update_start_{compared}"], *losses]
    return epochs, losses


def early_stopping_key(metrics: dict) -> str:
    """The validation loss per epoch that chose the best epoch, as the history names it:
    val_loss (one point forecast, and metrics of an older rnnfleet), val_pinball, val_mean_loss."""
    return metrics.get("early_stopping") or "val_loss"


def folds_text(metrics: dict) -> str:
    """'walk-forward: fold 1: +0.0300 [-0.0100, +0.0700]; ...' ('' without folds)."""
    folds = metrics.get("folds") or []
    if not folds:
        return ""
    return "walk-forward: " + "; ".join(f"fold {fold['fold']}: {test_skill_interval(fold)}" for fold in folds)


def test_skill_interval(scores: dict) -> str:
    """'+0.0800 [+0.0500, +0.1100]': the test skill and its interval."""
    return f"{scores['test_skill']:+.4f} [{scores['test_skill_low']:+.4f}, {scores['test_skill_high']:+.4f}]"


def skill_text(metrics: dict) -> str:
    """'validation skill +0.1000, test skill +0.0800 [+0.0500, +0.1100]' (no test part: the first only)."""
    text = f"validation skill {metrics['skill']:+.4f}"
    if "test_skill" in metrics:
        text += f", test skill {test_skill_interval(metrics)}"
    return text


def training_description(metrics: dict) -> str:
    """'model, features -> target' as the metrics record it (empty for older metrics files)."""
    if "model" not in metrics:
        return ""
    return f"{metrics['model']}; {metrics['features']} -> {metrics['target']}"


def refresh_loss_curves(
    metrics_paths: list[str], folder: str | os.PathLike, processes: int = 1, keep: Iterable[str] = ()
) -> list[Path]:
    """Make `folder` hold the loss curves of exactly the datasets of metrics_paths (and those
    named in `keep`, left as they are), drawing only those that are missing, empty or older
    than their metrics, in up to `processes` processes: a run that re-trains one dataset of a
    thousand draws one curve. Returns the curves drawn."""
    folder = Path(folder)
    wanted = {Path(path).stem: path for path in metrics_paths}
    kept = set(keep)
    if folder.is_dir():
        for curve in folder.iterdir():  # gone datasets' curves, and those of another format
            if curve.suffix.lstrip(".") in LOSS_CURVE_FORMATS and (
                (curve.stem not in wanted and curve.stem not in kept) or curve.suffix != f".{LOSS_CURVE_FORMAT}"
            ):
                curve.unlink()
    stale = []
    for dataset, metrics_path in wanted.items():
        try:
            drawn = loss_curve_path(folder, dataset).stat()
        except FileNotFoundError:
            stale.append(metrics_path)
            continue
        if drawn.st_size == 0 or drawn.st_mtime_ns < os.stat(metrics_path).st_mtime_ns:
            stale.append(metrics_path)
    return draw_loss_curves_in_processes(stale, folder, processes)


def draw_loss_curves_in_processes(metrics_paths: list[str], folder: Path, processes: int) -> list[Path]:
    """draw_loss_curves, shared out over up to `processes` processes."""
    processes = min(processes, os.cpu_count() or 1, len(metrics_paths) // MIN_CURVES_PER_PROCESS)
    if processes <= 1:
        return draw_loss_curves(metrics_paths, folder) if metrics_paths else []
    shares = [metrics_paths[start::processes] for start in range(processes)]
    with ProcessPoolExecutor(max_workers=processes) as pool:
        return [curve for drawn in pool.map(draw_loss_curves, shares, repeat(folder)) for curve in drawn]
