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
from layouts import (
    ASK_SPREAD,
    BAR_KEYS,
    EUROPEAN_NAMES,
    HISTDATA_DATASET,
    REAL_LAYOUTS,
    binance,
    file_of,
    headered,
    mt5_frame,
    numbers,
    reference_bars,
    write_european,
    write_fxcm,
    write_headerless,
    write_real_layouts,
    write_yfinance,
)

from rnnfleet.bars.formats import (
    FORMAT_DEFAULTS,
    FORMAT_PRESETS,
    PRICE_SIDES,
    bid_ask_columns,
    continued_header_rows,
    header_names,
    read_bars,
    split_line,
    text_encoding,
    unquoted,
)
from rnnfleet.prep.features import DEFAULT_FEATURES
from rnnfleet.prep.prepare import DataError, features_for_bars, read_clean_bars


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
        ("histdata", HISTDATA_DATASET),
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


def test_decimal_commas_with_or_without_thousands_dots_are_sniffed_and_read_exactly(tmp_path):
    bars = reference_bars(50)
    write_european(bars, tmp_path / "de.csv")  # 2.750,570000: dots group thousands
    read = read_bars(tmp_path / "de.csv")
    assert "';'-delimited, 8 columns, decimal comma, time from columns 'Datum' + 'Zeit'" in read.attrs["read_as"]
    pd.testing.assert_frame_equal(read[BAR_KEYS], numbers(bars))
    np.testing.assert_array_equal(read["timestamp"].to_numpy(), bars["timestamp"].to_numpy())
    plain = "Datum;Eröffnung;Hoch;Tief;Schluss;Volumen\n" + "".join(
        f"07.03.2024 09:{minute:02d};66029,31;66110,00;65990,12;66043,99;12\n" for minute in range(5)
    )
    (tmp_path / "plain.csv").write_text(plain)
    read = read_bars(tmp_path / "plain.csv")
    assert read["close"].tolist() == [66043.99] * 5 and read["open"].iloc[0] == 66029.31
    # A ';' file with decimal points keeps them: 1,5 there is not a number rnnfleet guesses at.
    headered(bars).to_csv(tmp_path / "points.csv", sep=";", index=False)
    assert "decimal comma" not in read_bars(tmp_path / "points.csv").attrs["read_as"]


def test_columns_apply_only_to_files_whose_header_holds_them(tmp_path):
    """`columns:` set to a German export's names: the headerless Binance file and a plain CSV
    beside it are read by their own layout, never as if they had that header."""
    bars = reference_bars(50)
    german = dict(zip(["date", "time", "open", "high", "low", "close"], EUROPEAN_NAMES[:6], strict=True))
    german["volume"] = "Volumen"
    write_european(bars, tmp_path / "de.csv")
    binance(bars, "ms").to_csv(tmp_path / "binance.csv", header=False, index=False)
    headered(bars).to_csv(tmp_path / "plain.csv", index=False)
    for name in ("de.csv", "binance.csv", "plain.csv"):
        read = read_bars(tmp_path / name, columns=german)
        pd.testing.assert_frame_equal(read[BAR_KEYS], numbers(bars), obj=name)
    assert read_bars(tmp_path / "binance.csv", columns=german).attrs["read_as"].startswith("auto: headerless")


