"""Layouts of real files that were refused before (issue 24: no volume, FXCM's bid/ask
columns, yfinance's three header lines, every line quoted, UTF-16, numbers as text in
Parquet; Dukascopy's "Local time" export with its offsets, the Kaggle Bitstamp set) train
through the real snakemake with the default config, zoned files at their UTC instants; a feature the config
names that needs volume fails alone; `snakemake inspect` tables every file beside an
unreadable one.
"""

from __future__ import annotations

import csv
import shutil

import numpy as np
import pytest
from conftest import pending_jobs, snakemake, summary_by_dataset, write_config
from layouts import (
    REAL_LAYOUTS,
    SEQ_LEN,
    binance,
    headered,
    preprocess_log,
    reference_bars,
    write_nse,
    write_real_layouts,
)

from rnnfleet.errors import DATA_ERROR_NOTE
from rnnfleet.prep.arrays_file import load_arrays
from rnnfleet.train.modelfile import load_checkpoint

WITHOUT_VOLUME = [dataset for dataset, (*_, has_volume) in REAL_LAYOUTS.items() if not has_volume]
# Files that say their times' zone (an offset per bar, epoch seconds, zoned times): every bar
# at the plain CSV's UTC instant, first to last.
ZONED = ["YFINANCE_1m", "PARQUETTEXT_1m", "DUKASLOCAL_1m", "BITSTAMP_1m"]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """One run of the default config: every REAL_LAYOUTS file and the two plain CSVs trained,
    the files without volume forecast."""
    workdir = tmp_path_factory.mktemp("real_layouts")
    write_real_layouts(reference_bars(), workdir / "data")
    write_config(workdir, data_dir="data", train={"seq_len": SEQ_LEN})
    forecasts = [f"predictions/{dataset}.csv" for dataset in [*WITHOUT_VOLUME, "PLAINNOVOL_1m"]]
    return workdir, snakemake(workdir, "results/metrics.csv", *forecasts, check=False)


def test_each_real_layout_trains_through_snakemake_on_the_arrays_of_the_plain_csv(real_run):
    workdir, result = real_run
    assert result.returncode == 0, result.stderr[-4000:]
    summary = summary_by_dataset(workdir)
    for dataset, (_, _, read_as, has_volume) in REAL_LAYOUTS.items():
        plain = load_arrays(workdir / "prep" / ("PLAIN_1m.npz" if has_volume else "PLAINNOVOL_1m.npz"))
        arrays = load_arrays(workdir / "prep" / f"{dataset}.npz")
        for field in ("features", "targets", "feature_mean", "feature_std"):
            np.testing.assert_array_equal(getattr(arrays, field), getattr(plain, field), err_msg=dataset)
        read_lines = [line for line in preprocess_log(workdir, dataset).splitlines() if ": read as " in line]
        assert len(read_lines) == 1 and read_as in read_lines[0], (dataset, read_lines)
        assert summary[dataset]["status"] == "ok", (dataset, summary[dataset])
        assert load_checkpoint(workdir / "models" / f"{dataset}.pt")["dataset"] == dataset
        if dataset in ZONED:
            np.testing.assert_array_equal(arrays.row_times, plain.row_times, err_msg=dataset)
            assert arrays.latest_time == plain.latest_time, dataset


def test_without_volume_the_log_summary_and_model_file_say_log_volume_was_left_out_and_forecasts_run(real_run):
    workdir, _ = real_run
    summary = summary_by_dataset(workdir)
    for dataset in [*WITHOUT_VOLUME, "PLAINNOVOL_1m"]:
        assert "note: default feature(s) log_volume left out: no volume column" in preprocess_log(workdir, dataset)
        assert summary[dataset]["features"] == "ohlc_returns (log_volume left out: no volume)"
        recorded = load_checkpoint(workdir / "models" / f"{dataset}.pt")["features"]
        assert (recorded["definition"], recorded["left_out"]) == (["ohlc_returns"], ["log_volume"])
        forecasts = (workdir / "predictions" / f"{dataset}.csv").read_text().splitlines()
        assert len(forecasts) > 1, dataset  # forecasts compute the features the model was trained on
    assert summary["PLAIN_1m"]["features"] == "ohlc_returns + log_volume"
    assert load_checkpoint(workdir / "models" / "PLAIN_1m.pt")["features"]["left_out"] == []


