"""The same bars written in every layout users have: reading gives identical bars and times.

Each file is built from one set of bars (tests/layouts.py; README "Your data" lists the
layouts); explicit settings, presets and the errors for layouts rnnfleet cannot tell.
The same files through the real snakemake: tests/workflow/test_formats_run.py.
"""

from __future__ import annotations

import csv

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REPO
from layouts import BAR_KEYS, file_of, headered, numbers, reference_bars, write_headerless

from rnnfleet.data import DataError
from rnnfleet.formats import FORMAT_PRESETS, read_bars


def test_every_layout_reads_to_the_same_bars_and_times(every_layout):
    folder, expected = every_layout
    bars = reference_bars()
    for dataset, read_as in expected.items():
        frame = read_bars(file_of(folder, dataset))
        assert list(frame.columns) == ["timestamp", *BAR_KEYS], dataset
        assert str(frame["timestamp"].dtype) == "datetime64[ns, UTC]", dataset
        assert (frame["timestamp"].to_numpy() == bars["timestamp"].to_numpy()).all(), dataset
        np.testing.assert_array_equal(frame[BAR_KEYS].to_numpy(), numbers(bars).to_numpy(), err_msg=dataset)
        assert read_as in frame.attrs["read_as"], (dataset, frame.attrs["read_as"])


def test_presets_read_their_layout_without_sniffing(every_layout):
    folder, _ = every_layout
    for preset, dataset in [
        ("binance", "BINANCE-MS-1m-2024-01-02"),
        ("kraken", "KRAKEN_1m"),
        ("metatrader4", "MT4_1m"),
        ("metatrader5", "MT5_1m"),
        ("histdata", "HISTDATA_1m"),
        ("dukascopy", "DUKASCOPY_1m"),
        ("csv", "COMMA_1m"),
    ]:
        frame = read_bars(file_of(folder, dataset), read_format={"preset": preset})
        assert frame.attrs["read_as"].startswith(f"{preset}: "), frame.attrs["read_as"]
        np.testing.assert_array_equal(frame["close"].to_numpy(), reference_bars()["close"].to_numpy())


def test_parquet_reads_only_the_six_columns(every_layout, monkeypatch):
    import pyarrow.parquet as pq

    asked = []
    original = pq.ParquetFile.read

    def recording_read(self, columns=None, **kwargs):
        asked.append(columns)
        return original(self, columns=columns, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read", recording_read)
    read_bars(file_of(every_layout[0], "PARQUET_1m"))
    assert len(asked) == 1 and sorted(asked[0]) == sorted(["timestamp", *BAR_KEYS])


def test_explicit_settings_override_sniffing(tmp_path):
    bars = reference_bars(50)
    # Close before open, no header, times as text in a zone with daylight saving.
    berlin = bars["timestamp"].dt.tz_convert("Europe/Berlin").dt.strftime("%d/%m/%Y %H:%M")
    frame = pd.DataFrame({"v": bars["volume"], "c": bars["close"], "o": bars["open"], "h": bars["high"]})
    frame["l"], frame["t"] = bars["low"], berlin
    write_headerless(frame, tmp_path / "custom.csv", sep="|")
    settings = {
        "positions": {"timestamp": 5, "open": 2, "high": 3, "low": 4, "close": 1, "volume": 0},
        "timestamp_format": "%d/%m/%Y %H:%M",
        "timezone": "Europe/Berlin",
    }
    read = read_bars(tmp_path / "custom.csv", read_format=settings)
    assert (read["timestamp"].to_numpy() == bars["timestamp"].to_numpy()).all()
    np.testing.assert_array_equal(read[BAR_KEYS].to_numpy(), numbers(bars).to_numpy())
    assert "'|'-delimited" in read.attrs["read_as"] and "naive times in Europe/Berlin" in read.attrs["read_as"]


def test_positions_skip_a_header_line_when_there_is_one(tmp_path):
    bars = reference_bars(50)
    headered(bars)[["close", "timestamp", "open", "high", "low", "volume"]].to_csv(tmp_path / "p.csv", index=False)
    positions = {"timestamp": 1, "open": 2, "high": 3, "low": 4, "close": 0, "volume": 5}
    read = read_bars(tmp_path / "p.csv", read_format={"positions": positions})
    np.testing.assert_array_equal(read[BAR_KEYS].to_numpy(), numbers(bars).to_numpy())
    assert read.attrs["read_as"].startswith("auto: header, ")


def test_quoted_header_names_are_found(tmp_path):
    bars = reference_bars(50)
    headered(bars).rename(columns=str.capitalize).to_csv(tmp_path / "q.csv", index=False, quoting=csv.QUOTE_ALL)
    read = read_bars(tmp_path / "q.csv")
    np.testing.assert_array_equal(read[BAR_KEYS].to_numpy(), numbers(bars).to_numpy())


def test_header_names_from_the_columns_setting(tmp_path):
    bars = reference_bars(50)
    renamed = headered(bars).rename(columns={"timestamp": "when", "close": "Last"})
    renamed.to_csv(tmp_path / "named.csv", index=False)
    read = read_bars(tmp_path / "named.csv", columns={"timestamp": "when", "close": "Last"})
    np.testing.assert_array_equal(read["close"].to_numpy(), bars["close"].to_numpy())
    with pytest.raises(DataError, match=r"named.csv: missing required column\(s\) timestamp, close; its header is"):
        read_bars(tmp_path / "named.csv")


def test_an_unknown_headerless_layout_and_pre_1973_epochs_are_clear_errors(tmp_path):
    (tmp_path / "odd.csv").write_text("x7,1,2,3,4,5\nx8,1,2,3,4,5\n")
    with pytest.raises(DataError, match=r"odd.csv: has no header and its layout is not one rnnfleet knows.*format:"):
        read_bars(tmp_path / "odd.csv")
    (tmp_path / "small.csv").write_text("timestamp,open,high,low,close,volume\n1234,1,1,1,1,1\n")
    with pytest.raises(DataError, match=r"small.csv: column 'timestamp' holds 1234 .* no epoch time"):
        read_bars(tmp_path / "small.csv")


def test_the_schema_offers_every_preset():
    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    assert schema["properties"]["format"]["properties"]["preset"]["enum"] == list(FORMAT_PRESETS)
