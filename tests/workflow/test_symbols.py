"""A dataset is a symbol: its period files (Binance Data Vision's tree of daily and monthly
.zip files with .CHECKSUM files) are found, verified, joined and watched for changes."""

from __future__ import annotations

import csv
import hashlib
import io
import os
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import copy_of_run, pending_jobs, snakemake, write_config

from rnnfleet.bars.discovery import dataset_name, discover_datasets
from rnnfleet.errors import DataError, UserError
from rnnfleet.prep.arrays_file import load_arrays
from rnnfleet.prep.prepare import read_clean_bars
from rnnfleet.synthetic import synthetic_bars

BARS_PER_DAY = 240  # short "days" keep the trainings quick; the layout is Binance's
START = pd.Timestamp("2024-01-01", tz="UTC")
BINANCE_FILES = "**/{dataset}-1m-*"


def symbol_bars(symbol: str, days: int) -> pd.DataFrame:
    """`days` days of 1-minute bars, numbers rounded so that text reads back exactly."""
    bars = synthetic_bars(days * BARS_PER_DAY, seed=sum(map(ord, symbol)))
    for key in ("open", "high", "low", "close", "volume"):
        bars[key] = bars[key].round(6)
    bars["timestamp"] = START + pd.to_timedelta(np.arange(len(bars)), unit="min")
    return bars


def kline_text(bars: pd.DataFrame, step_minutes: int = 1) -> str:
    """Binance's 12 headerless kline columns, open time in epoch ms."""
    open_ms = bars["timestamp"].astype("datetime64[ns, UTC]").array.asi8 // 10**6
    frame = pd.DataFrame(
        {
            "open_time": open_ms,
            **{key: bars[key] for key in ("open", "high", "low", "close", "volume")},
            "close_time": open_ms + step_minutes * 60_000 - 1,
            "quote_volume": (bars["volume"] * bars["close"]).round(4),
            "trades": 17,
            "taker_base": (bars["volume"] / 2).round(4),
            "taker_quote": (bars["volume"] * bars["close"] / 2).round(4),
            "ignore": 0,
        }
    )
    text = io.StringIO()
    frame.to_csv(text, header=False, index=False)
    return text.getvalue()


