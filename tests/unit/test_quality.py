"""The data-quality flags (rnnfleet.bars.quality): each measure, the warn and fail thresholds, where
they are stored (array file, metrics table) and how the report marks a flagged dataset."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REPO

from rnnfleet.bars.quality import (
    QUALITY_DEFAULTS,
    check_quality,
    fail_thresholds,
    judge_quality,
    measure_quality,
    quality_flags,
)
from rnnfleet.errors import DataError
from rnnfleet.prep.arrays_file import load_arrays, save_arrays
from rnnfleet.prep.prepare import prepare_dataset, read_clean_bars
from rnnfleet.report.summary import SUMMARY_COLUMNS, metrics_row
from rnnfleet.report.table_page import write_table_html
from rnnfleet.synthetic import synthetic_bars

ROWS = 400


def bars_frame(bars: pd.DataFrame) -> pd.DataFrame:
    """synthetic_bars' text times as the UTC times read_clean_bars gives."""
    return bars.assign(timestamp=pd.to_datetime(bars["timestamp"], utc=True).astype("datetime64[ns, UTC]"))


def read_written(tmp_path, bars: pd.DataFrame, name: str = "bars.csv") -> pd.DataFrame:
    path = tmp_path / name
    bars.to_csv(path, index=False, float_format="%.6f")
    return read_clean_bars(str(path), None, 0.01)


def flat(bars: pd.DataFrame) -> pd.DataFrame:
    return bars.assign(open=bars["close"], high=bars["close"], low=bars["close"])


def test_clean_bars_have_no_flag():
    measures = measure_quality(bars_frame(synthetic_bars(ROWS, 1)), "15min")
    assert measures == {
        "flat_bars": 0.0,
        "zero_volume": 0.0,
        "constant_columns": 0.0,
        "ohlc_inconsistent": 0.0,
        "conflicting_duplicates": 0.0,
        "missing_minutes": 0.0,
        "constant_column_names": "",
        "median_step": "00:01:00",
    }
    assert judge_quality(measures, QUALITY_DEFAULTS) == []


def test_flat_bars_and_zero_volume_are_measured_and_warned_of():
    bars = flat(synthetic_bars(ROWS, 2))
    bars.loc[: int(ROWS * 0.45) - 1, "volume"] = 0.0
    row, warnings = check_quality(bars_frame(bars), "15min", QUALITY_DEFAULTS, "FLAT.csv")
    assert (row["flat_bars"], row["zero_volume"]) == (1.0, 0.45)
    assert row["quality_flags"] == "flat_bars 100.0%, zero_volume 45.0%"
    assert warnings == [
        "FLAT.csv: warning: data quality: flat bars (open = high = low = close): 100.0% of the bars, "
        "above quality.flat_bars.warn = 0.5",
        "FLAT.csv: warning: data quality: bars with zero volume: 45.0% of the bars, above quality.zero_volume.warn = 0.25",
    ]


def test_a_constant_column_is_named():
    bars = synthetic_bars(ROWS, 3).assign(volume=7.0)
    row, warnings = check_quality(bars_frame(bars), "15min", QUALITY_DEFAULTS, "CONST.csv")
    assert (row["constant_columns"], row["constant_column_names"]) == (0.2, "volume")
    assert row["quality_flags"] == "constant_columns 20.0%"
    assert warnings == [
        "CONST.csv: warning: data quality: constant columns (one value throughout) (volume): 20.0% of the columns, "
        "above quality.constant_columns.warn = 0"
    ]


def test_bars_without_volume_get_no_zero_volume_flag():
    bars = bars_frame(synthetic_bars(ROWS, 4)).drop(columns="volume")
    measures = measure_quality(bars, "15min")
    assert measures["zero_volume"] is None
    assert [finding.flag for finding in judge_quality(measures, {"zero_volume": {"warn": 0, "fail": 0}})] == []
    assert measure_quality(bars_frame(synthetic_bars(ROWS, 4)).assign(volume=np.nan), "15min")["zero_volume"] is None


@pytest.mark.parametrize(
    "column, value",
    [("high", "below low"), ("close", "above high"), ("open", "below low")],
)
def test_inconsistent_ohlc_beyond_the_threshold_fails_with_one_line(column, value):
    bars = synthetic_bars(ROWS, 5)
    broken = bars.index[:4]
    if value == "below low":
        bars.loc[broken, column] = bars.loc[broken, "low"] * 0.99
    else:
        bars.loc[broken, column] = bars.loc[broken, "high"] * 1.01
    with pytest.raises(DataError) as raised:
        check_quality(bars_frame(bars), "15min", QUALITY_DEFAULTS, "HL.csv")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("HL.csv: data quality: inconsistent OHLC")
    assert "1.0% of the bars, above quality.ohlc_inconsistent.fail = 0.001" in message


