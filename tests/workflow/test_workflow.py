"""The workflow end to end: real snakemake runs on tiny generated datasets."""

from __future__ import annotations

import csv
import os
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import (
    REPO,
    add_datasets,
    copy_of_run,
    most_at_once,
    pending_jobs,
    planned_rules,
    snakemake,
    trained_folder,
    write_config,
)

from rnnfleet.cli.predict import main as predict_main
from rnnfleet.prep.arrays_file import load_arrays
from rnnfleet.train.loop import window_view
from rnnfleet.train.models import load_model

DATASETS = {"BTCUSDT_1m", "EURUSD_1m", "SPY_1m"}
EXPECTED_DEVICE_TYPE = "cuda" if torch.cuda.is_available() else "cpu"  # train.device: auto


def test_dry_run_lists_pending_models_and_ignores_decoys(workdir):
    result = snakemake(workdir, "-n")
    pending = pending_jobs(result.stdout, "train")
    assert set(pending) == DATASETS
    assert all("Missing output files" in reason for reason in pending.values())
    assert "EURUSD_5m" not in result.stdout and "README" not in result.stdout


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One real run over three datasets, copied (metadata and mtimes included) by each test."""
    return trained_folder(tmp_path_factory.mktemp("trained"), sorted(DATASETS))


@pytest.fixture
def trained_copy(trained, tmp_path) -> Path:
    copy = copy_of_run(trained, tmp_path)
    return copy


def test_run_saves_a_loadable_model_per_dataset(trained):
    for dataset in DATASETS:
        model_path = trained / "models" / f"{dataset}.pt"
        raw = torch.load(model_path, weights_only=True)
        assert raw["dataset"] == dataset and raw["format"] == "rnnfleet"
        assert set(raw["normalisation"]) == {"feature_mean", "feature_std", "target_mean", "target_std"}
        model, checkpoint = load_model(model_path)
        arrays = load_arrays(trained / "prep" / f"{dataset}.npz")
        windows = window_view(torch.from_numpy(arrays.features), checkpoint["features"]["seq_len"])
        predictions = model(windows[-32:])
        assert predictions.shape == (32,) and torch.isfinite(predictions).all()
    assert not list((trained / "models").glob(".*")), "temporary files left in models/"


def test_summary_has_one_row_per_dataset(trained):
    with open(trained / "results" / "metrics.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["dataset"] for row in rows} == DATASETS and len(rows) == len(DATASETS)
    for row in rows:
        assert float(row["naive_val_loss"]) > 0
        assert float(row["val_skill"]) == pytest.approx(1 - float(row["val_loss"]) / float(row["naive_val_loss"]))
        assert (
            row["device"].split(":")[0] == EXPECTED_DEVICE_TYPE
            and int(row["epochs_run"]) >= int(row["best_epoch"]) >= 1
        )


def test_a_default_tables_headline_is_the_test_period_and_it_has_no_columns_of_settings_that_are_off(trained):
    with open(trained / "results" / "metrics.csv") as handle:
        header = next(csv.reader(handle))
    assert header[:5] == ["dataset", "test_skill", "test_skill_low", "test_skill_high", "test_verdict"]
    assert "val_skill" in header and "skill" not in header  # the validation part says so in its name
    assert "test_sharpe_deflated_prob" in header and "test_sharpe_deflated" not in header
    off = [column for column in header if column.startswith(("init", "folds_")) or "pinball" in column]
    assert off == [] and "val_mean_loss" not in header and "test_accuracy" not in header
    html = (trained / "results" / "metrics.html").read_text()
    assert "<th>val_skill</th>" in html and "<th>init_note</th>" not in html


def test_the_fleets_forecasts_are_those_of_each_model_at_its_last_bar(trained, tmp_path):
    """results/forecasts.csv: a row per dataset, made at the last bar of its file, equal to
    `rnnfleet predict --last 1` on that file with that model."""
    with open(trained / "results" / "forecasts.csv") as handle:
        forecasts = {row["dataset"]: row for row in csv.DictReader(handle)}
    assert set(forecasts) == DATASETS
    for dataset, row in forecasts.items():
        bars = pd.read_csv(trained / "data" / f"{dataset}.csv")
        assert pd.Timestamp(row["time"]) == pd.Timestamp(bars["timestamp"].iloc[-1], tz="UTC")
        assert float(row["close"]) == pytest.approx(bars["close"].iloc[-1])
        assert (row["status"], row["error"], row["model"]) == ("ok", "", f"models/{dataset}.pt")
        out = tmp_path / f"{dataset}.csv"
        command = ["--model", str(trained / row["model"]), "--csv", str(trained / "data" / f"{dataset}.csv")]
        assert predict_main([*command, "--out", str(out), "--last", "1"]) == 0
        (predicted,) = pd.read_csv(out).to_dict("records")
        assert float(row["forecast"]) == pytest.approx(predicted["forecast"], rel=1e-6, abs=1e-12)
        assert float(row["forecast_close"]) == pytest.approx(predicted["forecast_close"], rel=1e-9)
        assert int(row["horizon"]) == predicted["horizon"]
        for side in ("low", "high"):  # the 90% interval, calibrated on the validation errors
            expected = predicted[f"forecast_{side}"]
            assert float(row[f"forecast_{side}"]) == pytest.approx(expected, rel=1e-6, abs=1e-12)


def test_tracking_is_off_by_default_and_writes_no_store(trained):
    assert not (trained / "mlruns.db").exists() and not (trained / "mlartifacts").exists()


def test_every_rule_logs(trained):
    for rule in ("preprocess", "train"):
        for dataset in DATASETS:
            assert (trained / "logs" / rule / f"{dataset}.log").stat().st_size > 0
            assert (trained / "benchmarks" / rule / f"{dataset}.tsv").exists()
    assert "epoch   1" in (trained / "logs" / "train" / "EURUSD_1m.log").read_text()


def test_metrics_hold_the_trainings_own_cpu_time_and_peak_memory_not_its_job_clients(trained):
    """A training run in a warm worker: Snakemake's benchmark file measures the thin job
    client; the metrics and the table measure the training itself."""
    import json

    table = {row["dataset"]: row for row in csv.DictReader(open(trained / "results" / "metrics.csv"))}
    for dataset in DATASETS:
        metrics = json.loads((trained / "metrics" / f"{dataset}.json").read_text())
        assert metrics["worker"] == "warm", "not the warm path: nothing tested"
        with open(trained / "benchmarks" / "train" / f"{dataset}.tsv") as handle:
            client = next(csv.DictReader(handle, delimiter="\t"))
        assert metrics["peak_rss_scope"] == ("job" if sys.platform.startswith("linux") else "process")
        assert metrics["peak_rss_mb"] > 3 * float(client["max_rss"])  # torch and the arrays, not a thin client
        assert metrics["cpu_seconds"] > max(float(client["cpu_time"]), 0.2 * metrics["train_seconds"])
        assert float(table[dataset]["peak_rss_mb"]) == pytest.approx(metrics["peak_rss_mb"])
        assert float(table[dataset]["cpu_seconds"]) == pytest.approx(metrics["cpu_seconds"])


def test_each_training_uses_exactly_its_declared_threads(trained):
    """torch's threads and numpy's BLAS pool (sized to every core when numpy loaded, in the
    warm worker that forked the job) are the job's declared one."""
    import json

    for dataset in DATASETS:
        metrics = json.loads((trained / "metrics" / f"{dataset}.json").read_text())
        assert metrics["worker"] == "warm"
        assert (metrics["torch_threads"], metrics["blas_threads"]) == (1, 1)