def write_kline_zip(path: Path, text: str, checksum: bool = True) -> Path:
    """A Binance .zip (one CSV named like the zip) and, by default, its .CHECKSUM."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(path.with_suffix(".csv").name, text)
    if checksum:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        Path(f"{path}.CHECKSUM").write_text(f"{digest}  {path.name}\n")
    return path


def daily_path(data: Path, symbol: str, day: int) -> Path:
    date = (START + pd.Timedelta(days=day)).strftime("%Y-%m-%d")
    return data / "spot" / "daily" / "klines" / symbol / "1m" / f"{symbol}-1m-{date}.zip"


def monthly_path(data: Path, symbol: str) -> Path:
    return data / "spot" / "monthly" / "klines" / symbol / "1m" / f"{symbol}-1m-2024-01.zip"


def write_daily(data: Path, symbol: str, bars: pd.DataFrame, day: int) -> Path:
    one_day = bars.iloc[day * BARS_PER_DAY : (day + 1) * BARS_PER_DAY]
    return write_kline_zip(daily_path(data, symbol, day), kline_text(one_day))


def binance_tree(data: Path, symbols: dict[str, int], monthly_days: int = 2) -> dict[str, pd.DataFrame]:
    """Daily files of each symbol for `symbols[symbol]` days, and a monthly file holding the
    first `monthly_days` of those days again (the overlap)."""
    written = {}
    for symbol, days in symbols.items():
        bars = symbol_bars(symbol, days)
        for day in range(days):
            write_daily(data, symbol, bars, day)
        write_kline_zip(monthly_path(data, symbol), kline_text(bars.iloc[: monthly_days * BARS_PER_DAY]))
        written[symbol] = bars
    (data / "README.md").write_text("downloaded from data.binance.vision\n")
    return written


def test_binance_names_and_folders_are_discovered(tmp_path):
    binance_tree(tmp_path, {"BTCUSDT": 3, "ETHUSDT": 2})
    write_kline_zip(tmp_path / "spot" / "daily" / "klines" / "BTCUSDT" / "1mo" / "BTCUSDT-1mo-2024-01.zip", "x")
    found = discover_datasets(str(tmp_path), "*1m*", BINANCE_FILES)
    assert list(found.files) == ["BTCUSDT", "ETHUSDT"]
    assert [Path(path).name for path in found.files["BTCUSDT"]] == [
        "BTCUSDT-1m-2024-01-01.zip",
        "BTCUSDT-1m-2024-01-02.zip",
        "BTCUSDT-1m-2024-01-03.zip",
        "BTCUSDT-1m-2024-01.zip",
    ]
    assert found.checksummed == {path for paths in found.files.values() for path in paths}
    assert dataset_name("FILUSDT-1m-2024-10-01.zip") == "FILUSDT-1m-2024-10-01"
    assert dataset_name("EURUSD_1m.csv.gz") == "EURUSD_1m"
    # The default (one file, one dataset, in data_dir itself) still takes only the top folder.
    (tmp_path / "SPY_1m.csv").write_text("timestamp,open,high,low,close,volume\n")
    assert discover_datasets(str(tmp_path), "*1m*").files == {"SPY_1m": [str(tmp_path / "SPY_1m.csv")]}


def test_the_default_pattern_takes_one_minute_names_only(tmp_path):
    names = ["AAPL_1mo.csv", "X_11m.csv", "Y_15m.csv", "Z_1month.csv", "EURUSD_1m.csv", "SPY_1min.csv.gz"]
    names += ["BTCUSDT-1m-2024-01.zip", "1m_GOLD.csv", "EURUSD_M1.csv"]
    for name in names:
        (tmp_path / name).touch()
    found = discover_datasets(str(tmp_path), "*1m*").files
    assert sorted(found) == ["1m_GOLD", "BTCUSDT-1m-2024-01", "EURUSD_1m", "SPY_1min"]
    assert list(discover_datasets(str(tmp_path), "*_M1*").files) == ["EURUSD_M1"]


def test_the_dataset_placeholder_may_name_a_folder_and_must_appear_once(tmp_path):
    binance_tree(tmp_path, {"BTCUSDT": 1})
    found = discover_datasets(str(tmp_path), "*", "spot/daily/klines/{dataset}/1m/*.zip")
    assert list(found.files) == ["BTCUSDT"] and len(found.files["BTCUSDT"]) == 1
    with pytest.raises(UserError, match=r"'datasets.files' = 'spot/\*\*': must hold \{dataset\} exactly once"):
        discover_datasets(str(tmp_path), "*", "spot/**")
    with pytest.raises(UserError, match=r"'datasets.files' = '\*\*/\{dataset\}-5m-\*' matches no file"):
        discover_datasets(str(tmp_path), "*", "**/{dataset}-5m-*")


def test_a_file_replaced_with_an_older_time_changes_the_fingerprint(tmp_path):
    bars = binance_tree(tmp_path, {"BTCUSDT": 2, "ETHUSDT": 2})
    before = discover_datasets(str(tmp_path), "*", BINANCE_FILES).fingerprints
    replaced = daily_path(tmp_path, "BTCUSDT", 1)
    old_times = replaced.stat()
    changed = bars["BTCUSDT"].copy()
    changed.loc[changed.index[-1], "close"] += 0.5
    write_daily(tmp_path, "BTCUSDT", changed, 1)
    os.utime(replaced, ns=(old_times.st_atime_ns, old_times.st_mtime_ns - 10**9))
    after = discover_datasets(str(tmp_path), "*", BINANCE_FILES).fingerprints
    assert after["BTCUSDT"] != before["BTCUSDT"] and after["ETHUSDT"] == before["ETHUSDT"]


def test_joined_files_keep_an_overlap_once_and_refuse_a_conflict(tmp_path):
    bars = binance_tree(tmp_path, {"BTCUSDT": 3})["BTCUSDT"]
    files = discover_datasets(str(tmp_path), "*", BINANCE_FILES).files["BTCUSDT"]
    joined = read_clean_bars(files, None, 0.0)
    assert len(joined) == 3 * BARS_PER_DAY and joined["timestamp"].is_monotonic_increasing
    np.testing.assert_array_equal(joined["close"].to_numpy(), bars["close"].to_numpy())
    assert f"{2 * BARS_PER_DAY} bar(s) found in two files with the same values kept once" in joined.attrs["notes"]
    assert len(joined.attrs["sources"]) == 4
    assert all("sha256 verified" in line for line in joined.attrs["sources"])
    conflicting = bars.iloc[: 2 * BARS_PER_DAY].copy()
    conflicting.loc[BARS_PER_DAY + 5, "close"] += 1.0
    write_kline_zip(monthly_path(tmp_path, "BTCUSDT"), kline_text(conflicting))
    minute = (START + pd.Timedelta(minutes=BARS_PER_DAY + 5)).strftime("%Y-%m-%d %H:%M")
    with pytest.raises(DataError) as error:
        read_clean_bars(files, None, 0.0)
    message = str(error.value)
    assert "\n" not in message
    assert str(daily_path(tmp_path, "BTCUSDT", 1)) in message and str(monthly_path(tmp_path, "BTCUSDT")) in message
    assert f"hold different bars for {minute} UTC (the first such minute)" in message


def test_a_file_of_five_minute_bars_fails_naming_the_step(tmp_path):
    from rnnfleet.prep.prepare import prepare_dataset

    bars = symbol_bars("FIVE", 1)
    bars["timestamp"] = START + pd.to_timedelta(np.arange(len(bars)) * 5, unit="min")
    path = write_kline_zip(tmp_path / "FIVE-1m-2024-01.zip", kline_text(bars, step_minutes=5))
    with pytest.raises(DataError, match=r"the median step between bars is 0 days 00:05:00, not 1 minute"):
        prepare_dataset(str(path), seq_len=16, horizon=1, val_fraction=0.2)


@pytest.fixture(scope="module")
def binance_run(tmp_path_factory):
    """One real run over a Binance-like tree of two symbols, one of whose daily files is
    corrupt (its bytes no longer match its .CHECKSUM)."""
    workdir = tmp_path_factory.mktemp("binance_run")
    data = workdir / "data"
    binance_tree(data, {"BTCUSDT": 3, "ETHUSDT": 3})
    binance_tree(data, {"BADUSDT": 3})
    corrupt = daily_path(data, "BADUSDT", 2)
    corrupt.write_bytes(corrupt.read_bytes()[:-40] + bytes(40))
    write_config(workdir, data_dir="data", datasets={"files": BINANCE_FILES})
    return workdir, snakemake(workdir, check=False)


def test_a_binance_tree_trains_one_model_per_symbol_and_a_corrupt_zip_fails_alone(binance_run):
    workdir, result = binance_run
    assert result.returncode != 0  # BADUSDT failed
    assert sorted(path.name for path in (workdir / "models").glob("*.pt")) == ["BTCUSDT.pt", "ETHUSDT.pt"]
    log = (workdir / "logs" / "preprocess" / "BTCUSDT.log").read_text()
    for day in range(3):
        assert f"{daily_path(Path('data'), 'BTCUSDT', day)}: read as auto: headerless, ','-delimited, 12 columns" in log
    assert f"{monthly_path(Path('data'), 'BTCUSDT')}: read as" in log
    assert "time from column 0 in epoch ms (told by the values), UTC" in log
    assert f"{2 * BARS_PER_DAY} bars, 2024-01-01 00:00 to 2024-01-01 07:59 UTC; sha256 verified" in log
    assert (
        f"BTCUSDT (4 files under data/spot): note: {2 * BARS_PER_DAY} bar(s) found in two files "
        "with the same values kept once"
    ) in log
    arrays = load_arrays(workdir / "prep" / "BTCUSDT.npz")
    assert arrays.rows == 3 * BARS_PER_DAY - arrays.warmup - arrays.horizon
    bad_log = (workdir / "logs" / "preprocess" / "BADUSDT.log").read_text().strip().splitlines()
    assert bad_log[-1].startswith(f"ERROR: {daily_path(Path('data'), 'BADUSDT', 2)}: its SHA-256 is not the one in ")
    assert "a corrupt or incomplete download" in bad_log[-1]


def test_a_new_daily_file_makes_exactly_its_symbol_pending_naming_the_file(binance_run, tmp_path):
    workdir = copy_of_run(binance_run[0], tmp_path)
    bars = symbol_bars("ETHUSDT", 5)
    new_file = write_daily(workdir / "data", "ETHUSDT", bars, 3)
    dry_run = snakemake(workdir, "-n").stdout
    assert set(pending_jobs(dry_run, "train")) == {"ETHUSDT", "BADUSDT"}  # BADUSDT: still to do
    reason = pending_jobs(dry_run, "preprocess")["ETHUSDT"]
    assert reason.startswith("Updated input files: ")
    assert str(new_file.relative_to(workdir)) in reason.split(";")[0].removeprefix("Updated input files: ").split(", ")
    # A file downloaded with its server's (older) time is noticed too, as a change of the set.
    new_file.unlink()
    older_file = write_daily(workdir / "data", "ETHUSDT", bars, 4)
    for path in (older_file, Path(f"{older_file}.CHECKSUM")):
        os.utime(path, ns=(0, (workdir / "prep" / "ETHUSDT.npz").stat().st_mtime_ns - 3600 * 10**9))
    dry_run = snakemake(workdir, "-n").stdout
    assert set(pending_jobs(dry_run, "train")) == {"ETHUSDT", "BADUSDT"}
    assert "Set of input files has changed since last execution" in pending_jobs(dry_run, "preprocess")["ETHUSDT"]


def test_a_replacement_with_an_older_time_is_noticed(binance_run, tmp_path):
    """As `cp -p` or `rsync -a` leave it: the file and its .CHECKSUM older than the arrays."""
    workdir = copy_of_run(binance_run[0], tmp_path)
    replaced = daily_path(workdir / "data", "BTCUSDT", 2)  # a day the monthly file does not hold
    old_times = replaced.stat()
    bars = symbol_bars("BTCUSDT", 3)
    bars.loc[bars.index[BARS_PER_DAY * 2 + 10], "volume"] += 1.0
    write_daily(workdir / "data", "BTCUSDT", bars, 2)
    for path in (replaced, Path(f"{replaced}.CHECKSUM")):
        os.utime(path, ns=(old_times.st_atime_ns, old_times.st_mtime_ns - 3600 * 10**9))
    assert replaced.stat().st_mtime < (workdir / "prep" / "BTCUSDT.npz").stat().st_mtime
    dry_run = snakemake(workdir, "-n").stdout
    assert set(pending_jobs(dry_run, "preprocess")) == {"BTCUSDT", "BADUSDT"}
    assert pending_jobs(dry_run, "preprocess")["BTCUSDT"].startswith("Params have changed since last execution")


def test_inspect_checks_again_when_a_checksum_file_changes(binance_run, tmp_path):
    """A .CHECKSUM is an input of inspect: the corrupted download it now describes is found
    without --forcerun."""
    workdir = copy_of_run(binance_run[0], tmp_path)
    snakemake(workdir, "inspect")
    rows = {row["dataset"]: row for row in csv.DictReader(open(workdir / "results" / "inspect.csv"))}
    assert rows["BTCUSDT"]["status"] == "ok"
    checksum = Path(f"{daily_path(workdir / 'data', 'BTCUSDT', 1)}.CHECKSUM")
    checksum.write_text(f"{'0' * 64}  {checksum.name.removesuffix('.CHECKSUM')}\n")
    assert "rule inspect" in snakemake(workdir, "inspect", "-n").stdout
    snakemake(workdir, "inspect")
    rows = {row["dataset"]: row for row in csv.DictReader(open(workdir / "results" / "inspect.csv"))}
    assert rows["BTCUSDT"]["status"] != "ok" and "SHA-256" in rows["BTCUSDT"]["problem"]