def test_high_below_low_on_every_row_is_measured():
    bars = synthetic_bars(ROWS, 5)
    bars = bars.assign(high=bars["low"], low=bars["high"])
    assert measure_quality(bars_frame(bars), "15min")["ohlc_inconsistent"] == 1.0


def test_below_the_fail_threshold_inconsistent_ohlc_warns():
    bars = synthetic_bars(ROWS, 5)
    bars.loc[0, "high"] = bars.loc[0, "low"] * 0.99
    row, warnings = check_quality(bars_frame(bars), "15min", {"ohlc_inconsistent": {"warn": 0, "fail": 0.01}}, "x")
    assert row["quality_flags"] == "ohlc_inconsistent 0.25%" and len(warnings) == 1


def test_conflicting_duplicates_are_counted_and_identical_ones_are_harmless(tmp_path):
    bars = synthetic_bars(ROWS, 6)
    identical = pd.concat([bars, bars.iloc[50:80]]).sort_values("timestamp", kind="stable")
    frame = read_written(tmp_path, identical, "identical.csv")
    assert frame.attrs["conflicting_duplicates"] == 0
    assert measure_quality(frame, "15min")["conflicting_duplicates"] == 0.0

    changed = bars.iloc[100:120].assign(close=bars["close"].iloc[100:120] * 3)
    conflicting = pd.concat([bars, changed, bars.iloc[200:210]])
    frame = read_written(tmp_path, conflicting, "conflicting.csv")
    assert len(frame) == ROWS and frame.attrs["conflicting_duplicates"] == 20
    assert "(20 of those timestamps held different bars)" in frame.attrs["notes"][-1]
    with pytest.raises(DataError, match=r"conflicting duplicates .*: 5\.0% of the bars, above quality\."):
        check_quality(frame, "15min", QUALITY_DEFAULTS, "DUP.csv")


def test_conflicting_duplicates_of_joined_files_add_up(tmp_path):
    bars = synthetic_bars(ROWS, 7)
    first, second = bars.iloc[:200], bars.iloc[200:]
    for part, name in ((first, "a.csv"), (second, "b.csv")):
        doubled = pd.concat([part, part.iloc[:5].assign(open=part["open"].iloc[:5] + 1)])
        doubled.to_csv(tmp_path / name, index=False, float_format="%.6f")
    frame = read_clean_bars([str(tmp_path / "a.csv"), str(tmp_path / "b.csv")], None, 0.01)
    assert frame.attrs["conflicting_duplicates"] == 10


def sparse_times(pattern_minutes: list[int], rows: int) -> pd.Series:
    steps = np.resize(np.array(pattern_minutes), rows - 1)
    minutes = np.concatenate([[0], np.cumsum(steps)])
    times = pd.Timestamp("2024-01-01", tz="UTC") + pd.to_timedelta(minutes, unit="min")
    return pd.Series(times).astype("datetime64[ns, UTC]")