def test_rerun_with_nothing_changed_does_nothing(trained_copy):
    result = snakemake(trained_copy)
    assert "Nothing to be done" in result.stdout + result.stderr
    assert "rnnfleet: " not in result.stderr  # no run summary: the table was not re-written


def test_added_datasets_train_alone(trained_copy):
    add_datasets(trained_copy, ["GOLD_1m", "ETHUSDT_1m"], seed=50)
    dry = snakemake(trained_copy, "-n").stdout
    assert set(pending_jobs(dry, "preprocess")) == {"GOLD_1m", "ETHUSDT_1m"}
    assert set(pending_jobs(dry, "train")) == {"GOLD_1m", "ETHUSDT_1m"}
    before = {d: (trained_copy / "models" / f"{d}.pt").stat().st_mtime_ns for d in DATASETS}
    result = snakemake(trained_copy)
    after = {d: (trained_copy / "models" / f"{d}.pt").stat().st_mtime_ns for d in DATASETS}
    assert before == after
    assert (trained_copy / "models" / "GOLD_1m.pt").exists()
    total = len(DATASETS) + 2
    summary = (  # the run's last line of its own (Snakemake's elapsed time follows)
        f"rnnfleet: {total} dataset(s): 2 trained from scratch, 0 updated, {len(DATASETS)} unchanged; "
        f"table results/metrics.csv; {total} forecast(s) in results/forecasts.csv"
    )
    assert summary in result.stderr.splitlines()


