"""Data-quality flags of a dataset's bars: degenerate data is named before it trains.

Promises:
- measure_quality(bars, max_gap) gives, from the bars preprocessing trains on (read_clean_bars'
  frame), each flag's measure (QUALITY_FLAGS): the share of flat bars (open = high = low =
  close), of bars with zero volume (None without a volume column), of the price and volume
  columns holding one value throughout (their names in `constant_column_names`), of bars
  whose OHLC contradict each other (high < low, or open or close outside [low, high]), of
  timestamps the file held twice with different bars (identical duplicates are harmless),
  and of the minutes inside the series (steps up to preprocess.max_gap: a longer step is a
  gap, rnnfleet.prep.gaps) that have no bar; plus the median step between bars.
- judge_quality(measures, thresholds): a flag whose measure is above `quality.<flag>.fail`
  fails, else above `quality.<flag>.warn` warns (1 never: no share is above it); a level a
  flag's thresholds leave out is not judged.
- Only the fail thresholds decide whether a dataset trains (fail_thresholds: the preprocess
  job's setting), so a changed warn threshold re-trains nothing: warnings are judged where a
  table is written (quality_flags: inspect, results/metrics.csv, the report) with the
  thresholds of that run.
- check_quality: the one line of a failure (a DataError naming the file, the flags, their
  shares and the config keys) or the warning lines for the log.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from rnnfleet.errors import DataError
from rnnfleet.prep.gaps import duration_text, max_gap_nanoseconds

# Each flag, with the words a warning or failure line uses for it.
FLAG_WORDS = {
    "flat_bars": "flat bars (open = high = low = close)",
    "zero_volume": "bars with zero volume",
    "constant_columns": "constant columns (one value throughout)",
    "ohlc_inconsistent": "inconsistent OHLC (high < low, or open or close outside [low, high])",
    "conflicting_duplicates": "conflicting duplicates (one timestamp, different bars; the last was kept)",
    "missing_minutes": "sparse bars (minutes without a bar, gaps aside: one bar ahead is often several minutes)",
}
QUALITY_FLAGS = tuple(FLAG_WORDS)
# As the schema's `quality:` defaults (tests/unit/test_quality.py checks they agree).
QUALITY_DEFAULTS = {
    "flat_bars": {"warn": 0.5, "fail": 1.0},
    "zero_volume": {"warn": 0.25, "fail": 1.0},
    "constant_columns": {"warn": 0.0, "fail": 1.0},
    "ohlc_inconsistent": {"warn": 0.0, "fail": 0.001},
    "conflicting_duplicates": {"warn": 0.0, "fail": 0.001},
    "missing_minutes": {"warn": 0.25, "fail": 1.0},
}
# The columns a quality row has (inspect.csv, results/metrics.csv), flags first.
QUALITY_COLUMNS = (*QUALITY_FLAGS, "constant_column_names", "median_step", "quality_flags")
ONE_MINUTE_NS = 60 * 10**9
SHARE_DIGITS = 6


class Finding(NamedTuple):
    """A flag above one of its thresholds: level is "warn" or "fail"."""

    flag: str
    level: str
    share: float
    threshold: float

    def text(self, measures: dict) -> str:
        detail = f" ({measures['constant_column_names']})" if self.flag == "constant_columns" else ""
        of = {"constant_columns": "columns", "missing_minutes": "minutes"}.get(self.flag, "bars")
        return (
            f"{FLAG_WORDS[self.flag]}{detail}: {share_text(self.share)} of the {of}, above "
            f"quality.{self.flag}.{self.level} = {self.threshold:g}"
        )


def share_text(share: float) -> str:
    """'45.0%', '0.53%', '0.0012%': a share with the digits that tell it from zero."""
    if share == 0 or share >= 0.01:
        return f"{share:.1%}"
    return f"{100 * share:.2g}%"


def has_volume(bars) -> bool:
    """Whether the bars come with a volume column (some files have none)."""
    return "volume" in bars.columns and bool(bars["volume"].notna().any())


def missing_minutes_share(timestamps_ns: np.ndarray, max_gap: str | None) -> float:
    """The share of the minutes inside the series' pieces (between gaps longer than max_gap)
    that have no bar."""
    steps = np.diff(timestamps_ns)
    limit = max_gap_nanoseconds(max_gap)
    inside = steps if limit is None else steps[steps <= limit]
    missing = int(np.maximum(inside // ONE_MINUTE_NS - 1, 0).sum())
    return missing / (missing + len(timestamps_ns)) if len(timestamps_ns) else 0.0


def measure_quality(bars, max_gap: str | None) -> dict:
    """Each flag's measure of read_clean_bars' frame (see the module doc), shares rounded to
    SHARE_DIGITS; zero_volume is None without a volume column."""
    return measures_of(bar_counts(bars), bars["timestamp"].array.asi8, max_gap)


def bar_counts(bars) -> dict:
    """What the measures count of the bars' values (JSON-able): the bars, the flat, the
    zero-volume and the inconsistent ones, the conflicting duplicates, each column's least and
    greatest value. Counts of consecutive stretches of bars add up (add_counts)."""
    columns = ["open", "high", "low", "close"] + (["volume"] if has_volume(bars) else [])
    values = {column: bars[column].to_numpy(dtype=np.float64) for column in columns}
    open_, high, low, close = (values[key] for key in ("open", "high", "low", "close"))
    flat = (open_ == high) & (high == low) & (low == close)
    inconsistent = (high < low) | (open_ < low) | (open_ > high) | (close < low) | (close > high)
    return {
        "columns": columns,
        "rows": len(bars),
        "flat": int(flat.sum()),
        "zero_volume": int((values["volume"] == 0).sum()) if "volume" in values else None,
        "inconsistent": int(inconsistent.sum()),
        "conflicting": int(bars.attrs.get("conflicting_duplicates", 0)),
        "least": {column: float(np.nanmin(values[column])) if len(bars) else None for column in columns},
        "greatest": {column: float(np.nanmax(values[column])) if len(bars) else None for column in columns},
    }


def add_counts(earlier: dict, later: dict) -> dict | None:
    """bar_counts of two stretches of bars, one after the other; None when their columns differ."""
    if earlier["columns"] != later["columns"]:
        return None
    added = {key: earlier[key] + later[key] for key in ("rows", "flat", "inconsistent", "conflicting")}
    volume = earlier["zero_volume"]
    return {
        "columns": earlier["columns"],
        **added,
        "zero_volume": None if volume is None else volume + later["zero_volume"],
        "least": {key: min(value, later["least"][key]) for key, value in earlier["least"].items()},
        "greatest": {key: max(value, later["greatest"][key]) for key, value in earlier["greatest"].items()},
    }


def measures_of(counts: dict, timestamps_ns: np.ndarray, max_gap: str | None) -> dict:
    """The measures (measure_quality) from bar_counts and every bar's time."""
    rows, columns = counts["rows"], counts["columns"]
    constant = [column for column in columns if rows > 1 and counts["least"][column] == counts["greatest"][column]]
    steps = np.diff(timestamps_ns)

    def share(count: float) -> float:
        return round(float(count) / rows, SHARE_DIGITS) if rows else 0.0

    return {
        "flat_bars": share(counts["flat"]),
        "zero_volume": None if counts["zero_volume"] is None else share(counts["zero_volume"]),
        "constant_columns": round(len(constant) / len(columns), SHARE_DIGITS),
        "ohlc_inconsistent": share(counts["inconsistent"]),
        "conflicting_duplicates": share(counts["conflicting"]),
        "missing_minutes": round(missing_minutes_share(timestamps_ns, max_gap), SHARE_DIGITS),
        "constant_column_names": " ".join(constant),
        "median_step": duration_text(int(np.median(steps))) if len(steps) else "",
    }