def test_missing_minutes_count_the_minutes_without_a_bar_but_not_the_gaps():
    bars = bars_frame(synthetic_bars(ROWS, 8))
    sparse = bars.assign(timestamp=sparse_times([1, 1, 3], ROWS))  # 2 minutes missing every 3 bars
    measures = measure_quality(sparse, "15min")
    missing = 2 * ((ROWS - 1) // 3)
    assert measures["missing_minutes"] == round(missing / (missing + ROWS), 6)
    assert measures["median_step"] == "00:01:00"
    row, warnings = check_quality(sparse, "15min", QUALITY_DEFAULTS, "SPARSE.csv")
    assert row["quality_flags"].startswith("missing_minutes ") and "quality.missing_minutes.warn" in warnings[0]

    # A weekend is a gap (longer than preprocess.max_gap), not missing minutes...
    weekend = bars.assign(timestamp=sparse_times([1] * 199 + [2 * 24 * 60] + [1] * 200, ROWS))
    assert measure_quality(weekend, "15min")["missing_minutes"] == 0.0
    # ...unless gaps are off.
    assert measure_quality(weekend, "off")["missing_minutes"] > 0.8


def test_a_threshold_of_one_never_flags_and_the_config_overrides_the_defaults():
    measures = measure_quality(bars_frame(flat(synthetic_bars(ROWS, 9))), "15min")
    assert judge_quality(measures, {"flat_bars": {"warn": 1, "fail": 1}}) == []
    [finding] = judge_quality(measures, {"flat_bars": {"warn": 0.1, "fail": 0.9}})
    assert (finding.flag, finding.level) == ("flat_bars", "fail")


def test_the_defaults_are_the_schemas():
    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    flags = schema["properties"]["quality"]["properties"]
    written = {
        flag: {level: spec["properties"][level]["default"] for level in ("warn", "fail")}
        for flag, spec in flags.items()
    }
    assert written == QUALITY_DEFAULTS


def test_preprocess_stores_the_flags_in_the_array_file_and_fails_with_one_line(tmp_path, capsys):
    path = tmp_path / "FLAT.csv"
    flat(synthetic_bars(ROWS, 10)).to_csv(path, index=False, float_format="%.6f")
    arrays, _ = prepare_dataset(str(path), 16, 1, 0.2, quality=fail_thresholds(QUALITY_DEFAULTS))
    assert f"{path}: data quality measured: flat_bars 100.0%" in capsys.readouterr().err
    save_arrays(arrays, tmp_path / "FLAT.npz")
    assert load_arrays(tmp_path / "FLAT.npz").quality == arrays.quality
    assert arrays.quality["flat_bars"] == 1.0 and "quality_flags" not in arrays.quality
    assert quality_flags(arrays.quality, QUALITY_DEFAULTS) == "flat_bars 100.0%"
    assert quality_flags(arrays.quality, {"flat_bars": {"warn": 1.0, "fail": 1.0}}) == ""

    broken = synthetic_bars(ROWS, 10)
    broken = broken.assign(high=broken["low"], low=broken["high"])
    broken.to_csv(tmp_path / "HL.csv", index=False, float_format="%.6f")
    with pytest.raises(DataError, match=r"^.*HL\.csv: data quality: inconsistent OHLC .*100\.0% of the bars"):
        prepare_dataset(str(tmp_path / "HL.csv"), 16, 1, 0.2)


def test_an_array_file_from_before_the_flags_loads_without_them(tmp_path):
    path = tmp_path / "bars.csv"
    synthetic_bars(ROWS, 11).to_csv(path, index=False, float_format="%.6f")
    arrays, _ = prepare_dataset(str(path), 16, 1, 0.2)
    save_arrays(arrays, tmp_path / "new.npz")
    with np.load(tmp_path / "new.npz") as stored:
        np.savez(tmp_path / "old.npz", **{key: stored[key] for key in stored.files if key != "quality"})
    assert load_arrays(tmp_path / "old.npz").quality == {}


def test_the_summary_table_has_the_flags(tmp_path):
    metrics = {"dataset": "FLAT_1m", "flat_bars": 1.0, "zero_volume": None}
    (tmp_path / "m.json").write_text(json.dumps(metrics))
    row = metrics_row(tmp_path / "m.json")
    assert {"quality_flags", "flat_bars", "zero_volume", "missing_minutes", "median_step"} <= set(SUMMARY_COLUMNS)
    assert (row["quality_flags"], row["flat_bars"], row["zero_volume"]) == ("flat_bars 100.0%", 1.0, None)
    # the run's warn thresholds decide, not the ones the arrays were made with
    assert metrics_row(tmp_path / "m.json", {"flat_bars": {"warn": 1.0, "fail": 1.0}})["quality_flags"] == ""


def test_the_report_table_marks_a_flagged_dataset(tmp_path):
    rows = [
        {
            "dataset": "FLAT_1m",
            "test_skill": "0.088",
            "test_verdict": "beats the baseline",
            "quality_flags": "flat_bars 100.0%",
        },
        {"dataset": "CLEAN_1m", "test_skill": "0.01", "test_verdict": "beats the baseline", "quality_flags": ""},
    ]
    write_table_html(rows, ["dataset", "test_skill", "quality_flags"], tmp_path / "table.html")
    page = (tmp_path / "table.html").read_text()
    assert '<td>FLAT_1m <span class="quality">&#9888; [data quality: flat_bars 100.0%]</span></td>' in page
    assert "<td>CLEAN_1m</td>" in page
    assert "1 dataset(s) flagged for data quality" in page
