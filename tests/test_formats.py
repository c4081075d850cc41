"""The same bars written in every layout users have: preprocessing gives identical arrays.

Each file is built here from one set of bars (docs/data.md lists the layouts); the
workflow test runs the real snakemake over all of them plus the documented odd cases
(a 31-bar day, a weekend gap, gaps everywhere, epoch units that switch inside a file).
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from conftest import REPO, pending_jobs, snakemake, write_config

from rnnfleet.data import DataError, load_arrays
from rnnfleet.formats import FORMAT_PRESETS, read_bars
from rnnfleet.gaps import usable_window_ends
from rnnfleet.predict import forecast_csv
from rnnfleet.synthetic import synthetic_bars

ROWS = 400
SEQ_LEN = 30
BAR_KEYS = ["open", "high", "low", "close", "volume"]
NS_PER = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}


def reference_bars(rows: int = ROWS, start: str = "2024-01-02 00:00") -> pd.DataFrame:
    """Bars whose numbers survive text exactly (6 decimals), with UTC timestamps."""
    bars = synthetic_bars(rows, seed=7)
    for key in BAR_KEYS:
        bars[key] = [float(f"{value:.6f}") for value in bars[key]]
    bars["timestamp"] = pd.date_range(start, periods=rows, freq="min", tz="UTC").astype("datetime64[ns, UTC]")
    return bars


def epoch(bars: pd.DataFrame, unit: str) -> np.ndarray:
    return bars["timestamp"].array.asi8 // NS_PER[unit]


def numbers(bars: pd.DataFrame) -> pd.DataFrame:
    return bars[BAR_KEYS]


def headered(bars: pd.DataFrame) -> pd.DataFrame:
    return pd.concat([bars["timestamp"].dt.strftime("%Y-%m-%d %H:%M:%S"), numbers(bars)], axis=1)


def binance(bars: pd.DataFrame, unit: str) -> pd.DataFrame:
    """The 12 columns of Binance's kline files."""
    open_time = epoch(bars, unit)
    return pd.DataFrame(
        {
            "open_time": open_time,
            **numbers(bars),
            "close_time": open_time + 60 * NS_PER["s"] // NS_PER[unit] - 1,
            "quote_volume": (bars["volume"] * bars["close"]).round(4),
            "trades": 17,
            "taker_base": (bars["volume"] / 2).round(4),
            "taker_quote": (bars["volume"] * bars["close"] / 2).round(4),
            "ignore": 0,
        }
    )


def write_headerless(frame: pd.DataFrame, path: Path, sep: str = ",") -> None:
    frame.to_csv(path, sep=sep, header=False, index=False)


