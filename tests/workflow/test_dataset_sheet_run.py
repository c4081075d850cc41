"""A datasets sheet through the real snakemake: it decides the datasets and their files, each
dataset trains with its own settings (time zone, target, model), a change to one row's
override re-runs exactly that dataset, and a bad row stops the run with one line naming it."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from conftest import (
    add_datasets,
    copy_of_run,
    decoded,
    pending_jobs,
    report_results,
    snakemake,
    summary_by_dataset,
    write_config,
)

from rnnfleet.prep.arrays_file import load_arrays
from rnnfleet.synthetic import synthetic_bars

HEADER = "dataset\tfiles\tformat.timezone\ttarget\tmodel.hidden_size\n"
# ETH: two files in a folder of its own, naive times in Athens, a larger model; EUR: another
# target; BTC: nothing of its own. A decoy that `pattern` would take is not in the sheet.
ROWS = {
    "ETH-1": "ETH\tETH/ETH-1.csv\tEurope/Athens\t\t12\n",
    "ETH-2": "ETH\tETH/ETH-2.csv\t\t\t\n",
    "EUR": "EUR\tEUR_1m.csv\t\tdirection\t\n",
    "BTC": "BTC\tBTC_1m.csv\t\t\t\n",
}


def write_sheet(workdir: Path, **replaced: str) -> None:
    rows = {**ROWS, **replaced}
    (workdir / "config" / "datasets.tsv").write_text(HEADER + "".join(rows.values()))


def sheet_folder(workdir: Path) -> Path:
    add_datasets(workdir, ["EUR_1m", "BTC_1m", "SPY_1m"])
    bars = synthetic_bars(400, 5)
    (workdir / "data" / "ETH").mkdir()
    bars.iloc[:200].to_csv(workdir / "data" / "ETH" / "ETH-1.csv", index=False, float_format="%.6f")
    bars.iloc[200:].to_csv(workdir / "data" / "ETH" / "ETH-2.csv", index=False, float_format="%.6f")
    (workdir / "config").mkdir()
    write_sheet(workdir)
    write_config(workdir, data_dir="data", datasets={"files": "", "sheet": "config/datasets.tsv"})
    return workdir


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """One real run over the sheet's three datasets, its report, inspect and one forecast."""
    workdir = sheet_folder(tmp_path_factory.mktemp("sheet"))
    snakemake(workdir)
    snakemake(workdir, "--report", "report.html")
    snakemake(workdir, "inspect", "predictions/ETH.csv")
    return workdir


def test_the_sheet_decides_the_datasets_and_their_files(run):
    assert sorted(path.stem for path in (run / "models").glob("*.pt")) == ["BTC", "ETH", "EUR"]
    eth_log = (run / "logs" / "preprocess" / "ETH.log").read_text()
    assert "data/ETH/ETH-1.csv: read as" in eth_log and "data/ETH/ETH-2.csv: read as" in eth_log
    assert "ETH (2 files under data/ETH): 398 rows" in eth_log


def test_each_dataset_trains_with_its_own_time_zone_target_and_model(run):
    summary = summary_by_dataset(run)
    assert {name: (row["target"], row["model"]) for name, row in summary.items()} == {
        "ETH": ("log_return over 1 bar(s)", "lstm 1x12"),
        "EUR": ("direction over 1 bar(s)", "lstm 1x8"),
        "BTC": ("log_return over 1 bar(s)", "lstm 1x8"),
    }
    eth_log = (run / "logs" / "preprocess" / "ETH.log").read_text()
    # 00:00 in Athens (UTC+2 in winter) is 22:00 UTC the day before
    assert "naive times in Europe/Athens; 200 bars, 2023-12-31 22:00 to 2024-01-01 01:19 UTC" in eth_log
    assert (
        "naive times read as UTC (set format.timezone); 400 bars, 2024-01-01 00:00"
        in (run / "logs" / "preprocess" / "EUR.log").read_text()
    )
    assert load_arrays(run / "prep" / "EUR.npz").target == "direction"
    assert load_arrays(run / "prep" / "BTC.npz").target == "log_return"