def test_a_feature_the_config_names_that_needs_volume_fails_alone_naming_it_and_the_file(tmp_path):
    bars = reference_bars()
    (tmp_path / "data").mkdir()
    write_nse(bars, tmp_path / "data" / "NSE_1m.csv")
    headered(bars).to_csv(tmp_path / "data" / "PLAIN_1m.csv", index=False)
    write_config(tmp_path, data_dir="data", train={"seq_len": SEQ_LEN}, features=["ohlc_returns", "volume_change"])
    result = snakemake(tmp_path, "results/metrics.csv", check=False)
    log = preprocess_log(tmp_path, "NSE_1m")
    errors = [line for line in log.splitlines() if line.startswith("ERROR")]
    problem = "data/NSE_1m.csv: has no volume column, which feature 'volume_change' (config key features) needs"
    assert len(errors) == 1 and errors[0].startswith(f"ERROR: {problem}") and "Traceback" not in log, log
    assert errors[0].endswith(DATA_ERROR_NOTE) and result.returncode != 0
    summary = summary_by_dataset(tmp_path)
    assert summary["NSE_1m"]["status"] == "data error" and summary["PLAIN_1m"]["status"] == "ok"


def test_inspect_writes_a_row_for_every_file_beside_an_unreadable_parquet(real_run, tmp_path):
    workdir, _ = real_run
    shutil.copytree(workdir / "data", tmp_path / "data")
    (tmp_path / "data" / "BROKEN_1m.parquet").write_bytes(b"PAR1" + b"\x00garbage" * 20 + b"PAR1")
    write_config(tmp_path, data_dir="data", train={"seq_len": SEQ_LEN})
    snakemake(tmp_path, "inspect")
    with open(tmp_path / "results" / "inspect.csv", encoding="utf-8") as table:
        rows = {row["dataset"]: row for row in csv.DictReader(table)}
    assert set(rows) == {*REAL_LAYOUTS, "PLAIN_1m", "PLAINNOVOL_1m", "BROKEN_1m"}
    broken = rows.pop("BROKEN_1m")
    assert broken["status"] == "unusable"
    assert broken["problem"].startswith("data/BROKEN_1m.parquet: not a readable Parquet file"), broken["problem"]
    log = (tmp_path / "logs" / "inspect.log").read_text()
    assert "1 not trainable as they are\n  BROKEN_1m: data/BROKEN_1m.parquet: not a readable Parquet file" in log, log
    for dataset, row in rows.items():
        assert row["status"] == "ok" and row["bars"] == "400", (dataset, row)
    assert "log_volume left out: no volume column" in rows["NSE_1m"]["cleaning"]
    assert "column 'close' holds its numbers as text: converted" in rows["PARQUETTEXT_1m"]["cleaning"]


def test_price_side_from_the_command_line_reads_the_ask_side(real_run):
    workdir, _ = real_run
    snakemake(workdir, "inspect", "--config", 'format={"price_side": "ask"}')
    rows = {row["dataset"]: row for row in csv.DictReader((workdir / "results" / "inspect.csv").open())}
    assert "ask prices (format.price_side)" in rows["FXCM_1m"]["read_as"], rows["FXCM_1m"]
    # and the changed setting makes that dataset's preprocess pending, as from config.yaml
    planned = snakemake(workdir, "-n", "--config", 'format={"price_side": "ask"}').stdout
    assert "FXCM_1m" in pending_jobs(planned, "preprocess")


def test_columns_set_to_a_german_exports_names_leave_the_other_files_to_their_own_layout(real_run, tmp_path):
    """`columns:` naming the German export's header: that file is read by them, the headerless
    Binance file and the plain CSV beside it by their own layout (before, both were read as if
    they had the German header and failed)."""
    workdir, _ = real_run
    (tmp_path / "data").mkdir()
    for dataset in ("EUROPEAN_1m", "PLAIN_1m"):
        shutil.copy(workdir / "data" / f"{dataset}.csv", tmp_path / "data")
    binance(reference_bars(), "ms").to_csv(tmp_path / "data" / "BINANCE_1m.csv", header=False, index=False)
    german = {"date": "Datum", "time": "Zeit", "open": "Eröffnung", "high": "Hoch", "low": "Tief"}
    write_config(tmp_path, data_dir="data", columns={**german, "close": "Schluss", "volume": "Volumen"})
    snakemake(tmp_path, "inspect")
    with open(tmp_path / "results" / "inspect.csv", encoding="utf-8") as table:
        rows = {row["dataset"]: row for row in csv.DictReader(table)}
    assert {dataset: row["status"] for dataset, row in rows.items()} == dict.fromkeys(
        ("BINANCE_1m", "EUROPEAN_1m", "PLAIN_1m"), "ok"
    )
    assert all(row["bars"] == "400" for row in rows.values())
    assert rows["BINANCE_1m"]["read_as"].startswith("auto: headerless, ','-delimited, 12 columns")
    assert "decimal comma" in rows["EUROPEAN_1m"]["read_as"]
