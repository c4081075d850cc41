"""A run that re-trains models with settings other than those they were trained with names the
changed config keys, their values then and now, and the datasets, before anything is
overwritten: in the dry-run, and in a real run before its first job (the real snakemake on
models trained with train.epochs 2, tests/conftest.py's tiny config)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import add_datasets, copy_of_run, pending_jobs, snakemake, trained_folder

from rnnfleet.faults import TRAIN_CRASH

DATASETS = ["A_1m", "B_1m"]
REPORT = "model(s) will be re-trained because settings changed"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    return trained_folder(tmp_path_factory.mktemp("trained"), DATASETS)


@pytest.fixture
def trained_copy(trained, tmp_path) -> Path:
    copy = copy_of_run(trained, tmp_path)
    return copy


def report_line(result) -> str | None:
    """The first line of the warning block about changed settings (None: there is none)."""
    return next((line for line in (result.stdout + result.stderr).splitlines() if REPORT in line), None)


def test_a_forgotten_epochs_is_named_with_its_values_and_datasets(trained_copy):
    result = snakemake(trained_copy, "-n", "--config", 'train={"epochs": 3}')
    assert set(pending_jobs(result.stdout, "train")) == set(DATASETS)
    assert report_line(result) == f"rnnfleet: 2 {REPORT}: train.epochs 2 -> 3 (datasets: A_1m, B_1m)"


def test_unchanged_settings_say_nothing_also_when_models_are_trained_again(trained_copy):
    assert report_line(snakemake(trained_copy, "-n")) is None
    forced = snakemake(trained_copy, "-n", "--forcerun", "train")
    assert set(pending_jobs(forced.stdout, "train")) == set(DATASETS)
    assert report_line(forced) is None


def test_a_changed_model_key_is_named(trained_copy):
    result = snakemake(trained_copy, "-n", "--config", 'model={"hidden_size": 12}')
    assert report_line(result) == f"rnnfleet: 2 {REPORT}: model.hidden_size 8 -> 12 (datasets: A_1m, B_1m)"


def test_a_changed_preprocess_setting_is_named_though_the_train_jobs_rerun_for_new_input(trained_copy):
    result = snakemake(trained_copy, "-n", "--config", 'preprocess={"val_fraction": 0.3}')
    assert all("updated by another job" in reason for reason in pending_jobs(result.stdout, "train").values())
    assert report_line(result) == f"rnnfleet: 2 {REPORT}: preprocess.val_fraction 0.2 -> 0.3 (datasets: A_1m, B_1m)"


def test_a_new_dataset_is_not_a_settings_change(trained_copy):
    add_datasets(trained_copy, ["C_1m"], seed=40)
    unchanged = snakemake(trained_copy, "-n")
    assert set(pending_jobs(unchanged.stdout, "train")) == {"C_1m"}
    assert report_line(unchanged) is None
    changed = snakemake(trained_copy, "-n", "--config", 'train={"epochs": 3}')
    assert set(pending_jobs(changed.stdout, "train")) == {"A_1m", "B_1m", "C_1m"}
    assert report_line(changed) == f"rnnfleet: 2 {REPORT}: train.epochs 2 -> 3 (datasets: A_1m, B_1m)"


def test_a_real_run_names_the_change_before_its_first_job(trained_copy):
    result = snakemake(trained_copy, "--config", 'train={"epochs": 3}')
    # Snakemake's logger writes the warning and the job lines to one stream.
    lines = next(stream for stream in (result.stderr, result.stdout) if REPORT in stream).splitlines()
    reported = next(index for index, line in enumerate(lines) if REPORT in line)
    first_job = next(index for index, line in enumerate(lines) if line.strip().startswith(("rule ", "localrule ")))
    assert reported < first_job
    assert "train.epochs 2 -> 3" in lines[reported]
    # Trained with the new settings: the next run with them re-trains nothing and says nothing.
    again = snakemake(trained_copy, "-n", "--config", 'train={"epochs": 3}')
    assert pending_jobs(again.stdout, "train") == {} and report_line(again) is None


def test_after_a_failed_retrain_the_words_compare_with_the_settings_the_kept_model_was_trained_with(trained_copy):
    # A_1m's re-train with train.epochs 3 fails (its model from epochs 2 is kept); B_1m's succeeds.
    failed = snakemake(trained_copy, "--config", 'train={"epochs": 3}', check=False, env={TRAIN_CRASH: "A_1m"})
    assert failed.returncode != 0 and "A_1m: previous model kept" in failed.stderr

    back = snakemake(trained_copy, "-n")  # the config's epochs 2: A_1m's model was trained with them
    assert set(pending_jobs(back.stdout, "train")) == set(DATASETS)
    assert report_line(back) == f"rnnfleet: 1 {REPORT}: train.epochs 3 -> 2 (datasets: B_1m)"
    again = snakemake(trained_copy, "-n", "--config", 'train={"epochs": 3}')
    assert report_line(again) == f"rnnfleet: 1 {REPORT}: train.epochs 2 -> 3 (datasets: A_1m)"
