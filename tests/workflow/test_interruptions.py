"""Kills, stop signals and a second run in the same folder, done for real to real snakemake runs.

A run is paused at a named point by a test hook (rnnfleet.faults), so each signal lands
exactly where it should, then the normal command is run again.
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import add_datasets, kill_hard, snakemake, snakemake_command, trained_folder, wait_until_gone

from rnnfleet.faults import PAUSE_AT, PAUSE_FILE, RESUME
from rnnfleet.model import load_model

OUTPUT_FOLDERS = ("prep", "models", "metrics", "results", "predictions")


@pytest.fixture(scope="module")
def one_model(tmp_path_factory) -> Path:
    """A folder where A_1m has been trained; each test copies it and adds B_1m."""
    return trained_folder(tmp_path_factory.mktemp("one_model"), ["A_1m"])


@pytest.fixture
def with_new_dataset(one_model, tmp_path) -> Path:
    workdir = tmp_path / "run"
    shutil.copytree(one_model, workdir, symlinks=True)
    add_datasets(workdir, ["B_1m"], seed=7)
    return workdir


def start_paused_run(workdir: Path, point: str) -> tuple[subprocess.Popen, int]:
    """Start snakemake in its own session (like a shell job) with the first job that reaches
    `point` paused there; return the run and the paused job's pid."""
    marker = workdir.parent / f"paused-at-{point}"
    output = open(workdir.parent / "snakemake-output.txt", "w")
    run = subprocess.Popen(
        snakemake_command(workdir),
        cwd=workdir,
        stdout=output,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, PAUSE_AT: point, PAUSE_FILE: str(marker)},
    )
    deadline = time.monotonic() + 180
    while not (marker.exists() and marker.read_text().isdigit()):
        assert run.poll() is None, (workdir.parent / "snakemake-output.txt").read_text()
        assert time.monotonic() < deadline, f"no job reached {point}"
        time.sleep(0.05)
    return run, int(marker.read_text())


def resume(workdir: Path, point: str) -> None:
    (workdir.parent / f"paused-at-{point}").write_text(RESUME)


def hidden_files(workdir: Path) -> list[Path]:
    return [path for folder in OUTPUT_FOLDERS if (workdir / folder).is_dir() for path in (workdir / folder).glob(".*")]


def snakemake_lock_files(workdir: Path) -> list[Path]:
    locks = workdir / ".snakemake" / "locks"
    return list(locks.iterdir()) if locks.is_dir() else []


def assert_everything_trained_and_loads(workdir: Path) -> None:
    for dataset in ("A_1m", "B_1m"):
        load_model(workdir / "models" / f"{dataset}.pt")
    for model_path in (workdir / "models").iterdir():
        load_model(model_path)
    assert hidden_files(workdir) == []
    dry_run = snakemake(workdir, "-n")
    assert "Nothing to be done" in dry_run.stdout + dry_run.stderr


@pytest.mark.parametrize("point", ["preprocess", "epoch", "model-write"])
def test_hard_kill_then_the_normal_command_finishes_without_losing_a_model(with_new_dataset, point):
    workdir = with_new_dataset
    model_a = workdir / "models" / "A_1m.pt"
    finished_before = model_a.stat().st_mtime_ns
    run, job_pid = start_paused_run(workdir, point)
    if point == "model-write":
        assert list((workdir / "models").glob(".B_1m.pt.*.partial")), "the model was not being written"
    kill_hard(run, job_pid)
    assert snakemake_lock_files(workdir), "the kill left no lock: nothing tested"

    result = snakemake(workdir)  # the README's command, nothing to remember after a kill

    assert model_a.stat().st_mtime_ns == finished_before, "a finished model was trained again"
    assert_everything_trained_and_loads(workdir)
    assert "removed the lock left by a run that was killed" in result.stderr


@pytest.mark.parametrize(
    "signal_number, whole_group",
    [(signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c", "sigterm-to-snakemake"],
)
def test_stop_signal_stops_trainings_releases_the_lock_and_the_rerun_continues(
    with_new_dataset, signal_number, whole_group
):
    workdir = with_new_dataset
    run, job_pid = start_paused_run(workdir, "model-write")
    assert hidden_files(workdir), "the model was not being written"
    if whole_group:  # what a terminal does on Ctrl+C
        os.killpg(run.pid, signal_number)
    else:  # `kill <pid>`, a batch system, a service manager
        os.kill(run.pid, signal_number)
    assert run.wait(timeout=120) != 0
    wait_until_gone(job_pid)  # the training stopped; it did not run on to its end

    assert hidden_files(workdir) == []  # the job removed its half-written model itself
    assert snakemake_lock_files(workdir) == []
    assert "STOPPED: B_1m: stopped by SIG" in (workdir / "logs" / "train" / "B_1m.log").read_text()
    assert not (workdir / "models" / "B_1m.pt").exists()
    with open(workdir / "results" / "metrics.csv") as table:
        statuses = {row["dataset"]: row["status"] for row in csv.DictReader(table)}
    assert statuses == {"A_1m": "ok", "B_1m": "stopped"}

    snakemake(workdir)
    assert_everything_trained_and_loads(workdir)


def test_second_run_in_the_same_folder_is_refused_and_the_first_finishes(with_new_dataset):
    workdir = with_new_dataset
    run, _ = start_paused_run(workdir, "epoch")

    second = snakemake(workdir, check=False)

    assert second.returncode != 0
    assert "Directory cannot be locked" in second.stderr
    resume(workdir, "epoch")
    assert run.wait(timeout=300) == 0, (workdir.parent / "snakemake-output.txt").read_text()
    assert_everything_trained_and_loads(workdir)
