"""Time zones through the real snakemake and the real command line: a model trained on naive
times in Asia/Tokyo with time_of_day forecasts the same from `rnnfleet predict` as from the
workflow (the model file records how its bars were read); naive times taken as UTC are said
in words in the preprocess log and by `rnnfleet inspect`; each dataset's zone is a column of
results/metrics.csv and of the report's summary table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import REPO, decoded, planned_jobs, report_results, snakemake, summary_by_dataset, write_config

from rnnfleet.bars.formats import NAIVE_AS_UTC
from rnnfleet.synthetic import synthetic_bars, write_synthetic_csv

# TOKYO: naive times in Asia/Tokyo (the sheet says so); PLAIN: naive times, no zone anywhere.
SHEET = "dataset\tfiles\tformat.timezone\nTOKYO\tTOKYO_1m.csv\tAsia/Tokyo\nPLAIN\tPLAIN_1m.csv\t\n"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """One real run (time_of_day among the features, TOKYO's forecasts), then its report."""
    workdir = tmp_path_factory.mktemp("timezones")
    write_synthetic_csv(workdir / "data" / "TOKYO_1m.csv", 400, 3)
    write_synthetic_csv(workdir / "data" / "PLAIN_1m.csv", 400, 4)
    (workdir / "config").mkdir()
    (workdir / "config" / "datasets.tsv").write_text(SHEET)
    write_config(
        workdir,
        data_dir="data",
        datasets={"files": "", "sheet": "config/datasets.tsv"},
        features=["ohlc_returns", "log_volume", "time_of_day"],
        predict={"datasets": ["TOKYO"], "last": 0},
    )
    snakemake(workdir)
    snakemake(workdir, "--report", "report.html")
    return workdir


def rnnfleet(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The real `rnnfleet` command (its entry point, rnnfleet.cli:main) on this checkout's code."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "scripts")}
    command = [sys.executable, "-c", "import sys; from rnnfleet.cli.commands import main; sys.exit(main())", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def predict_module(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "scripts")}
    return subprocess.run(
        [sys.executable, "-m", "rnnfleet.cli.predict", *args], capture_output=True, text=True, env=env, cwd=cwd
    )


def test_command_line_forecasts_equal_the_workflows_for_a_model_trained_in_tokyo_time(run):
    workflow_forecasts = pd.read_csv(run / "predictions" / "TOKYO.csv")
    arguments = ["--model", "models/TOKYO.pt", "--csv", "data/TOKYO_1m.csv"]
    for name, command in (("rnnfleet", rnnfleet), ("module", predict_module)):
        predict = ("predict",) if name == "rnnfleet" else ()
        completed = command(*predict, *arguments, "--out", f"{name}.csv", cwd=run)
        assert completed.returncode == 0, completed.stderr
        said = [line for line in completed.stderr.splitlines() if "bars read as its training bars were" in line]
        assert said == [
            "models/TOKYO.pt: bars read as its training bars were: timezone 'Asia/Tokyo' "
            "(training times read in Asia/Tokyo)"
        ], completed.stderr
        assert "naive times in Asia/Tokyo" in completed.stderr
        pd.testing.assert_frame_equal(pd.read_csv(run / f"{name}.csv"), workflow_forecasts)
    # The record is what makes them equal: read as UTC (9 hours off), time_of_day moves the forecasts.
    shifted = predict_module(*arguments, "--out", "utc.csv", "--timezone", "UTC", "--override-format", cwd=run)
    assert shifted.returncode == 0, shifted.stderr
    assert "--override-format: --timezone 'UTC' for 'Asia/Tokyo'" in shifted.stderr
    utc = pd.read_csv(run / "utc.csv")
    assert (pd.to_datetime(utc["time"]) - pd.to_datetime(workflow_forecasts["time"])).eq(pd.Timedelta(hours=9)).all()
    assert (utc["forecast"] != workflow_forecasts["forecast"]).any()


def test_a_time_zone_option_that_contradicts_the_model_file_is_one_line(run):
    completed = predict_module(
        "--model", "models/TOKYO.pt", "--csv", "data/TOKYO_1m.csv", "--out", "refused.csv", "--timezone", "UTC", cwd=run
    )
    assert completed.returncode == 1 and not (run / "refused.csv").exists()
    assert completed.stderr == (
        "error: option --timezone 'UTC' contradicts models/TOKYO.pt, whose training bars were read with "
        "format.timezone 'Asia/Tokyo'; leave the option out to read them the same way, or add --override-format "
        "if this file really differs\n"
    )


def test_an_option_fills_in_what_the_record_leaves_at_auto(run, tmp_path):
    """A file that needs `format:` settings at forecast time: the same bars, headerless and ';'-delimited."""
    bars = pd.read_csv(run / "data" / "TOKYO_1m.csv")
    bars.to_csv(run / "TOKYO_semicolon.csv", sep=";", header=False, index=False, float_format="%.6f")
    arguments = ["--model", "models/TOKYO.pt", "--csv", "TOKYO_semicolon.csv", "--out", "semicolon.csv"]
    positions = "timestamp=0,open=1,high=2,low=3,close=4,volume=5"
    completed = predict_module(*arguments, "--delimiter", ";", "--header", "false", "--positions", positions, cwd=run)
    assert completed.returncode == 0, completed.stderr
    assert "headerless, ';'-delimited" in completed.stderr and "naive times in Asia/Tokyo" in completed.stderr
    pd.testing.assert_frame_equal(pd.read_csv(run / "semicolon.csv"), pd.read_csv(run / "predictions" / "TOKYO.csv"))


def test_naive_times_read_as_utc_are_said_in_the_preprocess_log_and_by_inspect(run):
    plain_log = (run / "logs" / "preprocess" / "PLAIN.log").read_text()
    assert (
        f"data/PLAIN_1m.csv: read as auto: header, ','-delimited, 6 columns, time from column 'timestamp' as "
        f"ISO8601 text, {NAIVE_AS_UTC}; 400 bars" in plain_log
    )
    assert NAIVE_AS_UTC not in (run / "logs" / "preprocess" / "TOKYO.log").read_text()
    inspected = rnnfleet("inspect", str(run), cwd=run)
    assert inspected.returncode == 0, inspected.stderr
    rows = {line.split(",")[0]: line for line in inspected.stdout.splitlines()[1:]}
    assert NAIVE_AS_UTC in rows["PLAIN"] and ",UTC (assumed)," in rows["PLAIN"]
    assert NAIVE_AS_UTC not in rows["TOKYO"] and ",Asia/Tokyo," in rows["TOKYO"]
    assert f"1 dataset(s): {NAIVE_AS_UTC}: PLAIN" in (run / "logs" / "inspect.log").read_text()


def test_each_datasets_zone_is_in_the_summary_table_and_the_report(run):
    summary = summary_by_dataset(run)
    assert {name: row["timezone"] for name, row in summary.items()} == {"PLAIN": "UTC (assumed)", "TOKYO": "Asia/Tokyo"}
    table = next(
        entry
        for entry in report_results((run / "report.html").read_text()).values()
        if entry["labels"].get("figure") == "summary table"
    )
    html = decoded(table).decode()
    assert "<th>timezone</th>" in html and "<td>Asia/Tokyo</td>" in html and "<td>UTC (assumed)</td>" in html


def test_a_model_file_without_the_record_still_forecasts_and_says_so(run):
    checkpoint = torch.load(run / "models" / "TOKYO.pt", weights_only=True)
    del checkpoint["read"]  # as a model file of an older rnnfleet
    torch.save(checkpoint, run / "older.pt")
    arguments = ["--model", "older.pt", "--csv", "data/TOKYO_1m.csv", "--out", "older.csv", "--timezone", "Asia/Tokyo"]
    completed = predict_module(*arguments, cwd=run)
    assert completed.returncode == 0, completed.stderr
    assert (
        "older.pt: the model file does not record how its training bars were read (an older rnnfleet); "
        "bars read with timezone 'Asia/Tokyo'\n" in completed.stderr
    )
    pd.testing.assert_frame_equal(pd.read_csv(run / "older.csv"), pd.read_csv(run / "predictions" / "TOKYO.csv"))


def write_epoch_and_naive_files(folder) -> None:
    """data/EPOCH_1m.csv (epoch milliseconds: no zone applies) and data/NAIVE_1m.csv (naive text times)."""
    bars = synthetic_bars(400, 5)
    bars["timestamp"] = pd.to_datetime(bars["timestamp"]).astype("int64") // 10**6  # epoch milliseconds
    (folder / "data").mkdir()
    bars.to_csv(folder / "data" / "EPOCH_1m.csv", index=False, float_format="%.6f")
    write_synthetic_csv(folder / "data" / "NAIVE_1m.csv", 400, 6)  # naive text times: the zone applies


def test_a_time_zone_set_for_epoch_time_files_re_runs_nothing_for_them_and_the_dry_run_says_so(tmp_path):
    write_epoch_and_naive_files(tmp_path)
    write_config(tmp_path, data_dir="data", predict={"datasets": "all"})
    snakemake(tmp_path)
    outputs = [tmp_path / "prep" / "EPOCH_1m.npz", tmp_path / "models" / "EPOCH_1m.pt"]
    written = [path.stat().st_mtime_ns for path in outputs]

    def datasets_planned(*arguments: str) -> tuple[set[str], str]:
        result = snakemake(tmp_path, "-n", *arguments)
        jobs = planned_jobs(result.stdout)
        return {job.wildcards.split("dataset=")[1] for job in jobs if job.wildcards}, result.stderr

    zoned = ("--config", 'format={"timezone": "Europe/Berlin"}')
    planned, said = datasets_planned(*zoned)
    assert planned == {"NAIVE_1m"}
    assert (
        "rnnfleet: note: format.timezone 'Europe/Berlin' is not used by 1 dataset(s) whose files give their times "
        "as epoch numbers or with their zone: EPOCH_1m; nothing is re-run for it"
    ) in said, said
    snakemake(tmp_path, *zoned)
    assert datasets_planned(*zoned)[0] == set()
    assert datasets_planned()[0] == {"NAIVE_1m"}  # the setting removed: again only the naive times change
    assert [path.stat().st_mtime_ns for path in outputs] == written


def test_a_time_zone_set_before_the_first_run_of_epoch_time_files_and_removed_re_runs_nothing(tmp_path):
    write_epoch_and_naive_files(tmp_path)
    write_config(tmp_path, data_dir="data", format={"timezone": "Europe/Berlin"})
    first = snakemake(tmp_path)
    assert "format.timezone 'Europe/Berlin' is not used by 1 dataset(s)" in first.stderr and "EPOCH_1m" in first.stderr

    def datasets_planned() -> set[str]:
        jobs = planned_jobs(snakemake(tmp_path, "-n").stdout)
        return {job.wildcards.split("dataset=")[1] for job in jobs if job.wildcards}

    assert datasets_planned() == set()
    write_config(tmp_path, data_dir="data")  # the zone removed: only the naive times change
    assert datasets_planned() == {"NAIVE_1m"}
