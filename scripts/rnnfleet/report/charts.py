"""The fleet's charts (matplotlib, PNG): every dataset's test skill with its interval (a forest
chart, or a distribution past MAX_FOREST_ROWS), and how the forecast intervals held."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from rnnfleet.atomic_files import atomic_write
from rnnfleet.report.rows import (
    CLASS_STYLES,
    VERDICT_CLASSES,
    best_first,
    flagged_count_text,
    fleet_counts,
    fleet_winners,
    quality_mark,
    verdict_class,
)
from rnnfleet.scores.intervals import COVERAGE
from rnnfleet.scores.multiple_testing import as_number
from rnnfleet.scores.test_period import BEATS, NOT_DISTINGUISHABLE, WORSE

# Above this many datasets the overview drops the names (they are in the summary table).
MAX_NAMED_BARS = 60


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
        scored = [row for row in ranked if not math.isnan(as_number(row.get("val_skill")))]
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
        skills = [as_number(row["val_skill"]) for row in scored]
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