def test_replaced_csv_retrains_only_that_dataset(trained_copy):
    time.sleep(0.01)
    add_datasets(trained_copy, ["SPY_1m"], rows=450, seed=77)  # newer data, newer mtime
    pending = pending_jobs(snakemake(trained_copy, "-n").stdout, "train")
    assert set(pending) == {"SPY_1m"}
    assert "Updated input files" in pending["SPY_1m"] or "updated by another job" in pending["SPY_1m"]


def test_changed_hyperparameter_retrains_all(trained_copy):
    write_config(trained_copy, data_dir="data", model={"hidden_size": 12})
    pending = pending_jobs(snakemake(trained_copy, "-n").stdout, "train")
    assert set(pending) == DATASETS
    assert all("Params have changed" in reason for reason in pending.values())


def test_changed_gpu_budget_or_threads_retrains_nothing(trained_copy):
    write_config(trained_copy, data_dir="data", train={"gpu_mem": 6, "threads": 2})
    result = snakemake(trained_copy, "-n", "--resources", "gpu_mem=20")
    assert pending_jobs(result.stdout, "train") == {}
    assert "Nothing to be done" in result.stdout + result.stderr


def test_config_override_on_command_line_merges(trained_copy):
    result = snakemake(trained_copy, "-n", "--config", 'train={"epochs": 3}')
    assert set(pending_jobs(result.stdout, "train")) == DATASETS


def test_export_the_parts_caps_and_the_fleet_start_work_from_the_command_line(trained_copy):
    # --config hands nested values over as text: export.onnx, the parts' caps, train.init and
    # pretrain.refresh act as they do from config.yaml (an export per dataset, the
    # pretraining, a re-train)
    result = snakemake(
        trained_copy,
        "-n",
        "--config",
        "export={onnx: true}",
        "preprocess={val_max_bars: 500, test_max_bars: null}",
        "train={init: fleet}",
        "pretrain={refresh: 0.5}",
    )
    planned = planned_rules(result.stdout)
    assert planned["export_onnx"] == planned["train"] == len(DATASETS) and planned["pretrain"] == 1


def test_edited_training_code_does_not_retrain(trained_copy):
    # rerun-triggers in profiles/default leave out `code`: editing scripts/ must not re-train.
    scripts = REPO / "scripts"
    for code in (
        scripts / "job.py",
        scripts / "rnnfleet" / "runner" / "jobs.py",
        scripts / "rnnfleet" / "train" / "loop.py",
    ):
        os.utime(code)  # newer mtime than every model
    result = snakemake(trained_copy, "-n")
    assert pending_jobs(result.stdout, "train") == {}


@pytest.mark.parametrize("budget, expected", [(4, lambda peak: peak == 2), (8, lambda peak: peak > 2)])
def test_gpu_mem_budget_bounds_concurrent_trainings(tmp_path, budget, expected):
    import json

    names = [f"S{i}_1m" for i in range(6)]
    add_datasets(tmp_path, names)
    write_config(tmp_path, data_dir="data", train={"gpu_mem": 2})
    snakemake(tmp_path, "--until", "preprocess")  # all trainings ready at once
    snakemake(tmp_path, "--cores", "6", "--resources", f"gpu_mem={budget}")
    intervals = []
    for name in names:
        metrics = json.loads((tmp_path / "metrics" / f"{name}.json").read_text())
        intervals.append((metrics["process_started_at"], metrics["finished_at"]))
    assert expected(most_at_once(intervals)), intervals


def test_cold_and_warm_training_give_identical_models(trained_copy):
    # `trained` ran with warm workers (the default), whose children train one dataset after
    # another; train again, each job in its own process.
    def models() -> dict[str, dict]:
        return {name: torch.load(trained_copy / "models" / f"{name}.pt", weights_only=True) for name in DATASETS}

    warm_models = models()
    snakemake(trained_copy, "--forcerun", "train", "--config", 'train={"warm_workers": false}')
    cold_models = models()
    warm_pids = [model["metrics"]["pid"] for model in warm_models.values()]
    assert len(set(warm_pids)) < len(warm_pids)  # a warm child trained more than one dataset
    for name, warm in warm_models.items():
        cold = cold_models[name]
        # the comparison is between the two paths, not two runs of the same one
        assert warm["metrics"]["worker"] == "warm" and cold["metrics"]["worker"] == "cold"
        assert warm["metrics"]["warm_server_pid"] not in (None, warm["metrics"]["pid"])
        for key, value in warm["state_dict"].items():
            torch.testing.assert_close(cold["state_dict"][key], value, rtol=0, atol=0)
        assert cold["metrics"]["startup_seconds"] > 0
