"""Parsing the workflow lists each folder of data_dir once and opens no dataset file: 10,000
datasets cost one listing (the size and time of each file, for its fingerprint, come from
its directory entry, one stat each, not from os.stat or an open)."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
from conftest import PROGRAMS, REPO, TINY_ROWS, add_datasets, pending_jobs, snakemake, write_config

from rnnfleet.prep.arrays_file import load_arrays

# Runs `snakemake --list-rules` (parse only: Snakefile, config, discovery) in-process with
# os.scandir / os.listdir / os.stat / os.lstat counting the calls that reach data_dir.
COUNT_FOLDER_ACCESS = (PROGRAMS / "count_folder_access.py").read_text()


def parse_counts(tmp_path, data_dir) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", COUNT_FOLDER_ACCESS, str(data_dir)]
        + ["-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--list-rules"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "train" in result.stdout.split()
    return json.loads(result.stdout.splitlines()[-1])


def test_parsing_lists_the_data_folder_once_and_opens_no_dataset(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for number in range(300):
        (data_dir / f"S{number:03d}_1m.csv").touch()
    write_config(tmp_path, data_dir=str(data_dir))
    calls = parse_counts(tmp_path, data_dir)
    assert calls == {"scandir": 1, "listdir": 0, "listings_below": 0, "stat_of_data_files": 0, "open_of_data_files": 0}


def test_a_tree_of_period_files_is_walked_once_opening_none(tmp_path):
    data_dir = tmp_path / "data"
    for symbol in range(30):
        folder = data_dir / "spot" / "daily" / "klines" / f"S{symbol:02d}USDT" / "1m"
        folder.mkdir(parents=True)
        for day in range(1, 11):
            (folder / f"S{symbol:02d}USDT-1m-2024-01-{day:02d}.zip").touch()
            (folder / f"S{symbol:02d}USDT-1m-2024-01-{day:02d}.zip.CHECKSUM").touch()
    write_config(tmp_path, data_dir=str(data_dir), datasets={"files": "**/{dataset}-1m-*"})
    calls = parse_counts(tmp_path, data_dir)
    folders_below = 3 + 30 * 2  # spot/daily/klines, then each symbol's folder and its 1m folder
    assert calls == {
        "scandir": 1,
        "listdir": 0,
        "listings_below": folders_below,
        "stat_of_data_files": 0,
        "open_of_data_files": 0,
    }


def test_symbolic_link_loops_and_links_to_a_parent_leave_the_run_planned(tmp_path):
    """A link to a parent folder under `**/`, a link to itself named like a dataset and a
    hidden file that would be one: the dry run plans the real datasets, the looping link and
    the hidden file are skipped with their reasons, no traceback."""
    data_dir = tmp_path / "data"
    (data_dir / "spot").mkdir(parents=True)
    add_datasets(tmp_path, ["AAA-1m-2024-01"])
    (data_dir / "AAA-1m-2024-01.csv").rename(data_dir / "spot" / "AAA-1m-2024-01.csv")
    (data_dir / "spot" / "up").symlink_to("..")  # walked once, not again through the link
    (data_dir / "LOOP-1m-2024-01.csv").symlink_to("LOOP-1m-2024-01.csv")
    (data_dir / ".HIDE-1m-2024-01.csv").write_text("left by a sync tool\n")
    write_config(tmp_path, data_dir="data", datasets={"files": "**/{dataset}-1m-*"})
    dry_run = snakemake(tmp_path, "-n")
    output = dry_run.stdout + dry_run.stderr
    assert set(pending_jobs(output, "train")) == {"AAA"}
    assert "LOOP-1m-2024-01.csv" in output and "cannot be followed" in output
    assert "data/.HIDE-1m-2024-01.csv: is hidden (its name starts with a dot); rename it to train it" in output
    assert "Traceback" not in output


def test_a_tree_under_the_default_pattern_points_to_datasets_files(tmp_path):
    data_dir = tmp_path / "data" / "spot" / "monthly" / "klines"
    data_dir.mkdir(parents=True)
    (data_dir / "BTCUSDT-1m-2024-01.csv").write_text("1704067200000,1,1,1,1,1\n")
    write_config(tmp_path, data_dir="data")
    result = snakemake(tmp_path, "-n", check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "data_dir holds folders (spot)" in output and '`datasets: {files: "**/{dataset}-1m-*"}`' in output


def test_tradingview_and_dukascopy_export_names_become_dataset_names_said_in_the_log(tmp_path):
    """TradingView's "EXCHANGE_SYMBOL, 1.csv" (a comma and a space, no `1m`) and Dukascopy's
    "..._Candlestick_1_M_BID_<period>.csv" train under the default pattern, each under a dataset
    name the run states, Dukascopy's period files of one symbol joined into one dataset; a
    5-minute TradingView export is no dataset."""
    add_datasets(tmp_path, ["A_1m"])
    data = tmp_path / "data"
    (data / "A_1m.csv").rename(data / "BINANCE_BTCUSDT, 1.csv")
    add_datasets(tmp_path, ["B_1m"], rows=2 * TINY_ROWS)
    bars = pd.read_csv(data / "B_1m.csv")
    periods = ("01.01.2024-31.01.2024", "01.02.2024-29.02.2024")
    for period, part in zip(periods, (bars.iloc[:TINY_ROWS], bars.iloc[TINY_ROWS:]), strict=True):
        part.to_csv(data / f"EURUSD_Candlestick_1_M_BID_{period}.csv", index=False)
    (data / "B_1m.csv").unlink()
    (data / "BINANCE_ETHUSDT, 5.csv").write_text((data / "BINANCE_BTCUSDT, 1.csv").read_text())
    write_config(tmp_path, data_dir="data")
    result = snakemake(tmp_path, "models/BINANCE_BTCUSDT_1m.pt", "models/EURUSD_BID_1m.pt")
    output = result.stdout + result.stderr
    assert "data/BINANCE_BTCUSDT, 1.csv: TradingView export: dataset BINANCE_BTCUSDT_1m" in output
    for period in periods:
        assert f"data/EURUSD_Candlestick_1_M_BID_{period}.csv: Dukascopy export: dataset EURUSD_BID_1m" in output
    assert sorted(path.stem for path in (tmp_path / "models").glob("*.pt")) == ["BINANCE_BTCUSDT_1m", "EURUSD_BID_1m"]
    arrays = load_arrays(tmp_path / "prep" / "EURUSD_BID_1m.npz")
    assert arrays.read_as.startswith("2 files joined")
    times = pd.to_datetime(bars["timestamp"], utc=True).astype("datetime64[ns, UTC]").array.asi8
    assert arrays.latest_time == times[-1] and arrays.row_times[0] == times[arrays.warmup]  # first to last bar
    assert "ETHUSDT" not in " ".join(pending_jobs(snakemake(tmp_path, "-n").stdout, "train"))
