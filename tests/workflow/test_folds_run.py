"""Which model is the product (evaluate.production) and walk-forward folds (evaluate.folds),
through the real snakemake: a refit's model file, K fold scores in the metrics and the
table, and a run killed between folds that, run again, trains only the unfinished ones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import (
    add_datasets,
    kill_hard,
    pending_jobs,
    snakemake,
    start_paused_run,
    summary_by_dataset,
    write_config,
)

from rnnfleet.train.walkforward import FOLDS_DIR

ROWS = 1200
TEST_SCORES = ("val_loss", "naive_val_loss", "skill", "test_skill", "test_skill_low", "test_skill_high", "test_loss")


def model_file(workdir: Path, dataset: str = "A_1m") -> dict:
    return torch.load(workdir / "models" / f"{dataset}.pt", weights_only=True)


def metrics_of(workdir: Path, dataset: str = "A_1m") -> dict:
    return json.loads((workdir / "metrics" / f"{dataset}.json").read_text())


# --- evaluate.production --------------------------------------------------------------------


@pytest.fixture(scope="module")
def scored_then_refit(tmp_path_factory):
    """One dataset trained with the default (scored), then the same folder with refit."""
    scored = tmp_path_factory.mktemp("scored")
    add_datasets(scored, ["A_1m"], rows=ROWS)
    write_config(scored, data_dir="data")
    snakemake(scored)
    refit = tmp_path_factory.mktemp("refit") / "run"
    shutil.copytree(scored, refit, symlinks=True)
    write_config(refit, data_dir="data", evaluate={"production": "refit"})
    dry_run = snakemake(refit, "-n")
    assert "A_1m" in pending_jobs(dry_run.stdout, "train")  # the setting re-trains
    snakemake(refit)
    return scored, refit


def test_the_default_model_file_is_the_scored_model(scored_then_refit):
    scored, _ = scored_then_refit
    checkpoint, metrics = model_file(scored), metrics_of(scored)
    assert checkpoint["product"] == "scored" == metrics["product"]
    assert "refit_epochs" not in metrics
    assert summary_by_dataset(scored)["A_1m"]["product"] == "scored"


def test_a_refit_model_file_says_refit_has_other_weights_and_the_scored_models_scores(scored_then_refit):
    scored, refit = scored_then_refit
    scored_checkpoint, refit_checkpoint = model_file(scored), model_file(refit)
    assert refit_checkpoint["product"] == "refit"
    weights = scored_checkpoint["state_dict"]
    assert weights.keys() == refit_checkpoint["state_dict"].keys()
    assert any(not torch.equal(weights[name], refit_checkpoint["state_dict"][name]) for name in weights)
    scored_metrics, refit_metrics = metrics_of(scored), metrics_of(refit)
    for key in TEST_SCORES:  # the scores of the scored model it descends from, trained again the same
        assert refit_checkpoint["metrics"][key] == scored_checkpoint["metrics"][key] == refit_metrics[key], key
    assert refit_metrics["refit_epochs"] == scored_metrics["best_epoch"]
    assert refit_metrics["refit_train_windows"] > scored_metrics["train_windows"] + scored_metrics["val_windows"]
    assert refit_checkpoint["normalisation"] == scored_checkpoint["normalisation"]  # kept: the training part's
    assert "refit for production" in (refit / "logs" / "train" / "A_1m.log").read_text()
    assert summary_by_dataset(refit)["A_1m"]["product"] == "refit"


def test_forecasts_use_the_refit_model(scored_then_refit):
    scored, refit = scored_then_refit
    forecasts = {}
    for workdir in (scored, refit):
        snakemake(workdir, "predictions/A_1m.csv")
        forecasts[workdir] = (workdir / "predictions" / "A_1m.csv").read_text()
    assert forecasts[scored] != forecasts[refit]


# --- evaluate.folds -------------------------------------------------------------------------


FOLDS = 3


def fold_files(workdir: Path) -> dict[str, int]:
    """{fold file name: mtime_ns} of A_1m's folds."""
    return {path.name: path.stat().st_mtime_ns for path in (workdir / FOLDS_DIR / "A_1m").glob("*/fold-*.json")}


