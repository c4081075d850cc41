"""Figures and the HTML table for Snakemake's report: loss curves, skill overview, summary."""

from __future__ import annotations

import csv
import html
import json
import math
import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from pathlib import Path

from rnnfleet.checkpoint import atomic_write

LOSS_CURVE_DPI = 100
# Above this many datasets the overview drops the names (they are in the summary table).
MAX_NAMED_BARS = 60
# The summary table's page lists this many datasets that are not done above the table.
MAX_LISTED_FAILURES = 50
# Drawing one curve is cheap next to starting a process (on Windows and macOS each one
# imports matplotlib again): fewer than this many per process do not pay for a second one.
MIN_CURVES_PER_PROCESS = 20
# Where Snakemake keeps the copy of an update() output while its job runs (9.x).
SNAKEMAKE_BACKUPS = Path(".snakemake") / "backups"


def read_table(table_path: str | os.PathLike) -> tuple[list[str], list[dict[str, str]]]:
    """The summary table (results/metrics.csv): its columns, whatever they are, and its rows."""
    with open(table_path, newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def as_number(text: str | None) -> float:
    """A table cell as a float; NaN where it is empty or not a number (a failed dataset)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def best_first(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """Rows by skill, highest first; rows without a skill last."""

    def order(row: dict[str, str]) -> tuple[bool, float]:
        skill = as_number(row.get("skill"))
        return math.isnan(skill), -skill

    return sorted(rows, key=order)


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (no display on a cluster node)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure, path: str | os.PathLike, dpi: int) -> None:
    with atomic_write(path) as handle:
        figure.savefig(handle, format=Path(path).suffix.lstrip("."), dpi=dpi)


def draw_loss_curves(metrics_paths: list[str], folder: str | os.PathLike) -> list[Path]:
    """One PNG per dataset, named <dataset>.png: training and validation loss per epoch,
    the best epoch and the naive forecast's validation loss. Datasets whose metrics hold no
    per-epoch history (no model) get no curve, and lose the one they had."""
    plt = pyplot()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(8.0, 3.6))
    # Fixed margins, legend on the right: an automatic layout would draw every figure twice.
    figure.subplots_adjust(left=0.09, right=0.70, top=0.85, bottom=0.14)
    # One figure and one set of lines for all curves, their data replaced per dataset:
    # clearing the axes would rebuild lines, axis and ticks for every curve.
    (training,) = axes.plot([], [], "o-", label="training")
    (validation,) = axes.plot([], [], "o-", label="validation")
    (naive,) = axes.plot([], [], "--", color="0.5")  # a line, not axhline: it widens the y range
    best = axes.axvline(1, color="0.8", linestyle=":")
    axes.set_xlabel("epoch")
    axes.xaxis.get_major_locator().set_params(integer=True)
    written = []
    for metrics_path in metrics_paths:
        with open(metrics_path) as handle:
            metrics = json.load(handle)
        history = metrics.get("history") or []
        dataset = Path(metrics_path).stem
        if not history:
            (folder / f"{dataset}.png").unlink(missing_ok=True)
            continue
        epochs = [entry["epoch"] for entry in history]
        training.set_data(epochs, [entry["train_loss"] for entry in history])
        validation.set_data(epochs, [entry["val_loss"] for entry in history])
        naive.set_data(epochs, [metrics["naive_val_loss"]] * len(epochs))
        naive.set_label(f"naive: {metrics.get('baseline', 'naive forecast')}, validation")
        best.set_xdata([metrics["best_epoch"]] * 2)
        best.set_label(f"best epoch ({metrics['best_epoch']})")
        axes.relim()
        axes.autoscale_view()
        axes.set(
            title=f"{dataset}: skill {metrics['skill']:+.4f}\n{training_description(metrics)}",
            ylabel=metrics.get("loss", "loss"),
        )
        axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0))
        path = folder / f"{dataset}.png"
        save_figure(figure, path, LOSS_CURVE_DPI)
        written.append(path)
    plt.close(figure)
    return written


def training_description(metrics: dict) -> str:
    """'model, features -> target' as the metrics record it (empty for older metrics files)."""
    if "model" not in metrics:
        return ""
    return f"{metrics['model']}; {metrics['features']} -> {metrics['target']}"


def refresh_loss_curves(metrics_paths: list[str], folder: str | os.PathLike, processes: int = 1) -> list[Path]:
    """Make `folder` hold the loss curves of exactly the datasets of metrics_paths, drawing
    only those that are missing or older than their metrics, in up to `processes`
    processes: a run that re-trains one dataset of a thousand draws one curve. Returns the
    curves drawn."""
    folder = Path(folder)
    wanted = {Path(path).stem: path for path in metrics_paths}
    if folder.is_dir():
        for curve in folder.glob("*.png"):
            if curve.stem not in wanted:
                curve.unlink()
    stale = []
    for dataset, metrics_path in wanted.items():
        curve = folder / f"{dataset}.png"
        if not curve.exists() or curve.stat().st_mtime_ns < os.stat(metrics_path).st_mtime_ns:
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


def drop_stale_snakemake_backup(output_path: str | os.PathLike) -> bool:
    """Remove the copy Snakemake made of an update() output (the loss curves folder) before
    a job that never finished; True if there was one. Snakemake drops the copy when the job
    ends, but a run killed meanwhile leaves it, and every later job that updates the output
    then fails to copy over it. The folder itself needs no restoring: a killed plots job
    leaves curves that are whole (atomic writes), and the next one redraws any that are
    stale. Call only when no other run works in the folder."""
    path = Path(output_path)
    backup = SNAKEMAKE_BACKUPS / (path.relative_to(path.anchor) if path.is_absolute() else path)
    if not backup.exists():
        return False
    shutil.rmtree(backup)
    return True


def draw_skill_overview(rows: list[dict[str, str]], path: str | os.PathLike) -> None:
    """Skill of every dataset, best first; datasets without a skill are counted in the title."""
    plt = pyplot()
    ranked = [(row["dataset"], as_number(row.get("skill"))) for row in best_first(rows)]
    scored = [(name, skill) for name, skill in ranked if not math.isnan(skill)]
    without_skill = len(ranked) - len(scored)
    named = len(scored) <= MAX_NAMED_BARS
    height = 1.5 + 0.25 * len(scored) if named else 6.0
    figure, axes = plt.subplots(figsize=(7.0, height), layout="constrained")
    positions = range(len(scored))
    colours = ["tab:green" if skill > 0 else "tab:red" for _, skill in scored]
    axes.barh(positions, [skill for _, skill in scored], color=colours, height=0.8 if named else 1.0)
    axes.axvline(0, color="black", linewidth=0.8)
    axes.invert_yaxis()  # best at the top
    if named:
        axes.set_yticks(list(positions), [name for name, _ in scored])
    else:
        axes.set_ylabel("datasets, best first")
        axes.set_yticks([])
    beating = sum(skill > 0 for _, skill in scored)
    title = f"Skill = 1 - val_loss / naive_val_loss: {beating} of {len(scored)} models beat the naive forecast"
    if without_skill:
        title += f"\n{without_skill} dataset(s) without a model"
    axes.set_title(title, fontsize="medium")
    axes.set_xlabel("skill (> 0: better than the target's naive baseline; see the summary table)")
    save_figure(figure, path, dpi=100)
    plt.close(figure)


def format_cell(text: str) -> str:
    number = as_number(text)
    if math.isnan(number) or text.strip().lstrip("-").isdigit():
        return html.escape(text)
    return f"{number:.5g}"


def not_done_html(rows: list[dict[str, str]]) -> str:
    """The datasets that are not done, each with its status and error line, as an HTML list
    ("" when all are done)."""
    not_ok = [row for row in rows if row.get("status", "ok") != "ok"]
    if not not_ok:
        return ""
    items = [
        f"<li><b>{html.escape(row['dataset'])}</b>: {html.escape(row['status'])}: {html.escape(row.get('error') or '')}</li>"
        for row in not_ok[:MAX_LISTED_FAILURES]
    ]
    if len(not_ok) > MAX_LISTED_FAILURES:
        items.append(f"<li>... and {len(not_ok) - MAX_LISTED_FAILURES} more (status column below)</li>")
    return (
        f'<p>{len(not_ok)} dataset(s) not done ("data error": fix or remove the file; any other status '
        f"may pass when the same command runs again):</p>\n<ul>{''.join(items)}</ul>"
    )


def write_table_html(rows: list[dict[str, str]], columns: list[str], path: str | os.PathLike) -> None:
    """The summary table as a small self-contained HTML page, best skill first (the report
    shows it in a frame; a CSV there would only offer a download)."""
    header = "".join(f"<th>{html.escape(column)}</th>" for column in columns)
    body = []
    for row in best_first(rows):
        skill = as_number(row.get("skill"))
        css_class = "good" if skill > 0 else "bad" if skill <= 0 else "none"
        cells = "".join(f"<td>{format_cell(row.get(column) or '')}</td>" for column in columns)
        body.append(f'<tr class="{css_class}">{cells}</tr>')
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>rnnfleet: all datasets</title>
<style>
body {{ font-family: sans-serif; font-size: 14px; margin: 1em; }}
table {{ border-collapse: collapse; }}
th, td {{ padding: 0.25em 0.7em; border-bottom: 1px solid #ddd; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
th {{ background: #f0f0f0; position: sticky; top: 0; }}
tr.good td:first-child {{ border-left: 4px solid #2ca02c; }}
tr.bad td:first-child {{ border-left: 4px solid #d62728; }}
tr.none td:first-child {{ border-left: 4px solid #999; }}
</style></head><body>
{not_done_html(rows)}
<p>{len(rows)} dataset(s), best skill first. Green: the model beats its naive baseline
(column <i>baseline</i>: zero return, training mean or training share of up moves, per target).
Columns <i>model</i>, <i>features</i> and <i>target</i> say what each dataset trained with.</p>
<table><thead><tr>{header}</tr></thead>
<tbody>
{chr(10).join(body)}
</tbody></table></body></html>
"""
    with atomic_write(path) as handle:
        handle.write(page.encode())


def draw_report_figures(
    table_path: str | os.PathLike,
    metrics_paths: list[str],
    loss_curves_folder: str | os.PathLike,
    skill_plot_path: str | os.PathLike,
    table_html_path: str | os.PathLike,
    processes: int = 1,
) -> list[Path]:
    """The plots job: everything the report shows besides what Snakemake adds itself. The
    loss curves folder is updated in place (only new or re-trained datasets are drawn);
    returns the curves drawn."""
    columns, rows = read_table(table_path)
    write_table_html(rows, columns, table_html_path)
    draw_skill_overview(rows, skill_plot_path)
    return refresh_loss_curves(metrics_paths, loss_curves_folder, processes)
