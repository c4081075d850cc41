"""A QuantConnect Lean data folder (equity/usa/minute/<ticker>/<YYYYMMDD>_trade.zip, one
headerless CSV a day: milliseconds since midnight in New York, prices in ten-thousandths)
trains one model per ticker through the real snakemake with the default config; its bars land
at the right UTC instants, with dollar prices."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
from conftest import snakemake, write_config

from rnnfleet.prep.prepare import read_clean_bars
from rnnfleet.synthetic import synthetic_bars

DAYS = ("20240102", "20240103")  # winter: New York is UTC-5
SESSION_BARS = 390  # 09:30 to 15:59 New York time


def write_lean_day(folder: Path, ticker: str, day: str, bars: pd.DataFrame) -> Path:
    """One day's zip as Lean writes it: ms since midnight, prices * 10000 as integers."""
    milliseconds = (9 * 60 + 30 + np.arange(len(bars))) * 60_000
    prices = {key: np.round(bars[key].to_numpy() * 10_000).astype(np.int64) for key in ("open", "high", "low", "close")}
    frame = pd.DataFrame({"time": milliseconds, **prices, "volume": bars["volume"].round().astype(np.int64)})
    path = folder / "equity" / "usa" / "minute" / ticker / f"{day}_trade.zip"
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{day}_{ticker}_minute_trade.csv", frame.to_csv(header=False, index=False))
    return path


def test_a_lean_data_folder_trains_one_model_per_ticker_at_the_right_instants(tmp_path):
    data = tmp_path / "data"
    written = {}
    for seed, ticker in enumerate(("spy", "aapl")):
        bars = synthetic_bars(SESSION_BARS * len(DAYS), seed)
        bars[["open", "high", "low", "close"]] = bars[["open", "high", "low", "close"]].round(4)
        for number, day in enumerate(DAYS):
            write_lean_day(data, ticker, day, bars.iloc[number * SESSION_BARS : (number + 1) * SESSION_BARS])
        written[ticker] = bars
    write_config(tmp_path, data_dir="data")  # nothing about Lean in the config
    result = snakemake(tmp_path, "models/spy.pt", "models/aapl.pt")
    assert "is a QuantConnect Lean data folder: one dataset per ticker" in result.stderr
    assert {path.stem for path in (tmp_path / "models").glob("*.pt")} == {"spy", "aapl"}
    log = (tmp_path / "logs" / "preprocess" / "spy.log").read_text()
    assert "read as lean: headerless" in log and "in America/New_York" in log

    files = sorted(str(path) for path in (data / "equity" / "usa" / "minute" / "spy").glob("*.zip"))
    frame = read_clean_bars(files, None, 0.0)
    # 09:30 New York on 2 January 2024 is 14:30 UTC; the last bar 15:59 on the 3rd, 20:59 UTC.
    assert frame["timestamp"].iloc[0] == pd.Timestamp("2024-01-02 14:30", tz="UTC")
    assert frame["timestamp"].iloc[-1] == pd.Timestamp("2024-01-03 20:59", tz="UTC")
    assert len(frame) == SESSION_BARS * len(DAYS)
    np.testing.assert_allclose(frame["close"].to_numpy(), written["spy"]["close"].to_numpy(), rtol=0, atol=5e-5)
