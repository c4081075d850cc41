"""The summary table's rows as the report reads them: read, ranked best first, each row's
verdict class and data-quality mark, and the fleet's counts (winners after the fleet
correction, the best Sharpe ratio against luck). Shared by the start page, the table page and
the fleet charts."""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass

from rnnfleet.scores.multiple_testing import BEATS_AFTER, as_number
from rnnfleet.scores.test_period import BEATS, CONFIDENCE, NOT_DISTINGUISHABLE, WORSE


def read_table(table_path: str | os.PathLike) -> tuple[list[str], list[dict[str, str]]]:
    """The summary table (results/metrics.csv): its columns, whatever they are, and its rows."""
    with open(table_path, newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def best_first(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """Rows by test skill, highest first, those that beat the baseline after the fleet
    correction (rnnfleet.scores.multiple_testing) ahead of all others; then rows with only a validation skill
    (no test period), by that; rows without either last."""

    def order(row: dict[str, str]) -> tuple[int, float]:
        test_skill, skill = as_number(row.get("test_skill")), as_number(row.get("val_skill"))
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
    """What the fleet's verdicts say, from the table's rows (rnnfleet.scores.multiple_testing.fleet_columns)."""

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
            as_number(best.get("test_sharpe_deflated_prob")),
        ),
    )


def quality_mark(row: dict[str, str]) -> str:
    """' [data quality: flat_bars 100.0%]' for a dataset flagged by rnnfleet.bars.quality, else ''."""
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
