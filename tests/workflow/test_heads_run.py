"""Several horizons and quantiles from one model, through the real snakemake: AR(1) returns
with GARCH noise (their true conditional quantiles are known) and a random walk train with
train.horizons [1, 5, 15] and train.quantiles [0.05, 0.5, 0.95]; on the test period every
horizon's calibrated 90% interval holds about 90% of the time, the median beats the
baseline at the first horizon of the AR data, the tables and forecasts hold every column,
`rnnfleet predict` gives the forecasts the run wrote, and an update re-calibrates."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from conftest import REPO, planned_rules, snakemake, svg_texts, write_bars_of_returns, write_config

from rnnfleet.heads import Heads
from rnnfleet.prep.arrays_file import load_arrays
from rnnfleet.synthetic import ar_garch_returns
from rnnfleet.train.loop import AMP_DTYPES, usable_windows, window_outputs, window_view
from rnnfleet.train.modelfile import load_checkpoint
from rnnfleet.train.models import load_model

pytestmark = pytest.mark.long  # a minute: started first (tests/conftest.py)

ROWS = 12_000
NEW_ROWS = 1_000  # the second run's new bars
HORIZONS = [1, 5, 15]
QUANTILES = [0.05, 0.5, 0.95]
# Test windows overlap by up to 15 bars and GARCH misses cluster: a fixed data set's coverage
# strays from 0.90 by more than a binomial interval of independent windows allows (the
# metrics give both intervals); 0.05 is about three effective standard errors at 15 bars.
COVERAGE_TOLERANCE = 0.05
HEADS_CONFIG = {
    "model": {"cell": "lstm", "hidden_size": 32, "num_layers": 1, "dropout": 0.0},
    "train": {
        "seq_len": 30,
        "batch_size": 128,
        "epochs": 8,
        "patience": 3,
        "lr": 0.003,
        "horizons": HORIZONS,
        "quantiles": QUANTILES,
    },
    "preprocess": {"val_fraction": 0.2, "test_fraction": 0.2},
    "update": {"recent_bars": 2000, "max_skill_drop": 100},
}


def write_returns(folder: Path, rows: int) -> None:
    """data/AR_1m.csv and data/RW_1m.csv: the first `rows` bars of each (the same bars in every run)."""
    for name, phi, seed in (("AR_1m", 0.3, 4), ("RW_1m", 0.0, 5)):
        every = folder / "all" / f"{name}.csv"
        if not every.exists():
            returns, _ = ar_garch_returns(ROWS + NEW_ROWS, seed, phi=phi)
            write_bars_of_returns(every, returns, np.random.default_rng(seed))
        (folder / "data").mkdir(exist_ok=True)
        lines = every.read_text().splitlines(keepends=True)
        (folder / "data" / f"{name}.csv").write_text("".join(lines[: rows + 1]))


def read_rows(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    """The folder after the first run, and what it held then (metrics, tables, calibration)."""
    folder = tmp_path_factory.mktemp("heads")
    write_returns(folder, ROWS)
    write_config(folder, data_dir="data", **HEADS_CONFIG)
    snakemake(folder)
    first = {
        "metrics": {name: json.loads((folder / "metrics" / f"{name}.json").read_text()) for name in ("AR_1m", "RW_1m")},
        "table": {row["dataset"]: row for row in read_rows(folder / "results" / "metrics.csv")},
        "forecasts": {row["dataset"]: row for row in read_rows(folder / "results" / "forecasts.csv")},
        "calibration": load_checkpoint(folder / "models" / "AR_1m.pt")["calibration"],
    }
    return {"folder": folder, **first}


def test_every_horizons_90_percent_interval_holds_about_90_percent_of_the_test_windows(run):
    for name, metrics in run["metrics"].items():
        assert [entry["horizon"] for entry in metrics["horizons"]] == HORIZONS
        for entry in metrics["horizons"]:
            assert entry["interval_coverage"] == pytest.approx(0.9)
            assert abs(entry["test_coverage"] - 0.9) <= COVERAGE_TOLERANCE, (name, entry["horizon"], entry)
            assert entry["test_coverage_low"] <= entry["test_coverage"] <= entry["test_coverage_high"]
            assert entry["test_coverage_binomial_low"] <= entry["test_coverage"] <= entry["test_coverage_binomial_high"]
            assert entry["test_interval_width"] > 0
        # The unsuffixed scores are the first horizon's.
        assert metrics["test_coverage"] == metrics["horizons"][0]["test_coverage"]
        assert metrics["test_skill"] == metrics["horizons"][0]["test_skill"]


def test_the_median_beats_the_baseline_at_the_first_horizon_of_ar_returns_and_its_quantiles_beat_the_training_quantiles(
    run,
):
    ar = run["metrics"]["AR_1m"]
    assert ar["test_verdict"] == "beats the baseline", ar["test_skill"]
    assert ar["test_pinball_skill_low"] > 0, ar["test_pinball_skill"]
    assert ar["quantiles"] == QUANTILES


def test_the_table_has_each_horizons_scores_and_the_forecasts_each_horizons_quantiles_and_interval(run):
    table, forecasts = run["table"], run["forecasts"]
    for name, metrics in run["metrics"].items():
        for entry in metrics["horizons"]:
            for score in ("test_skill", "test_verdict", "test_coverage", "test_interval_width", "test_pinball_skill"):
                assert table[name][f"{score}_h{entry['horizon']}"] == str(entry[score])
        row = forecasts[name]
        assert row["status"] == "ok" and row["horizon"] == "1"
        for horizon in HORIZONS:
            values = [float(row[f"forecast_h{horizon}_q{q}"]) for q in (5, 50, 95)]
            assert values == sorted(values)  # no crossing quantiles
            low, high = float(row[f"forecast_h{horizon}_low_90"]), float(row[f"forecast_h{horizon}_high_90"])
            assert low < values[1] < high
            assert float(row[f"forecast_h{horizon}"]) == values[1]  # the point forecast is the median
        assert float(row["forecast"]) == float(row["forecast_h1"])
        assert (row["target"], row["coverage"]) == ("log_return", "0.9")
        bars = pd.read_csv(run["folder"] / "data" / f"{name}.csv")
        assert pd.Timestamp(row["time"]) == pd.Timestamp(bars["timestamp"].iloc[-1], tz="UTC")


def test_the_loss_curve_shows_the_test_period_of_every_horizon_with_its_skill(run):
    curve = run["folder"] / "results" / "loss_curves" / "AR_1m.svg"
    texts = svg_texts(curve)
    for entry in run["metrics"]["AR_1m"]["horizons"]:
        title = f"test period: forecast vs actual, horizon {entry['horizon']}: test skill {entry['test_skill']:+.4f}"
        assert sum(text.startswith(title) for text in texts) == 1, (title, texts)


def test_rnnfleet_predict_gives_every_column_the_run_wrote_and_refuses_a_coverage_of_its_own(run, tmp_path):
    folder = run["folder"]
    command = [
        sys.executable,
        "-m",
        "rnnfleet.cli.predict",
        "--model",
        "models/AR_1m.pt",
        "--csv",
        "data/AR_1m.csv",
    ]
    env = {"PYTHONPATH": str(REPO / "scripts"), "PATH": "/usr/bin:/bin"}
    subprocess.run([*command, "--out", str(tmp_path / "f.csv"), "--last", "3"], cwd=folder, env=env, check=True)
    predicted = pd.read_csv(tmp_path / "f.csv")
    last, written = predicted.iloc[-1], run["forecasts"]["AR_1m"]
    head_columns = [column for column in written if re.fullmatch(r"forecast_(close_)?h\d+.*", column)]
    assert len(head_columns) == len(HORIZONS) * (1 + 1 + len(QUANTILES) + 2)
    # One vocabulary: every column of the command's forecasts is the fleet table's, the closes
    # its interval implies too; each of a model's horizons in numeric order in both.
    assert set(predicted.columns) - set(written) == set()
    assert {"forecast_close_low", "forecast_close_high"} <= set(written)
    for column in set(predicted.columns) & set(written) - {"time", "target"}:
        assert last[column] == pytest.approx(float(written[column]), rel=1e-6, abs=1e-12), column
    assert (last["time"], last["target"]) == (written["time"], written["target"])
    for columns in (list(predicted.columns), list(written)):
        horizons = [int(match[1]) for column in columns if (match := re.search(r"_h(\d+)", column))]
        assert horizons == sorted(horizons) and sorted(set(horizons)) == HORIZONS
    refused = subprocess.run(
        [*command, "--out", str(tmp_path / "g.csv"), "--coverage", "0.8"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 1 and not (tmp_path / "g.csv").exists()
    assert (
        refused.stderr.strip().splitlines()[-1].startswith("error: --coverage 0.8: models/AR_1m.pt forecasts quantiles")
    )


def median_losses(folder: Path, dataset: str, amp: str, part: str) -> tuple[np.ndarray, np.ndarray]:
    """Per window of the array file's `part` (val or test): the squared error of the model
    file's first-horizon median and of the baseline's median (the training windows'
    targets' median, scaled), recomputed here."""
    model, checkpoint = load_model(folder / "models" / f"{dataset}.pt")
    arrays = load_arrays(folder / "prep" / f"{dataset}.npz")
    seq_len, heads = checkpoint["features"]["seq_len"], Heads.of(HORIZONS, QUANTILES)
    every = usable_windows(arrays, seq_len)
    numbers = getattr(every, part)
    windows = window_view(torch.from_numpy(arrays.features), seq_len)
    outputs = window_outputs(model, windows, AMP_DTYPES[amp], torch.from_numpy(numbers), heads)
    actual = arrays.targets[numbers + seq_len - 1, 0].astype(np.float64)
    naive = np.quantile(arrays.targets[every.train + seq_len - 1, 0].astype(np.float64), 0.5)
    return (outputs[:, 0, heads.point] - actual) ** 2, (naive - actual) ** 2


def test_a_quantile_models_validation_and_test_scores_are_both_the_medians_squared_error_and_the_pinball_says_so(
    run,
):
    folder, metrics, row = run["folder"], run["metrics"]["AR_1m"], run["table"]["AR_1m"]
    for part, loss, naive, skill in (
        ("val", "val_loss", "naive_val_loss", "skill"),
        ("test", "test_loss", "naive_test_loss", "test_skill"),
    ):
        losses, naive_losses = median_losses(folder, "AR_1m", metrics["amp"], part)
        assert metrics[loss] == pytest.approx(losses.mean(), rel=1e-4), part
        assert metrics[naive] == pytest.approx(naive_losses.mean(), rel=1e-6), part
        assert metrics[skill] == pytest.approx(1 - losses.sum() / naive_losses.sum(), rel=1e-3, abs=1e-5), part
    assert metrics["loss"] == row["loss"] == "MSE (scaled)"
    # The training loss early stopping compared is the pinball loss, in columns that say so.
    assert metrics["early_stopping"] == row["early_stopping"] == "val_pinball"
    assert metrics["val_pinball"] == min(entry["val_pinball"] for entry in metrics["history"])
    assert float(row["val_pinball"]) == metrics["val_pinball"] and float(row["naive_val_pinball"]) > 0
    assert "val_loss" not in metrics["history"][0] and "train_pinball" in metrics["history"][0]
    objective = "pinball loss (scaled), mean over horizons 1, 5, 15 and quantiles 0.05, 0.5, 0.95"
    assert metrics["objective"] == row["objective"] == objective
    assert objective in svg_texts(folder / "results" / "loss_curves" / "AR_1m.svg")  # the loss curve's axis


def test_the_same_heads_given_on_the_command_line_re_run_nothing(run):
    """--config hands nested values over as text: typed as config.yaml types them, the same
    horizons and quantiles are the same params. (The whole train section, in config.yaml's
    order: a re-ordered section is other params to Snakemake, which re-runs every job.)"""
    train = yaml.safe_load((run["folder"] / "config.yaml").read_text())["train"]
    assert train["horizons"] == HORIZONS and train["quantiles"] == QUANTILES
    result = snakemake(run["folder"], "-n", "--config", f"train={json.dumps(train)}")
    assert not {"preprocess", "train"} & set(planned_rules(result.stdout)), result.stdout
    # Fewer horizons: the dry-run names the key that changed, train.horizons, not train.horizon.
    fewer = snakemake(run["folder"], "-n", "--config", f"train={json.dumps({**train, 'horizons': [1, 5]})}")
    output = (fewer.stdout + fewer.stderr).splitlines()
    (line,) = [line for line in output if "will be re-trained because settings changed" in line] or [fewer.stderr]
    assert line.endswith(": train.horizons [1, 5, 15] -> [1, 5] (datasets: AR_1m, RW_1m)"), line


def test_the_report_and_the_table_page_speak_of_every_horizon_in_plain_words(run, tmp_path):
    report = snakemake(run["folder"], "--report", str(tmp_path / "report.html"))
    text = (tmp_path / "report.html").read_text()
    assert "1, 5, 15 bar(s) ahead: one output per horizon, each quantiles 0.05, 0.5, 0.95" in text, report.stderr
    assert "1 bar(s) ahead" not in text and "System Message" not in text
    page = (run["folder"] / "results" / "metrics.html").read_text()
    assert "updated (column made)" in page and "*" not in page.split("<body>")[-1].split("<script")[0]


def test_an_update_keeps_the_heads_and_calibrates_them_again_on_the_new_validation_part(run):
    folder = run["folder"]
    write_returns(folder, ROWS + NEW_ROWS)
    snakemake(folder)
    metrics = json.loads((folder / "metrics" / "AR_1m.json").read_text())
    assert metrics["made"] == "update 1"
    before, after = run["calibration"], load_checkpoint(folder / "models" / "AR_1m.pt")["calibration"]
    assert after["pairs"] == before["pairs"] == [[0.05, 0.95]]
    assert tuple(after["scores"].shape) == (len(HORIZONS), 1, metrics["val_windows"])
    assert after["scores"].shape[-1] > before["scores"].shape[-1]  # the new validation part is longer
    assert [entry["horizon"] for entry in metrics["horizons"]] == HORIZONS
    row = {row["dataset"]: row for row in read_rows(folder / "results" / "forecasts.csv")}["AR_1m"]
    assert row["made"] == "update 1" and row["forecast_h15_low_90"] != ""
