"""The report's start page: the fleet's numbers and headline written into the page's template
(HEADLINE_MARKER), as plain text or reStructuredText literals."""

from __future__ import annotations

import math
import os
from collections import Counter
from pathlib import Path

from rnnfleet.atomic_files import atomic_write
from rnnfleet.report.rows import FleetCounts, fleet_counts, quality_mark
from rnnfleet.scores.intervals import COVERAGE
from rnnfleet.scores.multiple_testing import as_number
from rnnfleet.scores.start_verdicts import FLEET_START_BETTER, FLEET_START_WORSE, ONE_FIT, rows_start_verdict


def plain_name(name: str) -> str:
    return name


def rst_literal(name: str) -> str:
    return f"``{name}``"


def fleet_numbers(rows: list[dict[str, str]], name_markup=plain_name, shown: int = 3) -> str:
    """What the table says of the fleet in two sentences: datasets trained from scratch and
    updated, not done, flagged; the best and worst test skills (the validation skill where
    there is no test period). name_markup: how a dataset's or a column's name is written
    (rst_literal on the report's start page; plain text on the table's HTML page)."""
    made = [str(row.get("made") or "") for row in rows if row.get("status", "ok") == "ok"]
    not_done = Counter(row["status"] for row in rows if row.get("status", "ok") != "ok")
    parts = [f"{sum(label == 'full' for label in made)} trained from scratch"]
    parts.append(f"{sum(label.startswith('update') for label in made)} updated (column {name_markup('made')})")
    if not_done:
        kinds = ", ".join(f"{count} {status}" for status, count in not_done.most_common())
        parts.append(f"{sum(not_done.values())} not done ({kinds})")
    flagged = sum(bool(quality_mark(row)) for row in rows)
    if flagged:
        parts.append(f"{flagged} flagged for data quality")
    text = f"{len(rows)} dataset(s): {', '.join(parts)}."
    column = "test_skill" if any(not math.isnan(as_number(row.get("test_skill"))) for row in rows) else "val_skill"
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
    return text + coverage_text(rows, name_markup)


def coverage_text(rows: list[dict[str, str]], name_markup=plain_name) -> str:
    """' The 90% forecast intervals held ...': how the intervals did on the test period
    (rnnfleet.scores.intervals), '' where no dataset has them."""
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
        f"excludes it: column {name_markup('test_coverage')})."
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
    if comparison := init_headline(rows):  # train.compare_init (rnnfleet.scores.start_verdicts) leads
        headline = f"{comparison}\n\n{headline}"
    template = template.replace(HEADLINE_MARKER, headline, 1)
    with atomic_write(path) as handle:
        handle.write(template.encode())


def init_headline(rows: list[dict]) -> str:
    """The report's first line with train.compare_init (rnnfleet.report.start_page.write_start_page):
    the fleet's verdict on its start (rnnfleet.scores.start_verdicts.rows_start_verdict), the
    pretraining's coverage, how often one model for all beat both, how many fits kept the
    pretrained weights unchanged, and the fits' training time; '' without a comparison."""
    verdict = rows_start_verdict(rows)
    if verdict is None:
        return ""
    compared = [row for row in rows if row.get("init_verdict")]
    one_model = sum(
        as_number(row.get("init_pretrained_test_skill"))
        > max(as_number(row.get("init_fleet_test_skill")), as_number(row.get("init_scratch_test_skill")))
        for row in compared
    )
    kept_as_is = sum(str(row.get("init_fleet_best_epoch")) == "0" for row in compared)
    seconds = {
        start: sum(as_number(row.get(f"init_{start}_seconds")) for row in compared) for start in ("fleet", "scratch")
    }
    coverage = next((row["init_pretraining"] for row in rows if row.get("init_pretraining")), "")
    seeded = [row for row in compared if row["init_verdict"] != ONE_FIT]
    per_dataset = (
        f" Across seeds, it beat scratch on {sum(row['init_verdict'] == FLEET_START_BETTER for row in seeded)} of "
        f"{len(seeded)} datasets after the fleet's correction, was worse on "
        f"{sum(row['init_verdict'] == FLEET_START_WORSE for row in seeded)}."
        if seeded
        else " One fit from each start per dataset: no verdict per dataset (train.compare_init_seeds)."
    )
    return (
        f"**The fleet's start.** {verdict.words[0].upper()}{verdict.words[1:]}.{per_dataset}"
        + (f" The pretraining: {coverage}." if coverage else "")
        + f" One model for all beat both on {one_model}; {kept_as_is} fit(s) from the start kept the pretrained "
        f"weights unchanged (best epoch 0); training time {seconds['fleet']:.0f} s from the fleet's start against "
        f"{seconds['scratch']:.0f} s from scratch (the pretraining not included)."
    )