def judge_quality(measures: dict, thresholds: dict | None) -> list[Finding]:
    """The flags above a threshold (fail before warn for the same flag; a flag fails or warns, never both)."""
    thresholds = {**QUALITY_DEFAULTS, **(thresholds or {})}
    findings = []
    for flag in QUALITY_FLAGS:
        share = measures.get(flag)
        if share is None or share == "":  # zero_volume of bars without volume; not measured
            continue
        limits = thresholds[flag]
        for level in ("fail", "warn"):
            if level in limits and float(share) > float(limits[level]):
                findings.append(Finding(flag, level, share, float(limits[level])))
                break
    return findings


def fail_thresholds(thresholds: dict) -> dict:
    """The `quality:` thresholds that decide whether a dataset trains: each flag's fail level."""
    return {flag: {"fail": limits["fail"]} for flag, limits in {**QUALITY_DEFAULTS, **thresholds}.items()}


def quality_flags(measures: dict, thresholds: dict | None) -> str:
    """The quality_flags cell of a dataset's measures under `thresholds` ('' for none)."""
    return flags_text(judge_quality(measures, thresholds))


def measures_text(measures: dict) -> str:
    """'flat_bars 100.0%, zero_volume 45.0%': the flags that measured above zero ('' for none)."""
    return ", ".join(
        f"{flag} {share_text(measures[flag])}" for flag in QUALITY_FLAGS if measures.get(flag) not in (None, 0, 0.0)
    )


def flags_text(findings: list[Finding]) -> str:
    """The quality_flags cell: 'flat_bars 100.0%, zero_volume 45.0%' ('' for none)."""
    return ", ".join(f"{finding.flag} {share_text(finding.share)}" for finding in findings)


def check_quality(bars, max_gap: str | None, thresholds: dict | None, name: str) -> tuple[dict, list[str]]:
    """(the quality row: measures and quality_flags (the warnings), the warning lines), or a
    DataError naming `name`, each failing flag, its share and its threshold's config key."""
    return check_measures(measure_quality(bars, max_gap), thresholds, name)


def check_measures(measures: dict, thresholds: dict | None, name: str) -> tuple[dict, list[str]]:
    """check_quality of measures already taken."""
    findings = judge_quality(measures, thresholds)
    failures = [finding for finding in findings if finding.level == "fail"]
    if failures:
        raise DataError(
            f"{name}: data quality: {'; '.join(finding.text(measures) for finding in failures)}; "
            "fix the file, or raise the threshold if the data is what you mean to train on"
        )
    row = {**measures, "quality_flags": flags_text(findings)}
    return row, [f"{name}: warning: data quality: {finding.text(measures)}" for finding in findings]
