"""Data-quality flags through the real snakemake: a fleet with a flat, zero-volume dataset, one
with high < low, one with conflicting duplicate timestamps, a sparse one and a clean one. The
failing ones fail with one line, the others warn in their preprocess log, the clean one is not
flagged; inspect.csv, results/metrics.csv and the report show the flags and the report's
ranking marks the degenerate dataset."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import (
    TINY_ROWS,
    decoded,
    pending_jobs,
    report_results,
    snakemake,
    summary_by_dataset,
    write_config,
)

from rnnfleet.synthetic import synthetic_bars

FLAT, HIGH_LOW, DUPLICATES, SPARSE, CLEAN = "FLAT_1m", "HIGHLOW_1m", "DUPES_1m", "SPARSE_1m", "CLEAN_1m"


def write_fleet(data: Path) -> None:
    data.mkdir(parents=True)

    def write(name: str, bars: pd.DataFrame) -> None:
        bars.to_csv(data / f"{name}.csv", index=False, float_format="%.6f")

    clean = synthetic_bars(TINY_ROWS, 1)
    write(CLEAN, clean)
    flat = synthetic_bars(TINY_ROWS, 2)
    flat = flat.assign(open=flat["close"], high=flat["close"], low=flat["close"])
    flat.loc[: int(TINY_ROWS * 0.45) - 1, "volume"] = 0.0
    write(FLAT, flat)
    high_low = synthetic_bars(TINY_ROWS, 3)
    write(HIGH_LOW, high_low.assign(high=high_low["low"], low=high_low["high"]))
    duplicates = synthetic_bars(TINY_ROWS, 4)
    prices = ["open", "high", "low", "close"]
    changed = duplicates.iloc[100:130].assign(**{key: duplicates[key].iloc[100:130] * 3 for key in prices})
    write(DUPLICATES, pd.concat([duplicates, changed]))
    sparse = synthetic_bars(TINY_ROWS, 5)
    minutes = np.concatenate([[0], np.cumsum(np.resize([1, 1, 3], TINY_ROWS - 1))])
    times = pd.Timestamp("2024-01-01") + pd.to_timedelta(minutes, unit="min")
    write(SPARSE, sparse.assign(timestamp=times.strftime("%Y-%m-%d %H:%M:%S")))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("quality")
    write_fleet(workdir / "data")
    write_config(workdir, data_dir="data")
    snakemake(workdir, "inspect")
    run = snakemake(workdir, check=False)  # two datasets fail: the run ends non-zero, the others train
    (workdir / "run.log").write_text(run.stderr)
    snakemake(workdir, "--report", "report.html")
    return workdir


def test_inspect_shows_each_flag_and_which_datasets_fail(fleet):
    with open(fleet / "results" / "inspect.csv", encoding="utf-8") as table:
        rows = {row["dataset"]: row for row in csv.DictReader(table)}
    assert (rows[CLEAN]["status"], rows[CLEAN]["quality_flags"], rows[CLEAN]["flat_bars"]) == ("ok", "", "0.0")
    assert rows[FLAT]["status"] == "ok"
    assert rows[FLAT]["quality_flags"] == "flat_bars 100.0%, zero_volume 45.0%"
    assert rows[SPARSE]["status"] == "ok" and rows[SPARSE]["quality_flags"].startswith("missing_minutes ")
    assert float(rows[SPARSE]["missing_minutes"]) > 0.25 and rows[SPARSE]["median_step"] == "00:01:00"
    assert rows[HIGH_LOW]["status"] == "unusable" and rows[HIGH_LOW]["ohlc_inconsistent"] == "1.0"
    assert "quality.ohlc_inconsistent.fail" in rows[HIGH_LOW]["problem"]
    assert rows[DUPLICATES]["status"] == "unusable"
    assert "conflicting duplicates" in rows[DUPLICATES]["problem"]


def test_failing_flags_fail_with_one_line_and_warnings_go_to_the_log(fleet):
    summary = summary_by_dataset(fleet)
    for dataset, words in (
        (HIGH_LOW, "inconsistent OHLC (high < low, or open or close outside [low, high]): 100.0% of the bars"),
        (DUPLICATES, "conflicting duplicates (one timestamp, different bars; the last was kept): 7.5% of the bars"),
    ):
        assert summary[dataset]["status"] == "data error", summary[dataset]
        assert summary[dataset]["error"].startswith(f"preprocess: data/{dataset}.csv: data quality: {words}")
        assert not (fleet / "models" / f"{dataset}.pt").exists()
    flat_log = (fleet / "logs" / "preprocess" / f"{FLAT}.log").read_text()
    assert f"data/{FLAT}.csv: data quality measured: flat_bars 100.0%, zero_volume 45.0%" in flat_log
    assert "data quality measured: missing_minutes " in (fleet / "logs" / "preprocess" / f"{SPARSE}.log").read_text()
    assert "data quality" not in (fleet / "logs" / "preprocess" / f"{CLEAN}.log").read_text()
    # Failures leave the table to the run's error handler: the warnings are in the run's own output.
    run_output = (fleet / "run.log").read_text()
    assert f"{FLAT}: warning: data quality: flat_bars 100.0%, zero_volume 45.0%" in run_output
    assert f"{SPARSE}: warning: data quality: missing_minutes " in run_output
    assert f"{CLEAN}: warning" not in run_output


def test_the_metrics_table_flags_the_degenerate_datasets_and_not_the_clean_one(fleet):
    summary = summary_by_dataset(fleet)
    assert summary[CLEAN]["status"] == "ok" and summary[CLEAN]["quality_flags"] == ""
    assert summary[FLAT]["status"] == "ok" and summary[FLAT]["quality_flags"] == "flat_bars 100.0%, zero_volume 45.0%"
    assert (summary[FLAT]["flat_bars"], summary[FLAT]["zero_volume"]) == ("1.0", "0.45")
    assert summary[SPARSE]["quality_flags"].startswith("missing_minutes ")


def test_the_report_ranking_marks_the_degenerate_dataset(fleet):
    results = report_results((fleet / "report.html").read_text())
    figures = {entry["labels"]["figure"]: entry for entry in results.values() if "figure" in entry["labels"]}
    table = decoded(figures["summary table"]).decode()
    assert f'<td>{FLAT} <span class="quality">&#9888; [data quality: flat_bars 100.0%, zero_volume 45.0%]' in table
    assert f"<td>{CLEAN}</td>" in table
    assert "2 dataset(s) flagged for data quality" in table  # FLAT and SPARSE


def test_a_changed_warn_threshold_re_writes_the_table_and_re_trains_nothing(fleet):
    write_config(fleet, data_dir="data", quality={"flat_bars": {"warn": 1.0}, "zero_volume": {"warn": 1.0}})
    planned = snakemake(fleet, "-n").stdout
    assert not pending_jobs(planned, "preprocess").keys() - {HIGH_LOW, DUPLICATES}
    assert not pending_jobs(planned, "train").keys() - {HIGH_LOW, DUPLICATES}
    snakemake(fleet, check=False)  # HIGH_LOW and DUPLICATES still fail
    summary = summary_by_dataset(fleet)
    assert summary[FLAT]["status"] == "ok" and summary[FLAT]["quality_flags"] == ""
    assert summary[SPARSE]["quality_flags"].startswith("missing_minutes ")


def test_a_changed_fail_threshold_re_runs_the_preprocess_it_affects(fleet):
    write_config(fleet, data_dir="data", quality={"flat_bars": {"warn": 0.9, "fail": 0.95}})
    planned = snakemake(fleet, "-n").stdout
    assert set(pending_jobs(planned, "preprocess")) >= {FLAT, CLEAN}
    write_config(fleet, data_dir="data")
    assert pending_jobs(snakemake(fleet, "-n").stdout, "preprocess").keys() == {HIGH_LOW, DUPLICATES}


def test_thresholds_from_the_command_line_act_as_from_config_yaml(fleet):
    failing = {HIGH_LOW, DUPLICATES}  # pending in every dry run: their preprocess failed
    fail_changed = snakemake(fleet, "-n", "--config", 'quality={"flat_bars": {"fail": 0.95}}').stdout
    assert set(pending_jobs(fail_changed, "preprocess")) >= {FLAT, CLEAN}
    warn_changed = snakemake(fleet, "-n", "--config", 'quality={"flat_bars": {"warn": 0.99}}').stdout
    assert pending_jobs(warn_changed, "preprocess").keys() == failing
    assert not pending_jobs(warn_changed, "train").keys() - failing


def test_a_datasets_sheet_row_sets_the_quality_thresholds_of_its_dataset_alone(tmp_path):
    """Two copies of the flat, zero-volume bars: one row raises the flat-bars warning to 100%,
    the other makes flat bars fail; the third dataset keeps the config's thresholds."""
    write_fleet(tmp_path / "all")
    (tmp_path / "data").mkdir()
    for name in ("FLAT_A", "FLAT_B", "FLAT_C"):
        shutil.copy(tmp_path / "all" / f"{FLAT}.csv", tmp_path / "data" / f"{name}.csv")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "datasets.tsv").write_text(
        "dataset\tfiles\tquality.flat_bars.warn\tquality.flat_bars.fail\n"
        "FLAT_A\tFLAT_A.csv\t1.0\t\nFLAT_B\tFLAT_B.csv\t\t0.5\nFLAT_C\tFLAT_C.csv\t\t\n"
    )
    write_config(tmp_path, data_dir="data", datasets={"files": "", "sheet": "config/datasets.tsv"})
    snakemake(tmp_path, "inspect")
    run = snakemake(tmp_path, check=False)

    with open(tmp_path / "results" / "inspect.csv", encoding="utf-8") as table:
        inspected = {row["dataset"]: row for row in csv.DictReader(table)}
    assert (inspected["FLAT_A"]["status"], inspected["FLAT_A"]["quality_flags"]) == ("ok", "zero_volume 45.0%")
    assert inspected["FLAT_B"]["status"] == "unusable" and "quality.flat_bars.fail" in inspected["FLAT_B"]["problem"]
    assert inspected["FLAT_C"]["quality_flags"] == "flat_bars 100.0%, zero_volume 45.0%"
    summary = summary_by_dataset(tmp_path)
    assert (summary["FLAT_A"]["status"], summary["FLAT_A"]["quality_flags"]) == ("ok", "zero_volume 45.0%")
    assert summary["FLAT_B"]["status"] == "data error" and "flat bars" in summary["FLAT_B"]["error"]
    assert summary["FLAT_C"]["quality_flags"] == "flat_bars 100.0%, zero_volume 45.0%"
    assert "FLAT_A: warning: data quality: zero_volume 45.0%" in run.stderr

    # A row's warn cell changed: the tables only; its fail cell changed: that dataset's preprocess.
    sheet = tmp_path / "config" / "datasets.tsv"
    sheet.write_text(sheet.read_text().replace("FLAT_A\tFLAT_A.csv\t1.0\t", "FLAT_A\tFLAT_A.csv\t0.99\t"))
    warn_changed = snakemake(tmp_path, "-n").stdout
    assert pending_jobs(warn_changed, "preprocess").keys() == {"FLAT_B"}  # FLAT_B: its preprocess failed
    sheet.write_text(sheet.read_text().replace("FLAT_A\tFLAT_A.csv\t0.99\t", "FLAT_A\tFLAT_A.csv\t0.99\t0.999"))
    assert pending_jobs(snakemake(tmp_path, "-n").stdout, "preprocess").keys() == {"FLAT_A", "FLAT_B"}
