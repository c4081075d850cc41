"""Time zones of bar files: daylight-saving days read as real instants, naive times taken as
UTC said in words, known conventions automatic, and the model file's record of how its bars
were read deciding how forecasts read new ones."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rnnfleet.bars.formats import FORMAT_DEFAULTS, NAIVE_AS_UTC, TIMEZONE_ASSUMED, read_bars
from rnnfleet.bars.joining import check_one_minute_bars
from rnnfleet.errors import UserError
from rnnfleet.forecast.predict import other_zone_warning, reading_settings
from rnnfleet.prep.arrays_file import load_arrays, save_arrays
from rnnfleet.prep.gaps import find_gaps
from rnnfleet.prep.prepare import prepare_dataset, read_clean_bars
from rnnfleet.synthetic import synthetic_bars

NEW_YORK = {"timezone": "America/New_York"}


def local_day_csv(path, day: str, zone: str):
    """Every minute of one local calendar day in `zone`, written as naive local times; returns
    the UTC instants the rows stand for."""
    start = pd.Timestamp(day, tz=zone)
    end = pd.Timestamp(pd.Timestamp(day) + pd.Timedelta(days=1), tz=zone)  # the next local midnight
    instants = pd.date_range(start, end, freq="1min", inclusive="left")
    bars = synthetic_bars(len(instants), seed=1)
    bars["timestamp"] = instants.tz_localize(None)
    bars.to_csv(path, index=False, float_format="%.6f")
    return instants.tz_convert("UTC")


def test_a_dst_fall_back_day_in_new_york_keeps_all_its_bars(tmp_path):
    path = tmp_path / "fallback.csv"
    instants = local_day_csv(path, "2024-11-03", "America/New_York")
    assert len(instants) == 25 * 60  # the day has 25 hours: 01:00-01:59 twice
    assert pd.read_csv(path)["timestamp"].duplicated().sum() == 60  # as naive text, the repeated hour
    frame = read_bars(path, None, NEW_YORK)
    assert len(frame) == 25 * 60 and frame.attrs["notes"] == []  # no "duplicates" dropped, nothing sorted
    assert (frame["timestamp"].to_numpy() == instants.to_numpy()).all()
    timestamps_ns = frame["timestamp"].array.asi8
    check_one_minute_bars(timestamps_ns, str(path))
    assert len(find_gaps(timestamps_ns, "15min")) == 0


def test_the_spring_forward_day_is_not_missing_data(tmp_path):
    path = tmp_path / "spring.csv"
    instants = local_day_csv(path, "2024-03-10", "America/New_York")
    frame = read_clean_bars(path, None, 0.0, NEW_YORK)
    assert len(frame) == 23 * 60 and (frame["timestamp"].to_numpy() == instants.to_numpy()).all()
    assert len(find_gaps(frame["timestamp"].array.asi8, "15min")) == 0  # 01:59 -> 03:00 local is one minute


def test_a_time_in_the_skipped_hour_is_one_line_naming_it(tmp_path):
    path = tmp_path / "skipped.csv"
    bars = synthetic_bars(3, seed=1)
    bars["timestamp"] = ["2024-03-10 01:59", "2024-03-10 02:30", "2024-03-10 03:00"]
    bars.to_csv(path, index=False)
    with pytest.raises(UserError) as raised:
        read_bars(path, None, NEW_YORK)
    assert str(raised.value) == (
        f"{path}: column 'timestamp' has a time that does not exist in America/New_York (data row 2 holds "
        "2024-03-10 02:30:00, in the hour skipped when clocks go forward); check format.timezone"
    )


def test_naive_times_without_a_zone_say_they_were_read_as_utc(tmp_path):
    path = tmp_path / "naive.csv"
    synthetic_bars(50, seed=2).to_csv(path, index=False)
    frame = read_bars(path)
    assert frame.attrs["read_as"].endswith(f"as ISO8601 text, {NAIVE_AS_UTC}")
    assert NAIVE_AS_UTC == "naive times read as UTC (set format.timezone)"
    assert frame.attrs["timezone"] == TIMEZONE_ASSUMED
    tokyo = read_bars(path, None, {"timezone": "Asia/Tokyo"})
    assert tokyo.attrs["timezone"] == "Asia/Tokyo" and NAIVE_AS_UTC not in tokyo.attrs["read_as"]
    assert (frame["timestamp"] - tokyo["timestamp"]).eq(pd.Timedelta(hours=9)).all()


@pytest.mark.parametrize(
    ("text", "zone", "said"),
    [
        (
            "20240102 093000;1.1;1.2;1.0;1.1;0\n20240102 093100;1.1;1.2;1.0;1.1;0\n",
            "Etc/GMT+5",
            "naive times in Etc/GMT+5",
        ),
        ("1704188400000,1,2,0.5,1,3\n1704188460000,1,2,0.5,1,3\n", "UTC (epoch)", "(told by the values), UTC"),
        ("Gmt time,Open,High,Low,Close,Volume\n2024-01-02 09:30,1,2,0.5,1,3\n", "UTC", "(the header says so)"),
        ("timestamp,open,high,low,close,volume\n2024-01-02T09:30+09:00,1,2,0.5,1,3\n", "in the file", "text, UTC"),
    ],
    ids=["histdata EST", "binance epoch", "a GMT header", "offsets in the file"],
)
def test_known_conventions_stay_automatic(tmp_path, text, zone, said):
    path = tmp_path / ("DAT_ASCII_EURUSD_M1_2024.csv" if zone == "Etc/GMT+5" else "bars.csv")
    path.write_text(text)
    frame = read_bars(path)
    assert frame.attrs["timezone"] == zone and said in frame.attrs["read_as"]
    assert NAIVE_AS_UTC not in frame.attrs["read_as"]


def test_the_array_file_records_how_its_bars_were_read_and_older_ones_still_load(tmp_path):
    path = tmp_path / "A_1m.csv"
    synthetic_bars(200, seed=3).to_csv(path, index=False, float_format="%.6f")
    arrays, _ = prepare_dataset(path, 16, 1, val_fraction=0.2, read_format={"timezone": "Asia/Tokyo"})
    assert arrays.read_format == {**FORMAT_DEFAULTS, "timezone": "Asia/Tokyo"}
    assert arrays.timezone == "Asia/Tokyo" and "naive times in Asia/Tokyo" in arrays.read_as
    save_arrays(arrays, tmp_path / "A.npz")
    loaded = load_arrays(tmp_path / "A.npz")
    assert (loaded.read_format, loaded.timezone, loaded.read_as) == (arrays.read_format, "Asia/Tokyo", arrays.read_as)
    with np.load(tmp_path / "A.npz") as stored:  # as an older rnnfleet wrote it
        older = {key: stored[key] for key in stored.files if key not in ("read_format", "timezone", "read_as")}
    np.savez(tmp_path / "older.npz", **older)
    assert (load_arrays(tmp_path / "older.npz").read_format, load_arrays(tmp_path / "older.npz").timezone) == ({}, "")


RECORDED = {"read": {"format": {**FORMAT_DEFAULTS, "timezone": "Asia/Tokyo"}, "timezone": "Asia/Tokyo"}}


def test_forecasts_read_new_bars_as_the_model_file_records_and_say_so():
    settings, line = reading_settings(RECORDED, "m.pt", {})
    assert settings == {**FORMAT_DEFAULTS, "timezone": "Asia/Tokyo"}
    assert (
        line == "m.pt: bars read as its training bars were: timezone 'Asia/Tokyo' (training times read in Asia/Tokyo)"
    )
    settings, _ = reading_settings(RECORDED, "m.pt", {"delimiter": ";", "timezone": "Asia/Tokyo"})
    assert (settings["delimiter"], settings["timezone"]) == (";", "Asia/Tokyo")  # what the record leaves at auto


def test_an_option_contradicting_the_record_is_refused_unless_overridden():
    with pytest.raises(UserError) as raised:
        reading_settings(RECORDED, "m.pt", {"timezone": "UTC"})
    assert "option --timezone 'UTC' contradicts m.pt, whose training bars were read with format.timezone" in str(
        raised.value
    )
    settings, line = reading_settings(RECORDED, "m.pt", {"timezone": "UTC"}, override=True)
    assert settings["timezone"] == "UTC" and line.endswith("; --override-format: --timezone 'UTC' for 'Asia/Tokyo'")


def test_a_model_file_without_the_record_reads_with_the_options_and_says_why():
    settings, line = reading_settings({}, "old.pt", {"timezone": "Etc/GMT+5"})
    assert settings == {**FORMAT_DEFAULTS, "timezone": "Etc/GMT+5"}
    assert line == (
        "old.pt: the model file does not record how its training bars were read (an older rnnfleet); "
        "bars read with timezone 'Etc/GMT+5'"
    )


def test_new_bars_read_in_another_zone_than_the_training_bars_are_warned_about():
    histdata = {"read": {"format": dict(FORMAT_DEFAULTS), "timezone": "Etc/GMT+5"}}
    warning = other_zone_warning(histdata, TIMEZONE_ASSUMED, "recent.csv")
    assert warning.startswith("recent.csv: warning: naive times read in UTC (assumed), the model's training bars' in ")
    assert other_zone_warning(histdata, "Etc/GMT+5", "recent.csv") == ""
    assert other_zone_warning(histdata, "UTC (epoch)", "recent.csv") == ""


HISTDATA_SHAPED_LINES = "20240102 093000;1.1;1.2;1.0;1.1;5\n20240102 093100;1.1;1.2;1.0;1.1;7\n"


@pytest.mark.parametrize(
    "name",
    ["NinjaTrader_ES_1m.txt", "ES 03-24.Last.txt", "export_1m.csv", "EURUSD_1m.csv.gz"],
    ids=["ninjatrader", "ninjatrader default name", "a plain export", "compressed"],
)
def test_histdata_line_shape_alone_sets_no_zone(tmp_path, name):
    """NinjaTrader (and others) write histdata's line shape in UTC or local time: the shape
    alone reads naive times as UTC and says it was assumed, never histdata's EST."""
    path = tmp_path / name
    if name.endswith(".gz"):
        import gzip

        path.write_bytes(gzip.compress(HISTDATA_SHAPED_LINES.encode()))
    else:
        path.write_text(HISTDATA_SHAPED_LINES)
    frame = read_bars(path)
    assert frame.attrs["timezone"] == TIMEZONE_ASSUMED and frame.attrs["read_as"].endswith(NAIVE_AS_UTC)
    assert frame["timestamp"].iloc[0] == pd.Timestamp("2024-01-02 09:30", tz="UTC")


