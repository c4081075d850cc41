"""A re-train that fails or is killed keeps the model it was meant to replace (real runs)."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import copy_of_run, kill_hard, pending_jobs, snakemake, snakemake_command, trained_folder, write_config

from rnnfleet.faults import PAUSE_AT, PAUSE_FILE, TRAIN_CRASH
from rnnfleet.hooks.previous_models import BACKUP_DIR
from rnnfleet.model import load_model
from rnnfleet.predict import forecast_csv

RETRAIN = {"train": {"epochs": 3}}  # a hyper-parameter change: every model is trained again


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    return trained_folder(tmp_path_factory.mktemp("trained"), ["A_1m", "B_1m"])


@pytest.fixture
def workdir(trained, tmp_path) -> Path:
    copy = copy_of_run(trained, tmp_path)
    write_config(copy, data_dir="data", **RETRAIN)
    return copy


def statuses(workdir: Path) -> dict[str, dict]:
    with open(workdir / "results" / "metrics.csv") as table:
        return {row["dataset"]: row for row in csv.DictReader(table)}


def backups(workdir: Path) -> list[str]:
    folder = workdir / BACKUP_DIR
    return sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []


def test_a_failed_retrain_keeps_the_previous_model_byte_for_byte(workdir):
    model_a, model_b = workdir / "models/A_1m.pt", workdir / "models/B_1m.pt"
    old_a, old_b = model_a.read_bytes(), model_b.read_bytes()

    result = snakemake(workdir, check=False, env={TRAIN_CRASH: "A_1m"})

    assert result.returncode != 0
    assert "rule train" in result.stdout + result.stderr and "A_1m" in result.stderr
    assert model_a.read_bytes() == old_a  # the crash happened after Snakemake deleted it: put back
    assert model_b.read_bytes() != old_b  # B was re-trained with the new setting
    assert not (workdir / "metrics/A_1m.json").exists() and backups(workdir) == []
    row = statuses(workdir)["A_1m"]
    assert row["status"] == "previous model kept"
    assert row["error"].startswith("failed: train: A_1m: internal error RuntimeError: test fault")
    assert "A_1m: previous model kept: failed: train: A_1m: internal error" in result.stderr

    # The kept model still makes forecasts (what the predict rule runs; through Snakemake
    # the request would re-train it first, as its metrics are missing).
    forecast_csv(model_a, workdir / "data/A_1m.csv", workdir / "forecasts.csv", last=5)
    forecasts = pd.read_csv(workdir / "forecasts.csv")
    assert len(forecasts) == 5 and forecasts["forecast_close"].notna().all()

    # The next run trains it again, and nothing else.
    dry_run = snakemake(workdir, "-n").stdout
    assert set(pending_jobs(dry_run, "train")) == {"A_1m"}
    snakemake(workdir)
    assert model_a.read_bytes() != old_a and statuses(workdir)["A_1m"]["status"] == "ok"
    load_model(model_a)
    assert backups(workdir) == []


def test_a_killed_retrain_gets_its_previous_model_back_and_is_trained_again(workdir):
    model_a = workdir / "models/A_1m.pt"
    old_a = model_a.read_bytes()
    marker = workdir.parent / "paused"
    with open(workdir.parent / "output.txt", "w") as output:
        run = subprocess.Popen(
            snakemake_command(workdir, "models/A_1m.pt"),
            cwd=workdir,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, PAUSE_AT: "epoch", PAUSE_FILE: str(marker)},
        )
    deadline = time.monotonic() + 180
    while not (marker.exists() and marker.read_text().isdigit()):
        assert run.poll() is None and time.monotonic() < deadline, (workdir.parent / "output.txt").read_text()
        time.sleep(0.05)
    assert not model_a.exists(), "Snakemake had not deleted the model: nothing tested"
    kill_hard(run, int(marker.read_text()))
    assert backups(workdir) == ["A_1m.pt"]

    dry_run = snakemake(workdir, "-n")  # the next command, whatever it is, puts the model back

    assert model_a.read_bytes() == old_a and backups(workdir) == []
    assert set(pending_jobs(dry_run.stdout, "train")) == {"A_1m", "B_1m"}
    snakemake(workdir)
    assert model_a.read_bytes() != old_a and backups(workdir) == []
    assert {row["status"] for row in statuses(workdir).values()} == {"ok"}


def test_new_rows_with_a_data_error_keep_the_previous_model_and_say_which_file(trained, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(trained, workdir, symlinks=True)
    model_a = workdir / "models/A_1m.pt"
    old_a = model_a.read_bytes()
    csv_a = workdir / "data/A_1m.csv"
    last_row = csv_a.read_text().splitlines()[-1].split(",")
    new_row = [str(pd.Timestamp(last_row[0]) + pd.Timedelta(minutes=1)), "1.0", "1.0", "0", "1.0", "5"]
    with open(csv_a, "a") as bars:
        bars.write(",".join(new_row) + "\n")

    result = snakemake(workdir, check=False)

    assert result.returncode != 0
    assert model_a.read_bytes() == old_a
    row = statuses(workdir)["A_1m"]
    assert row["status"] == "previous model kept"
    assert row["error"].startswith("data error: preprocess: data/A_1m.csv: zero or negative price")
    assert "1 of them are data errors" in result.stderr