def write_every_layout(bars: pd.DataFrame, folder: Path) -> dict[str, str]:
    """{dataset: what its preprocess log must say about how it was read}; files in folder."""
    folder.mkdir(parents=True, exist_ok=True)
    expected = {}
    text = headered(bars)
    for dataset, suffix, sep in [
        ("COMMA_1m", ".csv", ","),
        ("SEMICOLON_1m", ".txt", ";"),
        ("TAB_1m", ".tsv", "\t"),
        ("GZ_1m", ".csv.gz", ","),
        ("BZ2_1m", ".csv.bz2", ";"),
        ("XZ_1m", ".csv.xz", ","),
        ("ZIP_1m", ".csv.zip", ","),
    ]:
        text.to_csv(folder / f"{dataset}{suffix}", sep=sep, index=False)
        expected[dataset] = f"auto: header, {sep!r}-delimited, 6 columns, time from column 'timestamp' as ISO8601"
    write_headerless(text, folder / "NOHEADER_ISO_1m.csv")
    expected["NOHEADER_ISO_1m"] = "auto: headerless, ','-delimited, 6 columns, time from column 0 as ISO8601 text"
    zulu = text.assign(timestamp=bars["timestamp"].dt.strftime("%Y-%m-%dT%H:%M:%SZ"))
    zulu.to_csv(folder / "ZULU_1m.csv", index=False)
    expected["ZULU_1m"] = "time from column 'timestamp' as ISO8601 text, UTC"
    for unit in ("ms", "us"):
        write_headerless(binance(bars, unit), folder / f"BINANCE-{unit.upper()}-1m-2024-01-02.csv")
        expected[f"BINANCE-{unit.upper()}-1m-2024-01-02"] = (
            f"auto: headerless, ','-delimited, 12 columns, time from column 0 in epoch {unit} (told by the values), UTC"
        )
    write_headerless(pd.DataFrame({"t": epoch(bars, "s"), **numbers(bars), "trades": 5}), folder / "KRAKEN_1m.csv")
    expected["KRAKEN_1m"] = "headerless, ','-delimited, 7 columns, time from column 0 in epoch s"
    for unit in NS_PER:
        pd.DataFrame({"timestamp": epoch(bars, unit), **numbers(bars)}).to_csv(
            folder / f"EPOCH_{unit.upper()}_1m.csv", index=False
        )
        expected[f"EPOCH_{unit.upper()}_1m"] = f"time from column 'timestamp' in epoch {unit} (told by the values)"
    mixed = pd.DataFrame({"timestamp": epoch(bars, "ms"), **numbers(bars)})
    mixed.loc[ROWS // 2 :, "timestamp"] = epoch(bars, "us")[ROWS // 2 :]
    mixed.to_csv(folder / "MIXED_1m.csv", index=False)
    expected["MIXED_1m"] = "in epoch ms and us (told by the values)"
    write_headerless(
        pd.DataFrame(
            {
                "date": bars["timestamp"].dt.strftime("%Y.%m.%d"),
                "time": bars["timestamp"].dt.strftime("%H:%M"),
                **numbers(bars),
            }
        ),
        folder / "MT4_1m.csv",
    )
    expected["MT4_1m"] = "headerless, ','-delimited, 7 columns, time from columns 0 + 1 as %Y.%m.%d %H:%M text"
    pd.DataFrame(
        {
            "<DATE>": bars["timestamp"].dt.strftime("%Y.%m.%d"),
            "<TIME>": bars["timestamp"].dt.strftime("%H:%M:%S"),
            **{f"<{key.upper()}>": bars[key] for key in BAR_KEYS[:4]},
            "<TICKVOL>": bars["volume"],
            "<VOL>": 0,
            "<SPREAD>": 12,
        }
    ).to_csv(folder / "MT5_1m.csv", sep="\t", index=False)
    expected["MT5_1m"] = "header, '\\t'-delimited, 9 columns, time from columns '<DATE>' + '<TIME>'"
    est = bars["timestamp"].dt.tz_convert("Etc/GMT+5")  # histdata.com: EST all year
    write_headerless(
        pd.DataFrame({"t": est.dt.strftime("%Y%m%d %H%M%S"), **numbers(bars)}), folder / "HISTDATA_1m.csv", sep=";"
    )
    expected["HISTDATA_1m"] = "as %Y%m%d %H%M%S text, naive times in Etc/GMT+5"
    pd.DataFrame(
        {
            "Gmt time": bars["timestamp"].dt.strftime("%d.%m.%Y %H:%M:%S.000"),
            **{key.capitalize(): bars[key] for key in BAR_KEYS},
        }
    ).to_csv(folder / "DUKASCOPY_1m.csv", index=False)
    expected["DUKASCOPY_1m"] = "time from column 'Gmt time' as %d.%m.%Y %H:%M:%S.%f text, naive times in UTC"
    pd.DataFrame(
        {"symbol": "BTCUSDT", "timestamp": bars["timestamp"], **numbers(bars), "trades": 9, "vwap": bars["close"]}
    ).to_parquet(folder / "PARQUET_1m.parquet", index=False)
    expected["PARQUET_1m"] = "auto: Parquet, 9 columns, read 6, time from column 'timestamp' as zoned times, UTC"
    return expected


@pytest.fixture(scope="module")
def every_layout(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    folder = tmp_path_factory.mktemp("layouts")
    return folder, write_every_layout(reference_bars(), folder)


def file_of(folder: Path, dataset: str) -> Path:
    return next(path for path in folder.iterdir() if path.name.startswith(dataset + "."))


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


def test_a_bad_max_gap_is_a_config_error_naming_the_key():
    from rnnfleet.hooks.config_check import config_problems

    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    problems = config_problems({"preprocess": {"max_gap": "5 minutes"}}, schema)
    assert len(problems) == 1 and "config key 'preprocess.max_gap' = '5 minutes' is not allowed" in problems[0]
    assert config_problems({"preprocess": {"max_gap": "off"}, "format": {"preset": "binance"}}, schema) == []


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


@pytest.mark.parametrize("warmup", [1, 3])  # 1: the default features; 3: e.g. a 3-bar rolling feature
def test_usable_window_ends_match_a_brute_force_count(warmup):
    rows, seq_len, horizon = 60, 5, 2
    gap_bars = np.array([10, 11, 40])
    usable = usable_window_ends(rows, gap_bars, seq_len, horizon, warmup)
    for end in range(rows):
        # feature row t looks back to bar t and describes bar t + warmup; its target ends horizon bars later
        touched_steps = range(end - seq_len + 1, end + warmup + horizon)  # step b: bar b -> b + 1
        expected = end >= seq_len - 1 and not any(step in gap_bars for step in touched_steps)
        assert usable[end] == expected, end


# --- the real workflow over every layout and the odd cases ----------------------------------


def gapped_bars(gaps_after: list[int], gap: str, rows: int = ROWS) -> pd.DataFrame:
    bars = reference_bars(rows, start="2024-01-05 20:00")  # a Friday evening
    shift = np.zeros(rows, dtype="timedelta64[ns]")
    for bar in gaps_after:
        shift[bar + 1 :] += pd.Timedelta(gap).to_timedelta64()
    bars["timestamp"] = bars["timestamp"] + shift
    return bars


ODD_CASES = {
    "ZEROPRICE_1m": "zero or negative price in data row 51",
    "OUTAGE_1m": "too few rows for one training window plus validation and test: 31 usable rows",
    "CHOPPED_1m": "gap(s) longer than preprocess.max_gap=15min leave no piece long enough",
}


@pytest.fixture(scope="module")
def layouts_run(every_layout, tmp_path_factory):
    """One real run: preprocess every layout and the odd cases; train COMMA and WEEKEND."""
    workdir = tmp_path_factory.mktemp("layouts_run")
    shutil.copytree(every_layout[0], workdir / "data")
    headered(reference_bars(31)).to_csv(workdir / "data" / "OUTAGE_1m.csv", index=False)
    headered(gapped_bars([199], "2D")).to_csv(workdir / "data" / "WEEKEND_1m.csv", index=False)
    headered(gapped_bars(list(range(20, ROWS, 25)), "1h")).to_csv(workdir / "data" / "CHOPPED_1m.csv", index=False)
    headered(reference_bars(100)).to_csv(workdir / "data" / "EURUSD_5m.csv", index=False)  # decoys
    (workdir / "data" / "notes_1m.md").write_text("not a dataset\n")
    zero_price = headered(reference_bars(100))
    zero_price.loc[50, "low"] = 0.0
    zero_price.to_csv(workdir / "data" / "ZEROPRICE_1m.csv", index=False)
    write_config(workdir, data_dir="data", train={"seq_len": SEQ_LEN})
    datasets = [*every_layout[1], *ODD_CASES, "WEEKEND_1m"]
    targets = [f"prep/{name}.npz" for name in datasets] + ["models/COMMA_1m.pt", "models/WEEKEND_1m.pt"]
    return workdir, snakemake(workdir, *targets, check=False)


def preprocess_log(workdir: Path, dataset: str) -> str:
    return (workdir / "logs" / "preprocess" / f"{dataset}.log").read_text()


def test_every_layout_gives_identical_arrays_through_snakemake(every_layout, layouts_run):
    workdir, _ = layouts_run
    expected = every_layout[1]
    reference = load_arrays(workdir / "prep" / "COMMA_1m.npz")
    for dataset, read_as in expected.items():
        arrays = load_arrays(workdir / "prep" / f"{dataset}.npz")
        for field in ("features", "targets", "feature_mean", "feature_std", "gap_bars"):
            np.testing.assert_array_equal(getattr(arrays, field), getattr(reference, field), err_msg=dataset)
        assert (arrays.split, arrays.target_std) == (reference.split, reference.target_std)
        read_lines = [line for line in preprocess_log(workdir, dataset).splitlines() if ": read as " in line]
        assert len(read_lines) == 1 and read_as in read_lines[0], (dataset, read_lines)
    assert "epoch timestamps switch unit (ms and us; first at data row 201)" in preprocess_log(workdir, "MIXED_1m")


@pytest.mark.parametrize("dataset", sorted(ODD_CASES))
def test_a_31_bar_day_short_pieces_and_a_zero_price_fail_alone_naming_the_problem(layouts_run, dataset):
    workdir, result = layouts_run
    error_lines = [line for line in preprocess_log(workdir, dataset).splitlines() if line.startswith("ERROR")]
    assert len(error_lines) == 1 and ODD_CASES[dataset] in error_lines[0], error_lines
    assert not (workdir / "prep" / f"{dataset}.npz").exists()
    assert (workdir / "models" / "COMMA_1m.pt").exists() and result.returncode != 0


def test_no_window_spans_a_weekend_gap(layouts_run):
    workdir, _ = layouts_run
    log = preprocess_log(workdir, "WEEKEND_1m")
    assert "1 gap(s) longer than preprocess.max_gap=15min split the series (longest 2 days 00:01:00 after" in log
    arrays = load_arrays(workdir / "prep" / "WEEKEND_1m.npz")
    assert arrays.gap_bars.tolist() == [199]
    # Brute force: a window ending at feature row t touches the steps t-seq_len+1 .. t+horizon.
    ends = range(SEQ_LEN - 1, arrays.rows)
    clean = [t for t in ends if not (t - SEQ_LEN + 1 <= 199 <= t + arrays.horizon)]
    split = arrays.split
    train = [t for t in clean if t < split.train_end]
    val = [t for t in clean if split.val_start <= t < split.val_end]
    test = [t for t in clean if t >= split.test_start]
    metrics = json.loads((workdir / "metrics" / "WEEKEND_1m.json").read_text())
    assert (metrics["train_windows"], metrics["val_windows"], metrics["test_windows"]) == (
        len(train),
        len(val),
        len(test),
    )
    assert len(train) < split.train_end - (SEQ_LEN - 1)  # windows were left out
    every_window = split.train_end - (SEQ_LEN - 1) + split.val_end - split.val_start + arrays.rows - split.test_start
    lost = every_window - len(train) - len(val) - len(test)
    assert f"{lost} window(s) spanning them are not used" in log


@pytest.mark.parametrize("change", ['format={"timezone": "Europe/Berlin"}', 'preprocess={"max_gap": "1h"}'])
def test_a_format_or_gap_setting_change_re_preprocesses(layouts_run, change):
    workdir, _ = layouts_run
    result = snakemake(workdir, "-n", "prep/COMMA_1m.npz", "--config", change)
    assert "Params have changed" in pending_jobs(result.stdout, "preprocess")["COMMA_1m"]


def test_forecasts_read_the_same_layouts(every_layout, layouts_run, tmp_path):
    workdir, _ = layouts_run
    folder = every_layout[0]
    model = workdir / "models" / "COMMA_1m.pt"
    reference = forecast_csv(model, file_of(folder, "COMMA_1m"), tmp_path / "comma.csv", last=5)
    for dataset in ("BINANCE-US-1m-2024-01-02", "MT5_1m", "HISTDATA_1m", "PARQUET_1m"):
        forecasts = forecast_csv(model, file_of(folder, dataset), tmp_path / f"{dataset}.csv", last=5)
        pd.testing.assert_frame_equal(forecasts, reference)


def test_inspect_tables_every_dataset_without_training(every_layout, layouts_run):
    workdir, _ = layouts_run
    models_before = sorted(path.name for path in (workdir / "models").iterdir())
    result = snakemake(workdir, "inspect")
    assert "rule train" not in result.stdout + result.stderr
    assert sorted(path.name for path in (workdir / "models").iterdir()) == models_before
    with open(workdir / "results" / "inspect.csv", encoding="utf-8") as table:
        rows = {row["dataset"]: row for row in csv.DictReader(table)}
    assert set(rows) == {*every_layout[1], *ODD_CASES, "WEEKEND_1m"}  # no decoys
    binance = rows["BINANCE-MS-1m-2024-01-02"]
    assert "12 columns, time from column 0 in epoch ms" in binance["read_as"]
    assert (binance["status"], binance["bars"], binance["median_spacing"], binance["gaps"]) == (
        "ok",
        str(ROWS),
        "00:01:00",
        "0",
    )
    assert binance["first"] == "2024-01-02 00:00:00+00:00" and binance["last"] == "2024-01-02 06:39:00+00:00"
    weekend = rows["WEEKEND_1m"]
    metrics = json.loads((workdir / "metrics" / "WEEKEND_1m.json").read_text())
    assert (weekend["gaps"], weekend["longest_gap"]) == ("1", "2 days 00:01:00")
    assert (int(weekend["train_windows"]), int(weekend["val_windows"])) == (
        metrics["train_windows"],
        metrics["val_windows"],
    )
    assert rows["OUTAGE_1m"]["status"] == "too short" and rows["OUTAGE_1m"]["long_enough"] == "False"
    assert "preprocess.max_gap=15min" in rows["CHOPPED_1m"]["problem"]
    assert rows["ZEROPRICE_1m"]["status"] == "unusable" and ODD_CASES["ZEROPRICE_1m"] in rows["ZEROPRICE_1m"]["problem"]


class RecordingModel(torch.nn.Module):
    """Predicts 0 + a learnable bias and records the first feature (= the row number) of
    every window it is shown, in training and in validation."""

    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(1))
        self.seen_windows: list[tuple[bool, list[int]]] = []

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        for window in windows[:, :, 0].round().long().tolist():
            self.seen_windows.append((self.training, window))
        return self.bias.expand(len(windows))


def test_train_model_shows_the_model_no_window_that_spans_a_gap(monkeypatch):
    from rnnfleet import training
    from rnnfleet.data import PreparedArrays

    rows, seq_len, horizon, gap_bars = 200, 8, 2, np.array([40, 41, 120])
    features = np.zeros((rows, 5), dtype=np.float32)
    features[:, 0] = np.arange(rows)  # feature row t holds t
    arrays = PreparedArrays(
        features=features,
        targets=np.ones(rows, dtype=np.float32),
        feature_mean=np.zeros(5, np.float32),
        feature_std=np.ones(5, np.float32),
        target_std=1.0,
        train_end=158,
        val_start=160,
        last_close=1.0,
        horizon=horizon,
        gap_bars=gap_bars,
    )
    model = RecordingModel()
    monkeypatch.setattr(training, "build_model", lambda config, input_size, seq_len: model)
    hparams = {"seq_len": seq_len, "batch_size": 16, "epochs": 1, "lr": 0.01, "patience": 1, "seed": 0}
    training.train_model(arrays, {}, hparams, torch.device("cpu"))
    usable = usable_window_ends(rows, gap_bars, seq_len, horizon)
    seen_ends = {"train": set(), "val": set()}
    for in_training, window in model.seen_windows:
        assert window == list(range(window[0], window[0] + seq_len))  # consecutive feature rows
        end = window[-1]
        # Steps end-seq_len+1 .. end+horizon (inputs and target) cross no gap.
        assert not any(end - seq_len + 1 <= bar <= end + horizon for bar in gap_bars), window
        seen_ends["train" if in_training else "val"].add(end)
    assert seen_ends["train"] == {t for t in range(arrays.train_end) if usable[t]}
    assert seen_ends["val"] == {t for t in range(arrays.val_start, rows) if usable[t]}