@pytest.mark.parametrize(
    ("name", "read_format"),
    [
        ("DAT_ASCII_EURUSD_M1_2024.csv", None),
        ("dat_ascii_eurusd_m1_2024.txt", None),
        ("HISTDATA_COM_ASCII_EURUSD_M1_2024.zip", None),
        ("EURUSD_1m.csv", {"preset": "histdata"}),
    ],
    ids=["histdata's name", "lower case", "histdata's zip", "the preset"],
)
def test_histdata_files_stay_est(tmp_path, name, read_format):
    path = tmp_path / name
    if name.endswith(".zip"):
        import zipfile

        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("DAT_ASCII_EURUSD_M1_2024.csv", HISTDATA_SHAPED_LINES)
    else:
        path.write_text(HISTDATA_SHAPED_LINES)
    frame = read_bars(path, None, read_format)
    assert frame.attrs["timezone"] == "Etc/GMT+5"
    assert frame["timestamp"].iloc[0] == pd.Timestamp("2024-01-02 14:30", tz="UTC")


KLINE_1970_AS_MS = "1325317920,4.39,4.39,4.39,4.39,0.455\n1325317980,4.39,4.40,4.39,4.40,1.5\n"


@pytest.mark.parametrize(
    ("read_format", "setting"),
    [({"timestamp_unit": "ms"}, "check format.timestamp_unit = 'ms'"), ({}, None)],
    ids=["forced unit", "sniffed"],
)
def test_implausible_times_are_refused_on_every_path(tmp_path, read_format, setting):
    """Epoch seconds forced to be read as milliseconds give bars in January 1970: one line
    naming the file and the setting (the sniffed path reads the same file right)."""
    path = tmp_path / "klines_1m.csv"
    path.write_text(KLINE_1970_AS_MS)
    if setting is None:
        assert read_bars(path)["timestamp"].iloc[0] == pd.Timestamp("2011-12-31 07:52", tz="UTC")
        return
    with pytest.raises(UserError) as raised:
        read_bars(path, None, read_format)
    message = str(raised.value)
    assert message.startswith(f"{path}: its times run from 1970-01-16 08:08 to 1970-01-16 08:08 UTC, before 1980")
    assert message.endswith(setting) and "\n" not in message


