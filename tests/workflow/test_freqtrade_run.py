"""freqtrade's data folders read as they are: its four candle formats (real files from
freqtrade's own test data, tests/fixtures/freqtrade/PROVENANCE.md), `rnnfleet init` naming the
datasets by pair, and a real run training them."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import REPO, TINY_CONFIG

from rnnfleet.bars.formats import read_bars

FIXTURES = REPO / "tests" / "fixtures" / "freqtrade"
FORMATS = {
    "json": "json/binance/UNITTEST_BTC-1m.json",
    "jsongz": "jsongz/binance/UNITTEST_BTC-1m.json.gz",
    "feather": "feather/binance/XRP_ETH-1m.feather",
    "parquet": "parquet/binance/XRP_ETH-1m.parquet",
}
ENV = {**os.environ, "PYTHONPATH": str(REPO / "scripts")}
ENTRY_POINT = [sys.executable, "-c", "import sys; from rnnfleet.cli.commands import main; sys.exit(main())"]


@pytest.mark.parametrize("data_format", FORMATS)
def test_each_freqtrade_candle_format_reads_as_utc_one_minute_bars(data_format):
    bars = read_bars(FIXTURES / FORMATS[data_format])
    assert len(bars) == 720
    steps = bars["timestamp"].diff().dropna()
    assert steps.min() == pd.Timedelta(minutes=1) and (steps % pd.Timedelta(minutes=1)).eq(pd.Timedelta(0)).all()
    assert list(bars.columns) == ["timestamp", "open", "high", "low", "close", "volume"]
    if data_format.startswith("json"):
        assert bars.attrs["read_as"].startswith(
            "freqtrade: JSON candles, 6 values a row, time from column 0 in epoch ms"
        )
        assert bars["timestamp"].iloc[0] == pd.Timestamp(1509836520000, unit="ms", tz="UTC")  # the file's first row
        assert (bars["close"].iloc[0], bars["volume"].iloc[0]) == (0.00162008, 108.14853839)
    else:
        assert "column 'date' as zoned times, UTC" in bars.attrs["read_as"]
        assert bars["timestamp"].iloc[0] == pd.Timestamp("2019-10-11 00:00", tz="UTC")


def test_the_json_and_jsongz_files_and_the_feather_and_parquet_files_hold_the_same_bars():
    pd.testing.assert_frame_equal(read_bars(FIXTURES / FORMATS["json"]), read_bars(FIXTURES / FORMATS["jsongz"]))
    pd.testing.assert_frame_equal(read_bars(FIXTURES / FORMATS["feather"]), read_bars(FIXTURES / FORMATS["parquet"]))


def init(folder: Path, data: Path, cwd: Path) -> str:
    result = subprocess.run(
        [*ENTRY_POINT, "init", str(folder), "--data", str(data)], cwd=cwd, env=ENV, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_init_on_freqtrade_folders_names_the_datasets_by_pair_spot_or_futures(tmp_path):
    exchange = FIXTURES / "feather" / "binance"
    spot = init(tmp_path / "spot", exchange, tmp_path)
    assert (
        f"{exchange} holds freqtrade's data folder (binance, spot candles, one file per pair): "
        "datasets.files set to '{dataset}-1m.*' (1 datasets: XRP_ETH)"
    ) in spot
    assert "1 dataset(s) found; XRP_ETH's first file, " in spot and ": 720 bars" in spot
    futures = init(tmp_path / "futures", exchange / "futures", tmp_path)
    # The one-minute candles only: not the five-minute file, not the funding rates.
    assert "datasets.files set to '{dataset}-1m-futures.*' (1 datasets: XRP_ETH_ETH)" in futures
    user_data = init(tmp_path / "user_data", FIXTURES / "json", tmp_path)  # user_data/data: exchange folders
    assert "datasets.files set to 'binance/{dataset}-1m.*' (1 datasets: UNITTEST_BTC)" in user_data


def test_a_freqtrade_exchange_folder_of_every_format_trains_one_model_per_pair(tmp_path):
    """One exchange folder holding a pair in each of the four formats (freqtrade writes one
    format per folder; here one folder tries them all), its futures/ beside them."""
    exchange = tmp_path / "user_data" / "data" / "binance"
    (exchange / "futures").mkdir(parents=True)
    for data_format, path in FORMATS.items():
        pair = {"json": "BTC_USDT", "jsongz": "ETH_BTC", "feather": "XRP_ETH", "parquet": "XRP_BTC"}[data_format]
        shutil.copy(FIXTURES / path, exchange / Path(path).name.replace(Path(path).name.split("-1m")[0], pair))
    for path in (FIXTURES / "feather" / "binance" / "futures").iterdir():
        shutil.copy(path, exchange / "futures" / path.name)
    init(tmp_path / "fleet", exchange, tmp_path)
    folder = tmp_path / "fleet"
    config_path = folder / "config" / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    assert config["datasets"]["files"] == "{dataset}-1m.*"
    for section in ("model", "train"):
        config[section].update(TINY_CONFIG[section])
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    run = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2"], cwd=folder, env=ENV, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-4000:]
    pairs = ["BTC_USDT", "ETH_BTC", "XRP_BTC", "XRP_ETH"]
    assert sorted(path.stem for path in (folder / "models").glob("*.pt")) == pairs
    with open(folder / "results" / "metrics.csv") as table:
        rows = {row["dataset"]: row for row in csv.DictReader(table)}
    assert sorted(rows) == pairs and {row["status"] for row in rows.values()} == {"ok"}
    assert rows["BTC_USDT"]["timezone"] == "UTC (epoch)" and rows["XRP_ETH"]["timezone"] == "in the file"
    log = (folder / "logs" / "preprocess" / "ETH_BTC.log").read_text()
    assert "ETH_BTC-1m.json.gz: read as freqtrade: JSON candles" in log
