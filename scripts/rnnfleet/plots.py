"""Figures and the HTML table for Snakemake's report: loss curves, the test skill of every
dataset with its interval (a forest chart), the summary table ranked by test skill."""

from __future__ import annotations

import csv
import html
import json
import math
import os
import re
import shutil
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path

from rnnfleet.checkpoint import atomic_write
from rnnfleet.evaluation import BEATS, CONFIDENCE, NOT_DISTINGUISHABLE, WORSE
from rnnfleet.fleet import BEATS_AFTER, as_number
from rnnfleet.intervals import COVERAGE
from rnnfleet.pretraining import init_headline
from rnnfleet.svg_chart import Band, Line, Mark, Panel, chart_svg

# The loss curves' format (rules/datasets.smk's LOSS_CURVE_FORMAT), and those of earlier
# rnnfleets, whose curves are replaced.
LOSS_CURVE_FORMAT = "svg"
LOSS_CURVE_FORMATS = ("svg", "png")
# matplotlib's default colours (tab:blue, tab:orange, tab:red), as the other figures use them.
BLUE, ORANGE, RED = "#1f77b4", "#ff7f0e", "#d62728"
# Above this many datasets the overview drops the names (they are in the summary table).
MAX_NAMED_BARS = 60
# The summary table's page lists this many datasets that are not done above the table.
MAX_LISTED_FAILURES = 50
# Drawing one curve is cheap next to starting a process (on Windows and macOS each one
# imports this module and numpy again, about as long as drawing 60 curves): fewer than this
# many per process do not pay for a second one.
MIN_CURVES_PER_PROCESS = 100
# Where Snakemake keeps the copy of an update() output while its job runs (9.x).
SNAKEMAKE_BACKUPS = Path(".snakemake") / "backups"