def test_a_column_of_words_names_its_data_row_and_file_line_and_quotes_that_cell(tmp_path):
    lines = headered(reference_bars(20)).to_csv(index=False).splitlines()
    cells = lines[1].split(",")
    lines = [
        lines[0],
        *[",".join([*line.split(",")[:4], f"word{row}", *line.split(",")[5:]]) for row, line in enumerate(lines[1:])],
    ]
    (tmp_path / "words.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"column 'close' is not numeric \(data row 1 \(line 2\) holds 'word0'\)"):
        read_bars(tmp_path / "words.csv")
    assert cells[4] != "word0"


def test_an_unknown_headerless_layout_and_pre_1973_epochs_are_clear_errors(tmp_path):
    (tmp_path / "odd.csv").write_text("x7,1,2,3,4,5\nx8,1,2,3,4,5\n")
    with pytest.raises(DataError, match=r"odd.csv: has no header and its layout is not one rnnfleet knows.*format:"):
        read_bars(tmp_path / "odd.csv")
    (tmp_path / "small.csv").write_text("timestamp,open,high,low,close,volume\n1234,1,1,1,1,1\n")
    with pytest.raises(DataError, match=r"small.csv: column 'timestamp' holds 1234 .* no epoch time"):
        read_bars(tmp_path / "small.csv")


def test_the_schema_offers_every_preset_and_price_side():
    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    assert schema["properties"]["format"]["properties"]["preset"]["enum"] == list(FORMAT_PRESETS)
    price_side = schema["properties"]["format"]["properties"]["price_side"]
    assert (price_side["enum"], price_side["default"]) == (list(PRICE_SIDES), FORMAT_DEFAULTS["price_side"])


def test_real_layouts_read_to_the_same_bars_with_volume_only_where_the_file_has_it(tmp_path):
    bars = reference_bars()
    write_real_layouts(bars, tmp_path)
    for dataset, (_, suffix, read_as, has_volume) in REAL_LAYOUTS.items():
        frame = read_bars(tmp_path / f"{dataset}{suffix}")
        keys = BAR_KEYS if has_volume else BAR_KEYS[:4]
        assert list(frame.columns) == ["timestamp", *keys], dataset
        assert (frame["timestamp"].to_numpy() == bars["timestamp"].to_numpy()).all(), dataset
        np.testing.assert_array_equal(frame[keys].to_numpy(), bars[keys].to_numpy(), err_msg=dataset)
        assert read_as in frame.attrs["read_as"], (dataset, frame.attrs["read_as"])


def test_header_cells_honour_quotes_holding_the_delimiter():
    assert split_line('Date,"EUR/USD(Open, Bid)*", "EUR/USD(Close, Ask)"', ",") == [
        "Date",
        "EUR/USD(Open, Bid)*",
        "EUR/USD(Close, Ask)",
    ]


def test_yfinance_header_lines_name_the_time_column_from_the_third():
    rows = [
        ["Price", "Close", "High", "Low", "Open", "Volume"],
        ["Ticker", "SPY", "SPY", "SPY", "SPY", "SPY"],
        ["Datetime", "", "", "", "", ""],
        ["2025-05-09 13:44:00+00:00", "563.2", "563.5", "563.1", "563.3", "1200"],
    ]
    assert continued_header_rows(rows[1:]) == 2
    assert header_names(rows[:3]) == ["Datetime", "Close", "High", "Low", "Open", "Volume"]
    assert continued_header_rows([rows[3]]) == 0  # a plain header: the data follows at once
    assert header_names(rows[:1]) == rows[0]


def test_a_yfinance_download_of_several_tickers_is_refused_naming_them(tmp_path):
    bars = reference_bars(20)
    write_yfinance(bars, tmp_path / "one.csv")
    assert list(read_bars(tmp_path / "one.csv")["close"]) == list(bars["close"])
    write_yfinance(bars, tmp_path / "stocks.csv", tickers=("SPY", "AAPL"))
    with pytest.raises(DataError, match=r"stocks.csv: holds the bars of 2 tickers \(AAPL, SPY\), a yfinance download"):
        read_bars(tmp_path / "stocks.csv")


def test_bid_and_ask_columns_are_found_in_the_usual_spellings():
    fxcm = bid_ask_columns(["Date", "EUR/USD(Open, Bid)*", "EUR/USD(Close, Ask)"])
    assert fxcm == {("open", "bid"): "EUR/USD(Open, Bid)*", ("close", "ask"): "EUR/USD(Close, Ask)"}
    assert bid_ask_columns(["DateTime", "BidOpen", "AskHigh", "open_ask"]) == {
        ("open", "bid"): "BidOpen",
        ("high", "ask"): "AskHigh",
        ("open", "ask"): "open_ask",
    }
    assert bid_ask_columns(["timestamp", "Open", "Close", "Bid", "Spread"]) == {}


@pytest.mark.parametrize("side", ["ask", "mid"])
def test_price_side_takes_the_ask_or_the_mean_of_bid_and_ask(tmp_path, side):
    bars = reference_bars(50)
    write_fxcm(bars, tmp_path / "fx.csv")
    read = read_bars(tmp_path / "fx.csv", read_format={"price_side": side})
    offset = ASK_SPREAD if side == "ask" else ASK_SPREAD / 2
    np.testing.assert_allclose(read[BAR_KEYS[:4]].to_numpy(), bars[BAR_KEYS[:4]].to_numpy() + offset, atol=1e-9)
    assert f"{side} prices (format.price_side)" in read.attrs["read_as"]


def test_a_bid_only_file_asked_for_ask_prices_names_the_missing_side(tmp_path):
    bars = reference_bars(20)
    frame = pd.DataFrame(
        {"DateTime": headered(bars)["timestamp"], **{f"Bid{k.capitalize()}": bars[k] for k in BAR_KEYS[:4]}}
    )
    frame.to_csv(tmp_path / "bid.csv", index=False)
    assert list(read_bars(tmp_path / "bid.csv")["close"]) == list(bars["close"])
    with pytest.raises(DataError, match=r"bid.csv: missing required column\(s\) open ask \(format.price_side: ask\)"):
        read_bars(tmp_path / "bid.csv", read_format={"price_side": "ask"})


def test_the_byte_order_mark_tells_the_encoding_and_zero_bytes_without_one_are_refused():
    assert text_encoding(b"\xff\xfe<\x00D\x00", "f") == "utf-16"
    assert text_encoding(b"\xfe\xff\x00<", "f") == "utf-16"
    assert text_encoding(b"\xef\xbb\xbftimestamp", "f") == "utf-8-sig"
    assert text_encoding(b"timestamp,open", "f") == "utf-8"
    with pytest.raises(DataError, match="f: UTF-16 text saved without a byte-order mark"):
        text_encoding("timestamp".encode("utf-16-le"), "f")
    with pytest.raises(DataError, match="f: UTF-16 text saved without a byte-order mark"):
        text_encoding("timestamp".encode("utf-16-be"), "f")
    random_bytes = bytes(range(256)) * 4  # zero bytes here and there: binary, not UTF-16
    with pytest.raises(DataError, match=r"^f: not a text file \(binary data, no lines of bars\)"):
        text_encoding(random_bytes, "f")


def test_utf16_without_a_mark_and_broken_utf16_say_exactly_why(tmp_path):
    text = headered(reference_bars(20)).to_csv(index=False)
    (tmp_path / "nobom.csv").write_bytes(text.encode("utf-16-le"))
    with pytest.raises(DataError, match="nobom.csv: UTF-16 text saved without a byte-order mark.*save it as UTF-8"):
        read_bars(tmp_path / "nobom.csv")
    (tmp_path / "broken.csv").write_bytes(b"\xff\xfe" + text.encode("utf-16-le") + b"\x00\xd8")
    with pytest.raises(DataError, match="broken.csv: its byte-order mark says UTF-16, but it is not valid UTF-16 text"):
        read_bars(tmp_path / "broken.csv")


def test_every_line_quoted_with_a_header_is_read_and_unquoting_keeps_crlf(tmp_path):
    assert unquoted('"a\tb"\r\n"c\td"\n') == "a\tb\r\nc\td\n"
    bars = reference_bars(50)
    lines = mt5_frame(bars).to_csv(sep="\t", index=False).splitlines()
    (tmp_path / "mt5.csv").write_text("".join(f'"{line}"\r\n' for line in lines))
    read = read_bars(tmp_path / "mt5.csv")
    np.testing.assert_array_equal(read[BAR_KEYS].to_numpy(), numbers(bars).to_numpy())
    assert "header, '\\t'-delimited, 9 columns, each line in quotes" in read.attrs["read_as"]


@pytest.mark.parametrize("index_name", ["timestamp", "Datetime", None])
def test_parquet_with_the_times_as_its_saved_index_reads_as_with_a_time_column(tmp_path, index_name):
    bars = reference_bars(30)
    bars.to_parquet(tmp_path / "plain.parquet", index=False)
    indexed = bars.set_index("timestamp").rename_axis(index_name)
    indexed.to_parquet(tmp_path / "indexed.parquet")  # df.set_index(...).to_parquet(): pandas' index column
    plain, read = read_bars(tmp_path / "plain.parquet"), read_bars(tmp_path / "indexed.parquet")
    pd.testing.assert_frame_equal(read, plain)
    assert f"time from column '{index_name or '__index_level_0__'}'" in read.attrs["read_as"]


def test_words_in_a_parquet_price_column_and_a_short_row_are_one_line_data_errors(tmp_path):
    from rnnfleet.prep.prepare import drop_non_finite

    bars = reference_bars(20)
    frame = pd.DataFrame({"timestamp": bars["timestamp"], **numbers(bars)})
    frame["close"] = frame["close"].map(repr)
    frame.loc[7, "close"] = "n/a"  # one damaged row: read as NaN, dropped and counted like one
    frame.to_parquet(tmp_path / "words.parquet", index=False)
    read = read_bars(tmp_path / "words.parquet")
    assert np.isnan(read["close"].iloc[7]) and read.attrs["not_numeric"] == [("data row 8", "'close'", "n/a")]
    kept = drop_non_finite(read, "words.parquet", 0.1)
    assert len(kept) == 19 and kept.attrs["notes"][-1] == (
        "1 row(s) with NaN, infinite or non-numeric values dropped (data row 8 holds 'n/a' in column 'close')"
    )
    with pytest.raises(DataError, match=r"1 of 20 rows hold NaN, infinite or non-numeric values \(data row 8 holds"):
        drop_non_finite(read_bars(tmp_path / "words.parquet"), "words.parquet", 0.01)
    frame["close"] = "n/a"  # a column of words: the layout, not a damaged row
    frame.to_parquet(tmp_path / "words.parquet", index=False)
    with pytest.raises(DataError, match=r"words.parquet: column 'close' is not numeric \(data row 1 holds 'n/a'\)"):
        read_bars(tmp_path / "words.parquet")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really parquet")
    with pytest.raises(DataError, match="broken.parquet: not a readable Parquet file"):
        read_bars(tmp_path / "broken.parquet")
    (tmp_path / "short.csv").write_text("timestamp,open,high,low,close,volume\n2024-01-01 00:00,1,2,3\n")
    with pytest.raises(
        DataError, match=r"short.csv: cannot be read as auto: header, ','-delimited, 6 columns \(ValueError"
    ):
        read_bars(tmp_path / "short.csv")


def test_slash_dates_are_month_first_unless_a_row_needs_day_first(tmp_path):
    bars = reference_bars(20, start="2024-01-13 00:00")
    day_first = headered(bars).assign(timestamp=bars["timestamp"].dt.strftime("%d/%m/%Y %H:%M"))
    day_first.to_csv(tmp_path / "day.csv", index=False)
    read = read_bars(tmp_path / "day.csv")
    assert (read["timestamp"].to_numpy() == bars["timestamp"].to_numpy()).all()
    assert "as %d/%m/%Y %H:%M text" in read.attrs["read_as"] and not read.attrs["notes"]
    ambiguous = reference_bars(20)  # 2024-01-02: 01/02 fits both orders
    headered(ambiguous).assign(timestamp=ambiguous["timestamp"].dt.strftime("%m/%d/%Y %H:%M")).to_csv(
        tmp_path / "both.csv", index=False
    )
    read = read_bars(tmp_path / "both.csv")
    assert (read["timestamp"].to_numpy() == ambiguous["timestamp"].to_numpy()).all()
    assert "fits both month first and day first; read month first" in read.attrs["notes"][0]


def test_without_volume_the_default_features_leave_it_out_and_a_chosen_one_is_refused(tmp_path):
    bars = reference_bars(20)
    with_volume, no_volume = headered(bars), headered(bars).drop(columns="volume")
    assert features_for_bars(with_volume, DEFAULT_FEATURES) == (DEFAULT_FEATURES, ())
    assert features_for_bars(no_volume, DEFAULT_FEATURES) == (("ohlc_returns",), ("log_volume",))
    assert features_for_bars(no_volume, ["ohlc_returns", "hl_range"]) == (("ohlc_returns", "hl_range"), ())
    with pytest.raises(
        DataError, match=r"X.csv: has no volume column, which feature 'volume_change' \(config key features\)"
    ):
        features_for_bars(no_volume, ["ohlc_returns", "volume_change"], "X.csv")


def test_joining_a_file_without_volume_drops_volume_with_a_note(tmp_path):
    bars = reference_bars(40)
    headered(bars.iloc[:20]).to_csv(tmp_path / "a.csv", index=False)
    headered(bars.iloc[20:]).drop(columns="volume").to_csv(tmp_path / "b.csv", index=False)
    joined = read_clean_bars([str(tmp_path / "a.csv"), str(tmp_path / "b.csv")], None, 0.01)
    assert list(joined.columns) == ["timestamp", *BAR_KEYS[:4]] and len(joined) == 40
    assert any("volume not used" in note and "b.csv has none" in note for note in joined.attrs["notes"])


def test_a_plug_in_feature_reading_volume_of_a_file_without_it_is_a_data_error_naming_both(tmp_path, monkeypatch):
    from rnnfleet.prep.features import compute_feature_matrix

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "feat.py").write_text("def turnover(bars):\n    return bars['volume'] * bars['close']\n")
    monkeypatch.chdir(tmp_path)
    no_volume = headered(reference_bars(20)).drop(columns="volume")
    with pytest.raises(DataError, match=r"^X.csv: has no volume column, which mine/feat.py: function turnover needs$"):
        compute_feature_matrix(no_volume, ["mine/feat.py:turnover"], "X.csv")