def test_the_report_shows_each_datasets_own_target_and_model(run):
    text = (run / "report.html").read_text()
    results = report_results(text)
    table = next(entry for entry in results.values() if entry["labels"].get("figure") == "summary table")
    html = decoded(table).decode()
    assert "<td>direction over 1 bar(s)</td>" in html and "<td>lstm 1x12</td>" in html
    assert "listed in the datasets sheet" in text


@pytest.mark.parametrize(
    ("row", "changed", "preprocess", "train"),
    [
        ("EUR", "EUR\tEUR_1m.csv\t\tabs_log_return\t\n", {"EUR"}, {"EUR"}),
        ("ETH-1", "ETH\tETH/ETH-1.csv\tEurope/Athens\t\t16\n", set(), {"ETH"}),
        ("BTC", "BTC\tBTC_1m.csv\tAmerica/New_York\t\t\n", {"BTC"}, {"BTC"}),
    ],
    ids=["target", "model", "time zone of a dataset without overrides"],
)
def test_changing_one_rows_override_makes_exactly_that_dataset_pending(run, tmp_path, row, changed, preprocess, train):
    copy = copy_of_run(run, tmp_path)
    assert "Nothing to be done" in snakemake(copy, "-n").stdout
    write_sheet(copy, **{row: changed})
    dry_run = snakemake(copy, "-n").stdout
    assert set(pending_jobs(dry_run, "preprocess")) == preprocess, dry_run
    assert set(pending_jobs(dry_run, "train")) == train, dry_run
    changed_step = "preprocess" if preprocess else "train"
    assert all("Params have changed" in reason for reason in pending_jobs(dry_run, changed_step).values()), dry_run


BAD_ROWS = {
    "missing file": (
        {"EUR": "EUR\tEUR_1h.csv\t\tdirection\t\n"},
        "datasets sheet 'config/datasets.tsv' line 4 (dataset EUR): files 'EUR_1h.csv': no such file in data_dir "
        "'data'",
    ),
    "unknown time zone": (
        {"BTC": "BTC\tBTC_1m.csv\tMars/Olympus\t\t\n"},
        "datasets sheet 'config/datasets.tsv' line 5 (dataset BTC): config key 'format.timezone' = 'Mars/Olympus' "
        "is not allowed",
    ),
}


@pytest.mark.parametrize("case", [*BAD_ROWS, "unknown key"])
def test_a_bad_row_stops_the_run_with_one_line_naming_it(tmp_path, case):
    workdir = sheet_folder(tmp_path)
    if case == "unknown key":
        (workdir / "config" / "datasets.tsv").write_text(
            HEADER.replace("model.hidden_size", "model.hiden_size") + "".join(ROWS.values())
        )
        expected = (
            "datasets sheet 'config/datasets.tsv' line 1: unknown column 'model.hiden_size' "
            "(did you mean 'model.hidden_size'?)"
        )
    else:
        replaced, expected = BAD_ROWS[case]
        write_sheet(workdir, **replaced)
    result = snakemake(workdir, check=False)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if "datasets sheet" in line]
    assert len(lines) == 1 and lines[0].startswith(expected), result.stderr
    assert "Traceback" not in result.stderr
    assert not (workdir / "logs").exists() and not (workdir / "prep").exists()


def test_inspect_and_forecasts_read_a_dataset_with_its_own_time_zone(run):
    with open(run / "results" / "inspect.csv", encoding="utf-8") as table:
        inspected = {row["dataset"]: row for row in csv.DictReader(table)}
    assert inspected["ETH"]["read_as"].endswith("naive times in Europe/Athens")
    assert inspected["ETH"]["first"] == "2023-12-31 22:00:00+00:00"
    assert inspected["EUR"]["first"] == "2024-01-01 00:00:00+00:00"
    # The predict job's one line for its two files: joined, read in the sheet's zone, from 22:00 UTC.
    read_line = next(
        line for line in (run / "logs" / "predict" / "ETH.log").read_text().splitlines() if "read as" in line
    )
    assert "read as 2 files joined: " in read_line and "naive times in Europe/Athens; " in read_line, read_line
    assert " bars, 2023-12-31 22:00 to " in read_line, read_line