def read_table(table_path: str | os.PathLike) -> tuple[list[str], list[dict[str, str]]]:
    """The summary table (results/metrics.csv): its columns, whatever they are, and its rows."""
    with open(table_path, newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def best_first(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """Rows by test skill, highest first, those that beat the baseline after the fleet
    correction (rnnfleet.fleet) ahead of all others; then rows with only a validation skill
    (no test period), by that; rows without either last."""

    def order(row: dict[str, str]) -> tuple[int, float]:
        test_skill, skill = as_number(row.get("test_skill")), as_number(row.get("skill"))
        if not math.isnan(test_skill):
            return (0 if row.get("fleet_verdict") == BEATS_AFTER else 1), -test_skill
        return (2, -skill) if not math.isnan(skill) else (3, 0.0)

    return sorted(rows, key=order)


def fleet_winners(ranked: list[dict[str, str]]) -> int:
    """How many rows beat the baseline after the fleet correction (best_first puts them first)."""
    return sum(row.get("fleet_verdict") == BEATS_AFTER for row in ranked)


METHOD_NAMES = {"bh": "Benjamini-Hochberg", "by": "Benjamini-Yekutieli"}
# The chance that a model without skill has its 95% interval wholly above 0.
LUCKY_SHARE = (1 - CONFIDENCE) / 2


@dataclass(frozen=True)
class FleetCounts:
    """What the fleet's verdicts say, from the table's rows (rnnfleet.fleet.fleet_columns)."""

    tested: int  # datasets with a test score: the correction was over them
    alone: int  # beat the baseline alone: the 95% interval of the test skill above 0
    after: int  # beat it after the fleet correction
    method: str  # e.g. Benjamini-Hochberg
    rate: float  # the false discovery rate
    best_sharpe: tuple[str, float, float, float] | None  # dataset, Sharpe ratio, by luck, deflated

    @property
    def alone_by_luck(self) -> float:
        """How many would beat the baseline alone with no skill anywhere."""
        return self.tested * LUCKY_SHARE


def fleet_counts(rows: list[dict[str, str]]) -> FleetCounts | None:
    """None when the table has no fleet verdicts (no test period, or an older table)."""
    tested = [row for row in rows if row.get("fleet_verdict")]
    if not tested:
        return None
    method, _, rate = (tested[0].get("fleet_correction") or "").partition(" fdr=")
    with_sharpe = [row for row in tested if not math.isnan(as_number(row.get("test_sharpe")))]
    best = max(with_sharpe, key=lambda row: as_number(row["test_sharpe"]), default=None)
    return FleetCounts(
        tested=len(tested),
        alone=sum(row.get("test_verdict") == BEATS for row in tested),
        after=sum(row["fleet_verdict"] == BEATS_AFTER for row in tested),
        method=METHOD_NAMES.get(method, method),
        rate=as_number(rate),
        best_sharpe=best
        and (
            best["dataset"],
            as_number(best["test_sharpe"]),
            as_number(best.get("fleet_sharpe_by_luck")),
            as_number(best.get("test_sharpe_deflated")),
        ),
    )


def plain_name(name: str) -> str:
    return name


def rst_literal(name: str) -> str:
    return f"``{name}``"


def fleet_numbers(rows: list[dict[str, str]], name_markup=plain_name, shown: int = 3) -> str:
    """What the table says of the fleet in two sentences: datasets trained from scratch and
    updated, not done, flagged; the best and worst test skills (the validation skill where
    there is no test period). name_markup: how a dataset's name is written (rst_literal)."""
    made = [str(row.get("made") or "") for row in rows if row.get("status", "ok") == "ok"]
    not_done = Counter(row["status"] for row in rows if row.get("status", "ok") != "ok")
    parts = [f"{sum(label == 'full' for label in made)} trained from scratch"]
    parts.append(f"{sum(label.startswith('update') for label in made)} updated (column *made*)")
    if not_done:
        kinds = ", ".join(f"{count} {status}" for status, count in not_done.most_common())
        parts.append(f"{sum(not_done.values())} not done ({kinds})")
    flagged = sum(bool(quality_mark(row)) for row in rows)
    if flagged:
        parts.append(f"{flagged} flagged for data quality")
    text = f"{len(rows)} dataset(s): {', '.join(parts)}."
    column = "test_skill" if any(not math.isnan(as_number(row.get("test_skill"))) for row in rows) else "skill"
    scored = sorted(
        (row for row in rows if not math.isnan(as_number(row.get(column)))), key=lambda row: -as_number(row[column])
    )
    if scored:

        def listed(part):
            return ", ".join(f"{name_markup(row['dataset'])} {as_number(row[column]):+.4f}" for row in part)

        text += f" Best {column.replace('_', ' ')}: {listed(scored[:shown])}"
        if len(scored) > 2 * shown:
            text += f"; worst: {listed(scored[-shown:])}"
        text += "."
    return text + coverage_text(rows)


def coverage_text(rows: list[dict[str, str]]) -> str:
    """' The 90% forecast intervals held ...': how the intervals did on the test period
    (rnnfleet.intervals), '' where no dataset has them."""
    covered = [row for row in rows if not math.isnan(as_number(row.get("test_coverage")))]
    if not covered:
        return ""
    median = sorted(as_number(row["test_coverage"]) for row in covered)[len(covered) // 2]
    off = sum(
        not as_number(row.get("test_coverage_low")) <= COVERAGE <= as_number(row.get("test_coverage_high"))
        for row in covered
    )
    return (
        f" The {COVERAGE:.0%} forecast intervals held in a median {median:.1%} of the test windows; "
        f"{off} of {len(covered)} dataset(s) with a coverage clearly off {COVERAGE:.0%} (its 95% interval "
        "excludes it: column *test_coverage*)."
    )


def fleet_headline(counts: FleetCounts, name_markup=plain_name) -> str:
    """The fleet's verdicts in a few sentences (the report's start page, the table's page)."""
    text = (
        f"Of {counts.tested} dataset(s) with a test score, {counts.alone} beat their baseline alone "
        f"(the 95% interval of the test skill above 0); with no skill anywhere, about "
        f"{counts.alone_by_luck:.1f} would, by luck. After the fleet correction ({counts.method} at a false "
        f"discovery rate of {counts.rate:g}, over those {counts.tested}), {counts.after} beat it: on average at most "
        f"{counts.rate:.0%} of such calls are wrong, and with no skill anywhere the chance of even one is at most "
        f"{counts.rate:.0%}."
    )
    if counts.best_sharpe:
        dataset, sharpe, by_luck, deflated = counts.best_sharpe
        text += (
            f" The best Sharpe ratio of trading the forecast's sign, {sharpe:.3g} per trade ({name_markup(dataset)}), against "
            f"{by_luck:.3g} expected of the best of {counts.tested} datasets with no skill: the chance that its true "
            f"Sharpe ratio is above that (deflated Sharpe ratio) is {deflated:.2f}."
        )
    return text


# The start page of the report: the template's marker line becomes the fleet's headline.
HEADLINE_MARKER = ".. fleet headline"


def write_start_page(template_path: str | os.PathLike, rows: list[dict[str, str]], path: str | os.PathLike) -> None:
    """The report's start page: the template (report/workflow.rst) with the fleet's numbers
    and verdicts in place of its HEADLINE_MARKER line."""
    template = Path(template_path).read_text(encoding="utf-8")
    counts = fleet_counts(rows)
    headline = f"**The fleet.** {fleet_numbers(rows, rst_literal)}"
    if counts:
        headline += f" {fleet_headline(counts, rst_literal)}"
    if comparison := init_headline(rows):  # train.compare_init (rnnfleet.pretraining) leads
        headline = f"{comparison}\n\n{headline}"
    template = template.replace(HEADLINE_MARKER, headline, 1)
    with atomic_write(path) as handle:
        handle.write(template.encode())


def quality_mark(row: dict[str, str]) -> str:
    """' [data quality: flat_bars 100.0%]' for a dataset flagged by rnnfleet.quality, else ''."""
    flags = (row.get("quality_flags") or "").strip()
    return f" [data quality: {flags}]" if flags else ""


def flagged_count_text(rows: list[dict[str, str]]) -> str:
    """The line saying how many datasets are flagged for data quality ('' for none)."""
    flagged = sum(bool(quality_mark(row)) for row in rows)
    return (
        f"{flagged} dataset(s) flagged for data quality: their scores may be artefacts of the data" if flagged else ""
    )


VERDICT_CLASSES = {BEATS: "good", NOT_DISTINGUISHABLE: "unclear", WORSE: "bad"}
# A row's class: its test verdict's, "winner" when it beats the baseline after the fleet
# correction too, "lucky" when it beats it alone only; colour and legend in the chart.
CLASS_STYLES = {
    "winner": ("tab:green", "o", "beats the baseline after the fleet correction"),
    "good": ("tab:green", "o", BEATS),
    "lucky": ("#7fc97f", "D", "beats it alone, not after the fleet correction"),
    "unclear": ("0.55", "o", NOT_DISTINGUISHABLE),
    "bad": ("tab:red", "o", WORSE),
}


def verdict_class(row: dict[str, str]) -> str | None:
    """The class of a row with a test verdict (see CLASS_STYLES); None without one."""
    if row.get("fleet_verdict") == BEATS_AFTER:
        return "winner"
    if row.get("test_verdict") == BEATS and row.get("fleet_verdict"):
        return "lucky"
    return VERDICT_CLASSES.get(row.get("test_verdict"))


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (no display on a cluster node)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure, path: str | os.PathLike, dpi: int) -> None:
    """The figure written atomically, not synced to the disk: a figure is drawn again from
    its metrics."""
    with atomic_write(path, durable=False) as handle:
        figure.savefig(handle, format=Path(path).suffix.lstrip("."), dpi=dpi)


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
    naive_loss = metrics["naive_val_loss"]
    losses = Panel(
        title=f"{dataset}: {skill_text(metrics)}\n{training_description(metrics)}",
        x_label="epoch",
        y_label=metrics.get("loss", "loss"),
        plot_height=210,
        lines=(
            Line(*curve_points(metrics["history"], "train_loss"), "training", BLUE, markers=True),
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
    epochs, losses = curve_points(metrics["history"], "val_loss")
    if metrics.get("update_start_val_loss") is not None:
        return [0, *epochs], [metrics["update_start_val_loss"], *losses]
    return epochs, losses


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


def refresh_loss_curves(metrics_paths: list[str], folder: str | os.PathLike, processes: int = 1) -> list[Path]:
    """Make `folder` hold the loss curves of exactly the datasets of metrics_paths, drawing
    only those that are missing, empty or older than their metrics, in up to `processes`
    processes: a run that re-trains one dataset of a thousand draws one curve. Returns the
    curves drawn."""
    folder = Path(folder)
    wanted = {Path(path).stem: path for path in metrics_paths}
    if folder.is_dir():
        for curve in folder.iterdir():  # gone datasets' curves, and those of another format
            if curve.suffix.lstrip(".") in LOSS_CURVE_FORMATS and (
                curve.stem not in wanted or curve.suffix != f".{LOSS_CURVE_FORMAT}"
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


def test_skill_title(scored: list[dict[str, str]], what: str) -> str:
    """The skill chart's title: the verdicts' counts alone and after the fleet correction."""
    counts = {verdict: sum(row.get("test_verdict") == verdict for row in scored) for verdict in VERDICT_CLASSES}
    title = (
        f"{what}, {len(scored)} dataset(s): {counts[BEATS]} beat the baseline alone, "
        f"{counts[NOT_DISTINGUISHABLE]} not distinguishable from it, {counts[WORSE]} worse"
    )
    fleet = fleet_counts(scored)
    if fleet:
        title += (
            f"\nwith no skill anywhere about {fleet.alone_by_luck:.1f} would beat it alone; "
            f"{fleet.after} beat it after the fleet correction ({fleet.method}, FDR {fleet.rate:g})"
        )
    return title


# Above this many datasets with a test score the overview is their distribution, with the
# winners after the fleet correction named: a bar each would no longer be readable.
MAX_FOREST_ROWS = 300
MAX_NAMED_WINNERS = 15


def draw_skill_distribution(scored: list[dict[str, str]], without: int, path: str | os.PathLike) -> None:
    """The test skills of a large fleet as a histogram stacked by verdict class, the best
    MAX_NAMED_WINNERS winners after the fleet correction listed beside it. scored: best first."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(8.0, 5.0), layout="constrained")
    classes = [css_class for css_class in CLASS_STYLES if any(verdict_class(row) == css_class for row in scored)]
    skills = [
        [as_number(row["test_skill"]) for row in scored if verdict_class(row) == css_class] for css_class in classes
    ]
    axes.hist(
        skills,
        bins=60,
        stacked=True,
        color=[CLASS_STYLES[css_class][0] for css_class in classes],
        label=[CLASS_STYLES[css_class][2] for css_class in classes],
    )
    axes.axvline(0, color="black", linewidth=0.8)
    winners = [row for row in scored if verdict_class(row) == "winner"]
    if winners:
        listed = [f"{row['dataset']}  {as_number(row['test_skill']):+.4f}" for row in winners[:MAX_NAMED_WINNERS]]
        if len(winners) > MAX_NAMED_WINNERS:
            listed.append(f"... and {len(winners) - MAX_NAMED_WINNERS} more (summary table)")
        axes.text(
            0.99, 0.98, "Winners after the fleet correction:\n" + "\n".join(listed), transform=axes.transAxes,
            ha="right", va="top", multialignment="left", fontsize="x-small", family="monospace",
            bbox={"facecolor": "white", "edgecolor": "tab:green", "alpha": 0.9},
        )  # fmt: skip
    axes.set_xlabel("test skill = 1 - test_loss / naive_test_loss (> 0: better than the naive baseline)")
    axes.set_ylabel("datasets")
    axes.set_yscale("log")  # the few winners stay visible beside thousands of noise models
    figure.legend(loc="outside lower center", ncols=3, fontsize="small")
    title = test_skill_title(scored, "Test skill")
    if without:
        title += f"\n{without} dataset(s) without a test score"
    if flagged_count_text(scored):
        title += f"\n{flagged_count_text(scored)}"
    axes.set_title(title, fontsize="medium", wrap=True)
    save_figure(figure, path, dpi=100)
    plt.close(figure)


def draw_skill_overview(rows: list[dict[str, str]], path: str | os.PathLike) -> None:
    """Forest chart: every dataset's test skill with its 95% interval, best first, the zero
    line marked, coloured by verdict (beats, not distinguishable from, worse than the
    baseline), those that beat it after the fleet correction first; above MAX_FOREST_ROWS
    datasets with a test score, their distribution instead (draw_skill_distribution).
    Without any test scores (preprocess.test_fraction 0): the validation skill, without
    intervals. Datasets without a score are counted in the title."""
    plt = pyplot()
    ranked = best_first(rows)
    scored = [row for row in ranked if not math.isnan(as_number(row.get("test_skill")))]
    if len(scored) > MAX_FOREST_ROWS:
        draw_skill_distribution(scored, len(rows) - len(scored), path)
        return
    on_test = bool(scored)
    if not on_test:
        scored = [row for row in ranked if not math.isnan(as_number(row.get("skill")))]
    named = len(scored) <= MAX_NAMED_BARS
    height = 2.0 + 0.25 * len(scored) if named else 6.0
    figure, axes = plt.subplots(figsize=(7.0, height), layout="constrained")
    axes.axvline(0, color="black", linewidth=0.8)  # the baseline's skill
    if on_test:
        for css_class, (colour, marker, label) in CLASS_STYLES.items():
            places = [place for place, row in enumerate(scored) if verdict_class(row) == css_class]
            if not places:
                continue
            skill, low, high = (
                [as_number(scored[place][column]) for place in places]
                for column in ("test_skill", "test_skill_low", "test_skill_high")
            )
            # A percentile interval need not contain the estimate itself (nor, rounded, its own ends).
            spread = [
                [max(s - lo, 0.0) for s, lo in zip(skill, low, strict=True)],
                [max(h - s, 0.0) for s, h in zip(skill, high, strict=True)],
            ]
            axes.errorbar(skill, places, xerr=spread, fmt=marker, color=colour, label=label, capsize=2)
        title = test_skill_title(scored, "Test skill with 95% interval")
        winners = fleet_winners(scored)
        if 0 < winners < len(scored):  # the winners that survive the correction, apart
            axes.axhline(winners - 0.5, color="tab:green", linestyle="--", linewidth=0.8)
        figure.legend(loc="outside lower center", ncols=3, fontsize="small")
        axes.set_xlabel("test skill = 1 - test_loss / naive_test_loss (> 0: better than the naive baseline)")
    else:
        skills = [as_number(row["skill"]) for row in scored]
        axes.plot(skills, range(len(scored)), "o", color="tab:blue")
        title = f"Validation skill (no test period): {sum(skill > 0 for skill in skills)} of {len(scored)} above 0"
        axes.set_xlabel("validation skill = 1 - val_loss / naive_val_loss")
    axes.invert_yaxis()  # best at the top
    if named:
        axes.set_yticks(range(len(scored)), [row["dataset"] + quality_mark(row) for row in scored])
        for label, row in zip(axes.get_yticklabels(), scored, strict=True):
            if quality_mark(row):
                label.set_color("tab:orange")
    else:
        axes.set_ylabel("datasets, best first")
        axes.set_yticks([])
    without = len(rows) - len(scored)
    if without:
        title += f"\n{without} dataset(s) without a {'test ' if on_test else ''}score"
    if flagged_count_text(scored):
        title += f"\n{flagged_count_text(scored)}" + (" (marked)" if named else "")
    axes.set_title(title, fontsize="medium", wrap=True)
    save_figure(figure, path, dpi=100)
    plt.close(figure)


def row_class(row: dict[str, str]) -> str:
    """The table row's colour: by the test verdict (verdict_class); without one, by the
    validation skill."""
    if verdict_class(row):
        return verdict_class(row)
    skill = as_number(row.get("skill"))
    return "good" if skill > 0 else "bad" if skill <= 0 else "none"


def format_cell(text: str) -> str:
    number = as_number(text)
    if math.isnan(number) or text.strip().lstrip("-").isdigit():
        return html.escape(text)
    return f"{number:.5g}"


def quality_html(row: dict[str, str]) -> str:
    """The mark of a dataset flagged for data quality, for its first cell ('' for none)."""
    mark = quality_mark(row)
    return f' <span class="quality">&#9888;{html.escape(mark)}</span>' if mark else ""


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
        f'<p>{len(not_ok)} dataset(s) not done ("data error": fix or remove the file; "settings error": change '
        "the settings named; any other status may pass when the same command runs again):</p>\n"
        f"<ul>{''.join(items)}</ul>"
    )


def verdict_counts_text(rows: list[dict[str, str]]) -> str:
    """'2 beat the baseline, 1 not distinguishable from the baseline, 0 worse than the baseline'."""
    counts = {verdict: sum(row.get("test_verdict") == verdict for row in rows) for verdict in VERDICT_CLASSES}
    words = {BEATS: "beat the baseline", NOT_DISTINGUISHABLE: NOT_DISTINGUISHABLE, WORSE: "worse than the baseline"}
    return ", ".join(f"{count} {words[verdict]}" for verdict, count in counts.items())


# The summary table's rows shown at first, and each "more" adds as many: a browser lays out
# 10,000 rows of 50 columns in seconds, and the rows not shown cost nothing.
TABLE_PAGE_ROWS = 500
# Its search box, sortable columns and pages, in the page itself (a report opened from disk,
# or unpacked from its .zip, loads nothing from elsewhere).
TABLE_SCRIPT = """
const table = document.querySelector("table"), body = table.tBodies[0];
const divider = body.querySelector("tr.divider");
const rows = Array.from(body.rows).filter(row => row !== divider);
const dividerPlace = divider ? rows.findIndex(row => row.compareDocumentPosition(divider) & 2) : -1;
const search = document.getElementById("search"), shown = document.getElementById("shown");
const more = document.getElementById("more"), all = document.getElementById("all");
let order = rows, matching = rows, showing = PAGE_ROWS, texts = null, fleetOrder = true;
function show() {
  const visible = new Set(matching.slice(0, showing));
  const fragment = document.createDocumentFragment();
  order.forEach((row, place) => {
    if (fleetOrder && divider && place === dividerPlace) fragment.append(divider);
    row.classList.toggle("later", !visible.has(row));
    fragment.append(row);
  });
  if (divider) divider.classList.toggle("later", !fleetOrder || matching !== order || dividerPlace >= showing);
  body.append(fragment);
  const total = search.value.trim() ? `${matching.length} of ${rows.length} dataset(s) match` : `${rows.length} dataset(s)`;
  shown.textContent = `${total}, ${Math.min(showing, matching.length)} shown.`;
  more.hidden = all.hidden = showing >= matching.length;
}
function filter() {
  const term = search.value.trim().toLowerCase();
  if (term && !texts) texts = new Map(rows.map(row => [row, row.textContent.toLowerCase()]));
  matching = term ? order.filter(row => texts.get(row).includes(term)) : order;
  showing = PAGE_ROWS;
  show();
}
search.addEventListener("input", filter);
more.addEventListener("click", () => { showing += PAGE_ROWS; show(); });
all.addEventListener("click", () => { showing = rows.length; show(); });
function cellValue(row, column) {
  const text = row.cells[column].textContent.trim();
  return text === "" ? null : isNaN(Number(text)) ? text.toLowerCase() : Number(text);
}
table.tHead.addEventListener("click", event => {
  const heading = event.target.closest("th");
  if (!heading) return;
  const descending = heading.dataset.order !== "descending";
  for (const other of heading.parentElement.cells) delete other.dataset.order;
  heading.dataset.order = descending ? "descending" : "ascending";
  const keyed = rows.map(row => [cellValue(row, heading.cellIndex), row]);
  keyed.sort(([a], [b]) => {
    if (a === null || b === null) return (a === null) - (b === null);  // empty cells last
    if (typeof a !== typeof b) return typeof a === "number" ? -1 : 1;  // numbers before text
    return (a < b ? -1 : a > b ? 1 : 0) * (descending ? -1 : 1);
  });
  order = keyed.map(([, row]) => row);
  fleetOrder = false;
  filter();
});
document.getElementById("fleet-order").addEventListener("click", () => {
  for (const heading of table.tHead.rows[0].cells) delete heading.dataset.order;
  order = rows;
  fleetOrder = true;
  filter();
});
""".replace("PAGE_ROWS", str(TABLE_PAGE_ROWS))


def write_table_html(rows: list[dict[str, str]], columns: list[str], path: str | os.PathLike) -> None:
    """The summary table as a small self-contained HTML page, best test skill first (the report
    shows it in a frame; a CSV there would only offer a download)."""
    header = "".join(f"<th>{html.escape(column)}</th>" for column in columns)
    body = []
    ranked = best_first(rows)
    winners = fleet_winners(ranked)
    for place, row in enumerate(ranked):
        if place == winners and 0 < winners < len(ranked):
            body.append(
                f'<tr class="divider{" later" if place >= TABLE_PAGE_ROWS else ""}"><td colspan="{len(columns)}">Above: the {winners} that beat the baseline '
                "after the fleet correction. Below: all others, best test skill first (light green: beats it alone, "
                "not after the correction: possibly luck).</td></tr>"
            )
        cells = "".join(
            f"<td>{format_cell(row.get(column) or '')}{quality_html(row) if number == 0 else ''}</td>"
            for number, column in enumerate(columns)
        )
        later = " later" if place >= TABLE_PAGE_ROWS else ""  # shown on "more" (TABLE_SCRIPT)
        body.append(f'<tr class="{row_class(row)}{later}">{cells}</tr>')
    more_hidden = " hidden" if len(rows) <= TABLE_PAGE_ROWS else ""
    fleet = fleet_counts(rows)
    headline = fleet_numbers(rows) + (f" {fleet_headline(fleet)}" if fleet else "")
    headline = f'<p class="headline">{html.escape(headline)}</p>'
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>rnnfleet: all datasets</title>
<style>
body {{ font-family: sans-serif; font-size: 14px; margin: 1em; }}
table {{ border-collapse: collapse; }}
th, td {{ padding: 0.25em 0.7em; border-bottom: 1px solid #ddd; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
th {{ background: #f0f0f0; position: sticky; top: 0; cursor: pointer; }}
th[data-order="descending"]::after {{ content: " \\25BC"; }}
th[data-order="ascending"]::after {{ content: " \\25B2"; }}
tr.later {{ display: none; }}
tr.good td:first-child, tr.winner td:first-child {{ border-left: 4px solid #2ca02c; }}
tr.winner td:first-child {{ font-weight: bold; }}
tr.lucky td:first-child {{ border-left: 4px dashed #7fc97f; }}
tr.divider td {{ text-align: left; font-style: italic; border-bottom: 2px solid #2ca02c; }}
.headline {{ font-size: 15px; max-width: 60em; }}
tr.bad td:first-child {{ border-left: 4px solid #d62728; }}
tr.unclear td:first-child {{ border-left: 4px solid #bbbbbb; }}
tr.none td:first-child {{ border-left: 4px solid #999; }}
.quality {{ color: #b35900; font-weight: bold; }}
</style></head><body>
{headline}
{not_done_html(rows)}
{f'<p class="quality">{html.escape(flagged_count_text(rows))} (marked in the first column; column <i>quality_flags</i>, docs/data.md).</p>' if flagged_count_text(rows) else ""}
<p>{len(rows)} dataset(s), best test skill first{", those that beat the baseline after the fleet correction ahead" if winners else ""} ({verdict_counts_text(rows)}, each alone). <i>test_skill</i> is measured on
the test period, which neither training nor the choice of epoch saw; <i>skill</i> is the validation
skill (the part that chose the epoch). Green: the 95% interval of the test skill
(<i>test_skill_low</i> .. <i>test_skill_high</i>) lies above 0, the model beats its naive baseline
(column <i>baseline</i>: zero return, training mean or training share of up moves, per target);
grey: the interval includes 0, <b>{NOT_DISTINGUISHABLE}</b>; red: worse than it.
<i>fleet_verdict</i> and <i>fleet_qvalue</i>: the same question asked of the whole fleet, the
Diebold-Mariano p-values adjusted for the number of datasets (column <i>fleet_correction</i>;
bold green: beats the baseline after it; dashed light green: beats it alone only).
Columns <i>model</i>, <i>features</i> and <i>target</i> say what each dataset trained with.</p>
<p><input id="search" type="search" size="40" placeholder="search: a dataset's name or any cell">
<span id="shown">{len(rows)} dataset(s), {min(len(rows), TABLE_PAGE_ROWS)} shown.</span>
<button id="more"{more_hidden}>{TABLE_PAGE_ROWS} more</button> <button id="all"{more_hidden}>all</button>
Click a column's name to sort by it, again to reverse; <button id="fleet-order">best first</button>
restores the order above.</p>
<table><thead><tr>{header}</tr></thead>
<tbody>
{chr(10).join(body)}
</tbody></table>
<script>{TABLE_SCRIPT}</script></body></html>
"""
    with atomic_write(path) as handle:
        handle.write(page.encode())


@dataclass(frozen=True)
class Coverage:
    """One interval of one dataset on its test period (the table's columns)."""

    dataset: str
    horizon: str  # "" for a model of one horizon
    nominal: float
    held: float
    low: float
    high: float

    @property
    def off(self) -> bool:
        """Its 95% block-bootstrap interval excludes the nominal coverage."""
        return not self.low <= self.nominal <= self.high


def coverage_points(rows: list[dict[str, str]]) -> list[Coverage]:
    """Every dataset's calibrated intervals: one per horizon (test_coverage_h<h> columns), or
    its one interval; datasets without (classification, too few validation windows) left out."""
    points = []
    for row in rows:
        nominal = as_number(row.get("interval_coverage")) if row.get("interval_coverage") else COVERAGE
        horizons = [
            column.removeprefix("test_coverage_h") for column in row if re.fullmatch(r"test_coverage_h\d+", column)
        ]
        for horizon in horizons or [""]:
            suffix = f"_h{horizon}" if horizon else ""
            held = as_number(row.get(f"test_coverage{suffix}"))
            if not math.isnan(held):
                low, high = (as_number(row.get(f"test_coverage_{side}{suffix}")) for side in ("low", "high"))
                points.append(Coverage(row["dataset"], horizon, nominal, held, low, high))
    return points


def draw_coverage_overview(rows: list[dict[str, str]], path: str | os.PathLike) -> None:
    """How every dataset's forecast intervals held on its test period: the share of test
    windows inside, with its 95% block-bootstrap interval, against the nominal coverage (a
    forest chart, one colour per horizon; past MAX_FOREST_ROWS datasets a histogram per
    horizon); the title counts the intervals whose interval excludes the nominal coverage."""
    plt = pyplot()
    points = coverage_points(rows)
    horizons = list(dict.fromkeys(point.horizon for point in points))
    datasets = list(dict.fromkeys(point.dataset for point in points))
    row_of = {dataset: row for row, dataset in enumerate(datasets)}
    named = len(datasets) <= MAX_NAMED_BARS
    forest = len(datasets) <= MAX_FOREST_ROWS
    height = 2.0 + 0.25 * len(datasets) if named and forest else 5.0
    figure, axes = plt.subplots(figsize=(7.0, height), layout="constrained")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for number, horizon in enumerate(horizons):
        chosen = [point for point in points if point.horizon == horizon]
        label = f"horizon {horizon}" if horizon else "test coverage"
        colour = colours[number % len(colours)]
        if forest:
            places = [row_of[point.dataset] + 0.12 * (number - (len(horizons) - 1) / 2) for point in chosen]
            spread = [
                [max(point.held - point.low, 0.0) for point in chosen],
                [max(point.high - point.held, 0.0) for point in chosen],
            ]
            held = [point.held for point in chosen]
            axes.errorbar(held, places, xerr=spread, fmt="o", color=colour, label=label, capsize=2, markersize=4)
        else:
            axes.hist([point.held for point in chosen], bins=40, histtype="step", color=colour, label=label)
    for nominal in sorted({point.nominal for point in points}):
        axes.axvline(nominal, color="black", linewidth=0.8)
    if forest:
        axes.invert_yaxis()
        if named:
            axes.set_yticks(range(len(datasets)), datasets)
        else:
            axes.set_yticks([])
            axes.set_ylabel("datasets")
    else:
        axes.set_ylabel("datasets")
    axes.set_xlabel("share of test windows inside the forecast interval (black: its nominal coverage)")
    if points:
        off = sum(point.off for point in points)
        title = (
            f"Forecast intervals on the test period: {len(points) - off} of {len(points)} held their nominal "
            f"coverage within a 95% interval, {off} clearly off"
        )
        figure.legend(loc="outside lower center", ncols=min(len(horizons), 4), fontsize="small")
    else:
        title = "No calibrated forecast intervals (classification targets, or too few validation windows)"
    axes.set_title(title, fontsize="medium", wrap=True)
    save_figure(figure, path, dpi=100)
    plt.close(figure)


def draw_report_figures(
    table_path: str | os.PathLike,
    metrics_paths: list[str],
    loss_curves_folder: str | os.PathLike,
    skill_plot_path: str | os.PathLike,
    coverage_plot_path: str | os.PathLike,
    table_html_path: str | os.PathLike,
    start_template_path: str | os.PathLike,
    start_page_path: str | os.PathLike,
    processes: int = 1,
) -> list[Path]:
    """The plots job: everything the report shows besides what Snakemake adds itself. The
    loss curves folder is updated in place (only new or re-trained datasets are drawn);
    returns the curves drawn."""
    columns, rows = read_table(table_path)
    write_table_html(rows, columns, table_html_path)
    draw_skill_overview(rows, skill_plot_path)
    draw_coverage_overview(rows, coverage_plot_path)
    write_start_page(start_template_path, rows, start_page_path)
    return refresh_loss_curves(metrics_paths, loss_curves_folder, processes)