@pytest.fixture(scope="module")
def killed_between_folds(tmp_path_factory):
    """A run with evaluate.folds 3, hard-killed right after fold 1 was saved, then run again."""
    workdir = tmp_path_factory.mktemp("folds") / "run"
    add_datasets(workdir, ["A_1m"], rows=ROWS)
    write_config(workdir, data_dir="data", evaluate={"folds": FOLDS})
    run, job_pid = start_paused_run(workdir, "fold")
    saved_before_kill = fold_files(workdir)
    killed_log = (workdir / "logs" / "train" / "A_1m.log").read_text()
    kill_hard(run, job_pid)
    snakemake(workdir)
    return workdir, saved_before_kill, killed_log


def test_walk_forward_with_three_folds_gives_three_fold_scores(killed_between_folds):
    workdir, _, _ = killed_between_folds
    metrics = metrics_of(workdir)
    folds = metrics["folds"]
    assert [fold["fold"] for fold in folds] == [1, 2, 3]
    origins = [fold["test_start_row"] for fold in folds]
    assert origins == sorted(origins) and origins[-1] == metrics["test_start_row"]
    for fold in folds:
        assert fold["train_end_row"] < fold["val_start_row"] < fold["val_end_row"] < fold["test_start_row"]
        assert fold["test_skill_low"] <= fold["test_skill"] <= fold["test_skill_high"]
    assert folds[-1]["test_skill"] == metrics["test_skill"]  # the latest fold is the scored model
    skills = [fold["test_skill"] for fold in folds]
    assert metrics["folds_skill_mean"] == pytest.approx(sum(skills) / 3)
    assert metrics["folds_positive"] == sum(skill > 0 for skill in skills) and metrics["folds_scored"] == 3
    row = summary_by_dataset(workdir)["A_1m"]
    assert float(row["folds_skill_mean"]) == pytest.approx(metrics["folds_skill_mean"])
    assert float(row["folds_skill_sd"]) == pytest.approx(metrics["folds_skill_sd"]) and row["folds_scored"] == "3"


def test_a_run_killed_between_folds_trains_only_the_unfinished_fold_again(killed_between_folds):
    workdir, saved_before_kill, killed_log = killed_between_folds
    assert list(saved_before_kill) == ["fold-1.json"], "the kill did not land after fold 1"
    assert "fold 1: test skill" in killed_log and "fold 2: training" not in killed_log
    after = fold_files(workdir)
    assert after["fold-1.json"] == saved_before_kill["fold-1.json"]  # not written again
    assert set(after) == {"fold-1.json", "fold-2.json"}  # fold 3 is the scored model
    log = (workdir / "logs" / "train" / "A_1m.log").read_text()
    assert "fold 1: scores read back from" in log and "fold 1: training" not in log
    assert "fold 2: training" in log and "fold 2: test skill" in log


def test_other_fold_settings_train_the_folds_again(killed_between_folds, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(killed_between_folds[0], workdir, symlinks=True)
    write_config(workdir, data_dir="data", evaluate={"folds": FOLDS, "window": "sliding"})
    snakemake(workdir)
    log = (workdir / "logs" / "train" / "A_1m.log").read_text()
    assert "read back" not in log and all(f"fold {number}: training" in log for number in (1, 2, 3))
    assert len(list((workdir / FOLDS_DIR / "A_1m").iterdir())) == 1  # the old settings' folds removed
    assert metrics_of(workdir)["folds"][0]["train_start_row"] == 0 < metrics_of(workdir)["folds"][1]["train_start_row"]


def test_more_folds_than_the_rows_hold_is_a_settings_error_not_a_data_error(tmp_path):
    """Every dataset fails alone with the line naming the settings, counted as a settings
    error in the table and the run's last lines, never as a file to fix."""
    add_datasets(tmp_path, ["A_1m", "B_1m"])
    write_config(tmp_path, data_dir="data", evaluate={"folds": 1000})
    result = snakemake(tmp_path, check=False)
    assert result.returncode != 0
    rows = summary_by_dataset(tmp_path)
    assert {row["status"] for row in rows.values()} == {"settings error"}
    assert rows["A_1m"]["error"].startswith("train: A_1m: evaluate.folds=1000 with a step of")
    assert "data error" not in result.stderr and "fix or remove the file" not in result.stderr
    assert "2 of them are settings errors: the settings each names need changing" in result.stderr
