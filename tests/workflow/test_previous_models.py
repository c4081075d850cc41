"""A re-train that fails or is killed keeps the model it was meant to replace (real runs)."""

from __future__ import annotations

import csv
import os
import shutil
import signal
from pathlib import Path

import pandas as pd
import pytest
from conftest import (
    copy_of_run,
    kill_hard,
    pending_jobs,
    process_alive,
    resume,
    snakemake,
    start_paused_run,
    trained_folder,
    wait_until_gone,
    write_config,
)

from rnnfleet.faults import TRAIN_CRASH
from rnnfleet.forecast.predict import forecast_csv
from rnnfleet.train.models import load_model
from rnnfleet.workflow.previous_models import BACKUP_DIR

pytestmark = pytest.mark.long  # minutes: started first (tests/conftest.py)

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
    assert model_a.read_bytes() == old_a  # never replaced: the job crashed before writing it
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


def forecasts_from(model: Path, workdir: Path) -> pd.DataFrame:
    """The forecasts a scheduled job would make with the model at its path right now."""
    out = workdir.parent / "forecasts-now.csv"
    forecast_csv(model, workdir / "data/A_1m.csv", out, last=3)
    return pd.read_csv(out)


@pytest.mark.parametrize("point", ["epoch", "model-write"])
def test_a_model_stays_readable_at_its_path_while_it_is_retrained(workdir, point):
    """Paused in training and while the new model file is being written: the path holds the
    previous model, whole, and forecasts read it; the new one replaces it in one rename."""
    model_a = workdir / "models/A_1m.pt"
    old_a = model_a.read_bytes()
    expected = forecasts_from(model_a, workdir)
    run, job_pid = start_paused_run(workdir, point, "models/A_1m.pt")
    assert "A_1m" in (workdir / "logs/train/A_1m.log").read_text(), "the paused job is not A's re-train"
    assert model_a.read_bytes() == old_a
    pd.testing.assert_frame_equal(forecasts_from(model_a, workdir), expected)
    resume(workdir, point)
    assert run.wait(timeout=300) == 0
    assert model_a.read_bytes() != old_a
    load_model(model_a)


@pytest.mark.parametrize(
    "signal_number", [signal.SIGKILL, signal.SIGHUP, signal.SIGQUIT, signal.SIGTERM, signal.SIGINT]
)
def test_a_killed_retrain_leaves_the_previous_model_in_place_and_is_trained_again(workdir, signal_number):
    """Whatever ends the run (kill -9, an ssh drop, Ctrl-\\, a stop, Ctrl-C), the previous
    model is at its path at once, with no Snakemake command needed to bring it back."""
    model_a = workdir / "models/A_1m.pt"
    old_a = model_a.read_bytes()
    run, job_pid = start_paused_run(workdir, "epoch", "models/A_1m.pt")
    if signal_number == signal.SIGKILL:
        kill_hard(run, job_pid)
    else:
        os.killpg(run.pid, signal_number)
        run.wait(timeout=120)
        if process_alive(job_pid):  # a warm worker outside the group: the run told it to stop
            wait_until_gone(job_pid)

    assert model_a.read_bytes() == old_a
    load_model(model_a)
    dry_run = snakemake(workdir, "-n")
    assert set(pending_jobs(dry_run.stdout, "train")) == {"A_1m", "B_1m"}
    if signal_number == signal.SIGKILL:  # the hardest stop: the next run finishes the job
        snakemake(workdir)
        assert model_a.read_bytes() != old_a
        assert {row["status"] for row in statuses(workdir).values()} == {"ok"}


def test_a_model_kept_aside_by_an_earlier_version_is_put_back(workdir):
    """A folder where an earlier rnnfleet was killed mid re-train: its model waits in
    BACKUP_DIR with the path empty; the next command puts it back."""
    model_a = workdir / "models/A_1m.pt"
    old_a = model_a.read_bytes()
    (workdir / BACKUP_DIR).mkdir(parents=True)
    os.replace(model_a, workdir / BACKUP_DIR / model_a.name)
    snakemake(workdir, "-n")
    assert model_a.read_bytes() == old_a and backups(workdir) == []


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

    before = statuses(workdir)["A_1m"]
    curve = workdir / "results" / "loss_curves" / "A_1m.svg"
    assert curve.stat().st_size > 0

    result = snakemake(workdir, check=False)

    assert result.returncode != 0
    assert model_a.read_bytes() == old_a
    row = statuses(workdir)["A_1m"]
    assert row["status"] == "previous model kept"
    assert row["error"].startswith("data error: preprocess: data/A_1m.csv: zero or negative price")
    assert "1 of them are data errors" in result.stderr
    # The kept model keeps its row's scores and its loss curve, and the report links to it.
    for column in ("val_loss", "test_skill", "test_verdict", "made", "rows"):
        assert row[column] == before[column] != "", column
    assert curve.stat().st_size > 0
    report = snakemake(workdir, "--report", "report.html")
    assert "ERROR/" not in report.stderr and "Unknown target name" not in report.stderr, report.stderr[-2000:]
    forecasts = {line.split(",")[0]: line for line in (workdir / "results" / "forecasts.csv").read_text().splitlines()}
    assert "models/A_1m.pt" in forecasts["A_1m"]  # the kept model is still the one to use
