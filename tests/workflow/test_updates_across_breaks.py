"""New bars after a market's break update a model from its previous weights (the real
snakemake): an equity's day files (09:30 to 16:00 New York, a night between two days) gain a
day, and a forex pair's day files gain the Monday after a weekend. The break at the junction
of the old bars and the new is a gap like the others, not a change of the bars the model saw."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import snakemake, write_config

from rnnfleet.synthetic import synthetic_bars

pytestmark = pytest.mark.long  # minutes: started first (tests/conftest.py)

SESSION_BARS = 390  # 09:30 to 16:00 New York, 14:30 to 21:00 UTC in March before the clocks change
TRADING_DAYS = ["2024-03-01", "2024-03-04", "2024-03-05", "2024-03-06", "2024-03-07"]  # a weekend after the first
FOREX_DAYS = ["2024-03-06", "2024-03-07", "2024-03-08", "2024-03-11"]  # Wednesday to Friday, then Monday
FOREX_BARS = 600  # of each day, from 00:00 UTC: the weekend is the one break longer than max_gap


def day_files(folder: Path, symbol: str, days: list[str], bars_per_day: int, start: str, seed: int) -> list[Path]:
    """One CSV per day (`<symbol>-1m-<day>.csv`, as polygon's and Data Vision's day files), cut
    from one continuous series of bars whose times are those days' sessions."""
    bars = synthetic_bars(bars_per_day * len(days), seed)
    times = [
        pd.Timestamp(f"{day} {start}") + pd.Timedelta(minutes=minute) for day in days for minute in range(bars_per_day)
    ]
    bars["timestamp"] = [time.strftime("%Y-%m-%d %H:%M:%S") for time in times]
    paths = []
    for number, day in enumerate(days):
        path = folder / f"{symbol}-1m-{day}.csv"
        bars.iloc[number * bars_per_day : (number + 1) * bars_per_day].to_csv(path, index=False, float_format="%.6f")
        paths.append(path)
    return paths


def metrics(workdir: Path, dataset: str) -> dict:
    return json.loads((workdir / "metrics" / f"{dataset}.json").read_text())


def test_a_day_after_a_night_and_a_monday_after_a_weekend_update_the_models(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    spy = day_files(data, "SPY", TRADING_DAYS, SESSION_BARS, "14:30", 41)
    eurusd = day_files(data, "EURUSD", FOREX_DAYS, FOREX_BARS, "00:00", 42)
    newest = [spy[-1], eurusd[-1]]
    held_back = {path: path.read_bytes() for path in newest}
    for path in newest:
        path.unlink()
    write_config(
        tmp_path,
        data_dir="data",
        datasets={"files": "{dataset}-1m-*"},
        update={"recent_bars": 100, "max_skill_drop": 100},  # tiny models' skills are noise
    )
    snakemake(tmp_path)
    first = {dataset: metrics(tmp_path, dataset) for dataset in ("SPY", "EURUSD")}
    assert {m["made"] for m in first.values()} == {"full"}

    for path, content in held_back.items():  # the morning's files
        path.write_bytes(content)
    snakemake(tmp_path)

    for dataset, bars in (("SPY", SESSION_BARS), ("EURUSD", FOREX_BARS)):
        after = metrics(tmp_path, dataset)
        log = (tmp_path / "logs" / "train" / f"{dataset}.log").read_text()
        assert "earlier bars changed" not in log, log
        assert after["made"] == "update 1" and after["made_reason"] == f"update: {bars} new bars", after["made_reason"]
        assert after["rows"] == first[dataset]["rows"] + bars
        preprocess_log = (tmp_path / "logs" / "preprocess" / f"{dataset}.log").read_text()
        assert f"the rows of {bars:,} new bars appended" in preprocess_log  # the new file alone was read
