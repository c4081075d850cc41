"""Seeing and using the models: Snakemake's report, its figures, and the predict rule."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from conftest import (
    PNG_SIGNATURE,
    REPO,
    add_datasets,
    chromium_or_skip,
    copy_of_run,
    decoded,
    is_svg,
    pending_jobs,
    report_results,
    snakemake,
    write_config,
)

import rnnfleet.report.table_page
from rnnfleet.hooks import PATCHES_OFF_VARIABLE

DATASETS = ["AAA_1m", "BBB_1m"]
FORECAST_BARS = 7


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """One real run over two datasets with forecasts configured for the first, then its report."""
    workdir = tmp_path_factory.mktemp("report")
    add_datasets(workdir, DATASETS)
    write_config(workdir, data_dir="data", predict={"datasets": DATASETS[:1], "last": FORECAST_BARS})
    snakemake(workdir)
    report = snakemake(workdir, "--report", "report.html")
    (workdir / "report_output.txt").write_text(report.stdout + report.stderr)
    return workdir


class TagCounter(HTMLParser):
    def __init__(self):
        super().__init__()
        self.doctype, self.starts, self.ends = None, {}, {}

    def handle_decl(self, decl):
        self.doctype = decl

    def handle_starttag(self, tag, attrs):
        self.starts[tag] = self.starts.get(tag, 0) + 1

    def handle_endtag(self, tag):
        self.ends[tag] = self.ends.get(tag, 0) + 1


def test_report_is_one_valid_html_page(run):
    text = (run / "report.html").read_text()
    parser = TagCounter()
    parser.feed(text)
    parser.close()
    assert parser.doctype and parser.doctype.lower() == "doctype html"
    for tag in ("html", "head", "body"):
        assert parser.starts.get(tag) == parser.ends.get(tag) == 1, tag
    assert parser.starts.get("script", 0) == parser.ends.get("script", 0) > 0


def test_report_text_renders_without_restructuredtext_messages(run):
    output = (run / "report_output.txt").read_text()
    assert not re.search(r"\((INFO|WARNING|ERROR|SEVERE)/\d\)", output), output
    assert "System Message" not in (run / "report.html").read_text()


def test_report_has_a_labelled_loss_curve_per_dataset(run):
    results = report_results((run / "report.html").read_text())
    curves = {path: entry for path, entry in results.items() if "loss_curves" in path}
    assert sorted(entry["labels"]["dataset"] for entry in curves.values()) == DATASETS
    for entry in curves.values():
        assert entry["mime_type"] == "image/svg+xml" and is_svg(decoded(entry))


def test_report_has_the_summary_table_skill_overview_and_description(run):
    text = (run / "report.html").read_text()
    results = report_results(text)
    overview = {entry["labels"]["figure"]: entry for entry in results.values() if "figure" in entry["labels"]}
    assert set(overview) == {"summary table", "skill by dataset", "interval coverage"}
    assert decoded(overview["skill by dataset"]).startswith(PNG_SIGNATURE)
    table_html = decoded(overview["summary table"]).decode()
    with open(run / "results" / "metrics.csv") as handle:
        summary = list(csv.DictReader(handle))
    for row in summary:
        assert f"<td>{row['dataset']}</td>" in table_html
    assert "val_skill" in table_html and "naive_val_loss" in table_html
    # report/workflow.rst, rendered with this run's config (TINY_CONFIG's hidden_size)
    assert "one RNN per dataset" in text
    assert re.search(r"hidden_size = <tt[^>]*>8</tt>", text)


def test_a_zip_report_holds_the_start_page_and_every_result_and_opens_in_a_browser(run, tmp_path):
    # The large fleet's report (docs/running.md): a page that loads each result from the
    # files beside it, when it is shown. bench/bench_report.py measures it at 10,000 datasets.
    snakemake(run, "--report", "report.zip")
    with zipfile.ZipFile(run / "report.zip") as archive:
        names = set(archive.namelist())
        archive.extractall(tmp_path)
    page = tmp_path / "report" / "report.html"
    text = page.read_text()
    assert "one RNN per dataset" in text
    results = report_results(text)
    assert {f"report/{entry['data_uri']}" for entry in results.values()} <= names  # files, not data: URIs
    curves = {entry["labels"]["dataset"]: entry for path, entry in results.items() if "loss_curves" in path}
    assert sorted(curves) == DATASETS
    for entry in curves.values():
        assert entry["mime_type"] == "image/svg+xml" and is_svg((page.parent / entry["data_uri"]).read_bytes())
    (table,) = [entry for entry in results.values() if entry["labels"].get("figure") == "summary table"]
    table_html = (page.parent / table["data_uri"]).read_text()
    assert all(f"<td>{dataset}</td>" in table_html for dataset in DATASETS)
    assert '<input id="search"' in table_html and "<script>" in table_html  # searchable, sortable

    browser = chromium_or_skip()
    command = [sys.executable, str(REPO / "bench" / "bench_report.py"), "--open", str(page), "--reps", "1"]
    opened = subprocess.run([*command, "--browser", browser], capture_output=True, text=True, timeout=300)
    assert opened.returncode == 0, opened.stderr[-3000:]
    figures = json.loads(opened.stdout)
    assert figures["table_rows"] == len(DATASETS)  # the table's frame shows every dataset
    assert 0 < figures["start_page_s"] < 60 and 0 < figures["table_s"] < 60


def test_the_table_shows_a_page_of_rows_and_searches_and_sorts_them_all(tmp_path):
    browser = chromium_or_skip()
    page_rows = rnnfleet.report.table_page.TABLE_PAGE_ROWS
    names = [f"D{number:05d}_1m" for number in range(2 * page_rows + 100)]
    rows = [{"dataset": name, "test_skill": f"{-number / 1e4:.4f}"} for number, name in enumerate(names)]
    rnnfleet.report.table_page.write_table_html(rows, ["dataset", "test_skill"], tmp_path / "table.html")
    program = [sys.executable, str(REPO / "tests" / "programs" / "table_in_browser.py"), browser]
    opened = subprocess.run([*program, str(tmp_path / "table.html")], capture_output=True, text=True, timeout=120)
    assert opened.returncode == 0, opened.stderr[-3000:]
    shown = json.loads(opened.stdout)
    assert shown["opened"]["rows"] == names[:page_rows]  # best first, a page of them
    assert shown["opened"]["count"] == f"{len(names)} dataset(s), {page_rows} shown."
    assert shown["searched"]["rows"] == names[10:20]  # any row, also those not shown yet
    assert shown["searched"]["count"] == f"10 of {len(names)} dataset(s) match, 10 shown."
    assert shown["cleared"] == shown["opened"]
    assert shown["more"]["rows"] == names[: 2 * page_rows]
    assert shown["sorted by dataset"]["rows"] == names[::-1][:page_rows]  # descending first
    assert shown["sorted by dataset, reversed"]["rows"] == names[:page_rows]
    assert shown["best first"] == shown["opened"] and shown["all"]["rows"] == names


def test_the_report_speed_up_gives_every_file_the_caption_stock_snakemake_gives(run, tmp_path):
    # rnnfleet.hooks.snakemake_speedups renders a caption the same for every file once per
    # report (stock Snakemake: once per file, quadratic in the files)
    copy = copy_of_run(run, tmp_path)
    snakemake(copy, "--report", "stock.html", env={PATCHES_OFF_VARIABLE: "report_captions"})
    stock = report_results((copy / "stock.html").read_text())
    faster = report_results((run / "report.html").read_text())
    assert {path: entry["caption"] for path, entry in faster.items()} == {
        path: entry["caption"] for path, entry in stock.items()
    }
    assert all(entry["caption"].startswith("<p>") for entry in faster.values())


def curve_stamps(workdir: Path) -> dict[str, tuple[int, int]]:
    """{dataset: (inode, mtime in ns)} of the loss curves: a redrawn curve is a new file."""
    return {
        path.stem: (path.stat().st_ino, path.stat().st_mtime_ns)
        for path in (workdir / "results" / "loss_curves").glob("*.svg")
    }


def test_a_rerun_draws_only_the_loss_curves_of_new_and_retrained_datasets(run, tmp_path):
    copy = copy_of_run(run, tmp_path)
    first = curve_stamps(copy)
    (copy / "data" / f"{DATASETS[1]}.csv").unlink()
    add_datasets(copy, ["CCC_1m"])
    snakemake(copy)
    second = curve_stamps(copy)
    assert set(second) == {DATASETS[0], "CCC_1m"}  # the removed dataset's curve is gone
    assert second[DATASETS[0]] == first[DATASETS[0]]  # not drawn again
    assert "loss curves drawn: 1 " in (copy / "logs" / "plots.log").read_text()

    # New bars: re-trained. CCC_1m, not DATASETS[0], whose forecasts (configured) would be made
    # again too: a predict job is a process of its own, seconds that prove nothing here.
    add_datasets(copy, ["CCC_1m"], seed=7)
    snakemake(copy)
    third = curve_stamps(copy)
    assert third[DATASETS[0]] == second[DATASETS[0]]
    assert third["CCC_1m"][1] > second["CCC_1m"][1]
    snakemake(copy, "--report", "report.html")
    curves = [e for path, e in report_results((copy / "report.html").read_text()).items() if "loss_curves" in path]
    assert sorted(entry["labels"]["dataset"] for entry in curves) == [DATASETS[0], "CCC_1m"]


def test_a_copy_of_the_curves_left_by_a_killed_run_does_not_stop_the_next_one(run, tmp_path):
    # Snakemake copies the updated folder here before the plots job and drops the copy after
    # it; a run killed meanwhile leaves it, and Snakemake's next copy fails over it.
    copy = copy_of_run(run, tmp_path)
    left_over = copy / ".snakemake" / "backups" / "results" / "loss_curves"
    shutil.copytree(copy / "results" / "loss_curves", left_over)
    add_datasets(copy, ["CCC_1m"])
    snakemake(copy)
    assert not left_over.exists()
    assert sorted(path.stem for path in (copy / "results" / "loss_curves").glob("*.svg")) == [*DATASETS, "CCC_1m"]


def test_training_log_has_a_line_per_epoch_and_ends_with_the_verdict(run):
    lines = (run / "logs" / "train" / f"{DATASETS[0]}.log").read_text().splitlines()
    assert sum(line.startswith("epoch ") for line in lines) >= 1
    assert re.match(rf"{DATASETS[0]}: best epoch \d+ of \d+, val_loss .* \(skill [+-][\d.]+\) -> ", lines[-1])


def test_configured_forecasts_are_part_of_the_run(run):
    assert not (run / "predictions" / f"{DATASETS[1]}.csv").exists()
    forecasts = pd.read_csv(run / "predictions" / f"{DATASETS[0]}.csv")
    bars = pd.read_csv(run / "data" / f"{DATASETS[0]}.csv")
    assert len(forecasts) == FORECAST_BARS
    assert pd.Timestamp(forecasts["time"].iloc[-1]) == pd.Timestamp(bars["timestamp"].iloc[-1], tz="UTC")
    assert forecasts["forecast_close"].notna().all()
    assert "forecast(s)" in (run / "logs" / "predict" / f"{DATASETS[0]}.log").read_text()


def test_any_forecast_on_demand_runs_only_predict(run, tmp_path):
    copy = copy_of_run(run, tmp_path)
    target = f"predictions/{DATASETS[1]}.csv"
    dry = snakemake(copy, "-n", target).stdout
    assert set(pending_jobs(dry, "predict")) == {DATASETS[1]}
    assert pending_jobs(dry, "train") == {}
    snakemake(copy, target)
    assert len(pd.read_csv(copy / target)) == FORECAST_BARS


def test_unknown_dataset_to_forecast_is_a_clear_error(run, tmp_path):
    copy = copy_of_run(run, tmp_path)
    write_config(copy, data_dir="data", predict={"datasets": ["NOPE_1m"]})
    result = snakemake(copy, "-n", check=False)
    assert result.returncode != 0
    assert "predict.datasets names NOPE_1m: not a dataset" in result.stdout + result.stderr