def test_bars_in_the_future_are_refused(tmp_path):
    path = tmp_path / "future_1m.csv"
    future = pd.Timestamp.now(tz="UTC").floor("min") + pd.Timedelta(days=30)
    path.write_text(f"timestamp,open,high,low,close\n{future:%Y-%m-%d %H:%M:%S},1,1,1,1\n")
    with pytest.raises(UserError, match=r"UTC, in the future \(read .*\): not plausible minute bars"):
        read_bars(path)


def test_the_kaggle_bitstamp_minute_set_reads_its_base_currency_volume(tmp_path):
    path = tmp_path / "bitstampUSD_1-min_data.csv"
    path.write_text(
        "Timestamp,Open,High,Low,Close,Volume_(BTC),Volume_(Currency),Weighted_Price\n"
        "1325317920,4.39,4.39,4.39,4.39,0.455,1.99745,4.39\n1325317980,4.39,4.4,4.39,4.4,1.5,6.6,4.39\n"
    )
    frame = read_bars(path)
    assert frame["volume"].tolist() == [0.455, 1.5]
    assert frame["timestamp"].iloc[0] == pd.Timestamp("2011-12-31 07:52", tz="UTC")


def test_dukascopy_local_time_exports_carry_their_offsets_across_dst(tmp_path):
    """Dukascopy's "Local time" export writes each bar's offset (GMT-0700, then GMT-0800 after
    the US fall-back): every bar lands at its own UTC instant, in order."""
    path = tmp_path / "EURUSD_Candlestick_1_M_BID_01.11.2010-30.11.2010.csv"
    path.write_text(
        "Local time,Open,High,Low,Close,Volume\n"
        "07.11.2010 01:58:00.000 GMT-0700,1.39,1.40,1.38,1.39,10\n"
        "07.11.2010 01:59:00.000 GMT-0700,1.39,1.40,1.38,1.39,10\n"
        "07.11.2010 01:00:00.000 GMT-0800,1.39,1.40,1.38,1.39,10\n"
    )
    frame = read_bars(path)
    expected = pd.date_range("2010-11-07 08:58", periods=3, freq="min", tz="UTC")
    assert (frame["timestamp"].to_numpy() == expected.to_numpy()).all()
    assert frame.attrs["timezone"] == "in the file" and NAIVE_AS_UTC not in frame.attrs["read_as"]
