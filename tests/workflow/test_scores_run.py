"""Honest scores through the real workflow: test skill with its interval on structured data
and on a random walk, and what the table and the report say of each."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from conftest import decoded, is_svg, report_results, snakemake, write_bars_of_returns, write_config

from rnnfleet.synthetic import write_synthetic_csv
from rnnfleet.train.evaluate import TEST_SERIES_POINTS

# --- the split ----------------------------------------------------------------------------


WORKFLOW_ROWS = 4000


def write_random_walk_csv(path, rows: int, seed: int) -> None:
    """Bars of a pure random walk: iid log returns, iid volume: nothing to predict."""
    rng = np.random.default_rng(seed)
    write_bars_of_returns(path, rng.normal(0, 1e-3, rows), rng)


@pytest.fixture(scope="module")
def scored_run(tmp_path_factory):
    """One real run: structured synthetic bars and a pure random walk, then the report."""
    workdir = tmp_path_factory.mktemp("scores")
    write_synthetic_csv(workdir / "data" / "SYNTH_1m.csv", WORKFLOW_ROWS, 21)
    write_random_walk_csv(workdir / "data" / "WALK_1m.csv", WORKFLOW_ROWS, 22)
    write_config(
        workdir,
        data_dir="data",
        model={"cell": "lstm", "hidden_size": 16, "num_layers": 1, "dropout": 0.0},
        train={"epochs": 4, "patience": 2, "lr": 0.003},
    )
    snakemake(workdir)
    snakemake(workdir, "--report", "report.html")
    with open(workdir / "results" / "metrics.csv") as handle:
        rows = {row["dataset"]: row for row in csv.DictReader(handle)}
    return workdir, rows


def test_structured_data_beat_the_baseline_on_the_test_period_with_an_interval_above_zero(scored_run):
    workdir, rows = scored_run
    row = rows["SYNTH_1m"]
    low, skill, high = (float(row[column]) for column in ("test_skill_low", "test_skill", "test_skill_high"))
    assert 0 < low <= skill <= high, row
    assert row["test_verdict"] == "beats the baseline"
    assert float(row["test_dm_stat"]) < 0 and float(row["test_dm_pvalue"]) < 0.05
    assert 0.5 < float(row["test_hit_rate"]) <= 1 and row["test_trade_bps"] != ""
    assert row["val_skill"] != row["test_skill"]  # the validation skill stays its own column
    # The 90% forecast interval on the test period: how often it held, with its interval.
    low, coverage, high = (
        float(row[column]) for column in ("test_coverage_low", "test_coverage", "test_coverage_high")
    )
    assert 0 < low <= coverage <= high <= 1 and float(row["test_interval_width"]) > 0
    metrics = json.loads((workdir / "metrics" / "SYNTH_1m.json").read_text())
    assert metrics["test_skill"] == pytest.approx(1 - metrics["test_loss"] / metrics["naive_test_loss"])
    checkpoint = torch.load(workdir / "models" / "SYNTH_1m.pt", weights_only=True)
    assert checkpoint["metrics"]["test_skill"] == metrics["test_skill"]
    assert checkpoint["split"]["test_start"] == metrics["test_start_row"] < checkpoint["split"]["rows"]


def test_a_random_walk_is_not_distinguishable_from_the_baseline_and_the_report_says_so(scored_run):
    workdir, rows = scored_run
    row = rows["WALK_1m"]
    assert float(row["test_skill_low"]) < 0 < float(row["test_skill_high"]), row
    assert row["test_verdict"] == "not distinguishable from the baseline"
    table_html = (workdir / "results" / "metrics.html").read_text()
    walk_row = next(line for line in table_html.splitlines() if "<td>WALK_1m</td>" in line)
    assert 'class="unclear"' in walk_row and "not distinguishable from the baseline" in walk_row
    assert "1 beat the baseline, 1 not distinguishable from the baseline, 0 worse" in table_html
    # Ranked by test skill: the structured dataset first.
    assert table_html.index("<td>SYNTH_1m</td>") < table_html.index("<td>WALK_1m</td>")
    report = (workdir / "report.html").read_text()
    assert "not distinguishable from the baseline" in report


# --- files of an older rnnfleet -----------------------------------------------------------


def test_each_datasets_page_in_the_report_shows_its_test_period(scored_run):
    """The loss curve of each dataset (its page under Results -> Loss curves) carries the test
    period's forecast against actual, from the series its metrics record."""
    workdir, _ = scored_run
    entries = report_results((workdir / "report.html").read_text())
    for dataset in ("SYNTH_1m", "WALK_1m"):
        metrics = json.loads((workdir / "metrics" / f"{dataset}.json").read_text())
        series = metrics["test_series"]
        assert len(series["window"]) == min(metrics["test_windows"], TEST_SERIES_POINTS)
        assert len(series["actual"]) == len(series["forecast"]) == len(series["window"])
        (entry,) = [entry for path, entry in entries.items() if path.endswith(f"loss_curves/{dataset}.svg")]
        assert is_svg(decoded(entry))
