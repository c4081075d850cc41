"""Kills, stop signals and a second run in the same folder, done for real to real snakemake runs.

A run is paused at a named point by a test hook (rnnfleet.faults), so each signal lands
exactly where it should, then the normal command is run again.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import (
    JOB_PATHS,
    REPO,
    add_datasets,
    job_path_of,
    kill_hard,
    process_alive,
    resume,
    snakemake,
    snakemake_command,
    start_paused_run,
    trained_folder,
    wait_until_gone,
    write_config,
)

from rnnfleet.atomic_files import write_json
from rnnfleet.faults import TRAIN_CRASH
from rnnfleet.runner.orphans import RunGone, run_job_guard
from rnnfleet.train.modelfile import load_checkpoint
from rnnfleet.train.models import load_model
from rnnfleet.workflow.recovery import RUN_VARIABLE, RUNS_DIR

pytestmark = pytest.mark.long  # minutes: started first (tests/conftest.py)

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
    [(signal.SIGINT, True), (signal.SIGTERM, False), (signal.SIGHUP, True), (signal.SIGQUIT, False)],
    ids=["ctrl-c", "sigterm-to-snakemake", "sighup-ssh-drop", "sigquit-to-snakemake"],
)
def test_stop_signal_stops_trainings_releases_the_lock_and_the_rerun_continues(
    with_new_dataset, signal_number, whole_group
):
    stop_a_run_writing_a_model(with_new_dataset, signal_number, whole_group)


def test_on_the_spawn_path_ctrl_c_stops_the_training_in_its_worker_and_the_rerun_continues(with_new_dataset):
    stop_a_run_writing_a_model(with_new_dataset, signal.SIGINT, True, path="spawn")


def stop_a_run_writing_a_model(workdir: Path, signal_number: int, whole_group: bool, path: str = "fork") -> None:
    """Stop a run while B_1m's model is written: the training stops and removes its half-written
    model, the lock goes, the table says stopped, and the plain command then finishes."""
    env = JOB_PATHS[path][1]
    run, job_pid = start_paused_run(workdir, "model-write", env=env)
    assert job_path_of(job_pid) == path
    assert hidden_files(workdir), "the model was not being written"
    if whole_group:  # what a terminal does on Ctrl+C, and on a hang-up (an ssh connection dropped)
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

    snakemake(workdir, env=env)
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


def test_after_an_unlock_a_second_run_is_refused_while_the_first_works_and_the_first_finishes(with_new_dataset):
    workdir = with_new_dataset
    run, _ = start_paused_run(workdir, "epoch")
    snakemake(workdir, "--unlock")  # Snakemake's lock gone while the run works
    assert snakemake_lock_files(workdir) == []

    second = snakemake(workdir, check=False)

    assert second.returncode != 0 and "Traceback" not in second.stderr
    line = (
        f"another run (pid {run.pid}) is working in this folder and Snakemake's lock (.snakemake/locks) was "
        "removed meanwhile (snakemake --unlock?): nothing was run; wait for that run to end, then run again"
    )
    assert line in second.stderr, second.stderr[-3000:]
    resume(workdir, "epoch")
    assert run.wait(timeout=300) == 0, (workdir.parent / "snakemake-output.txt").read_text()[-3000:]
    assert_everything_trained_and_loads(workdir)
    for figure in ("results/metrics.html", "results/skill.png", "results/loss_curves/A_1m.svg"):
        assert (workdir / figure).exists(), figure
    assert (workdir / "results/loss_curves/B_1m.svg").exists()


def test_ctrl_c_while_the_results_after_failures_are_written_does_not_cut_them_short(with_new_dataset, monkeypatch):
    workdir = with_new_dataset
    monkeypatch.setenv(TRAIN_CRASH, "B_1m")  # the run fails, and its error handler writes the table
    run, snakemake_pid = start_paused_run(workdir, "after-failures")
    assert snakemake_pid == run.pid  # paused in Snakemake's own process, the table in place

    for _ in range(2):  # impatient hands
        os.kill(run.pid, signal.SIGINT)
        time.sleep(0.3)
    resume(workdir, "after-failures")

    assert run.wait(timeout=120) != 0
    output = (workdir.parent / "snakemake-output.txt").read_text()
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output[-3000:]
    assert "rnnfleet: still writing the results of the datasets that are done; the run ends right after" in output
    assert "rnnfleet: 1 of 2 datasets are not done" in output
    assert "Run the same command again to retry what is not done" in output  # the last lines are there
    with open(workdir / "results" / "metrics.csv") as table:
        assert {row["dataset"]: row["status"] for row in csv.DictReader(table)} == {"A_1m": "ok", "B_1m": "failed"}


# --- a run killed alone: its jobs (rnnfleet.runner.orphans) ------------------------------------

SCRIPTS = str(REPO / "scripts")


def start_python(code: str, cwd: Path, **popen) -> subprocess.Popen:
    """A Python process with rnnfleet importable, running `code` in cwd."""
    return subprocess.Popen(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {SCRIPTS!r})\n{code}"], cwd=cwd, text=True, **popen
    )


def serves_every_run(process: psutil.Process) -> bool:
    """A warm server of either path, or a worker of one (a forked child has its server's command
    line; a spawned worker, multiprocessing's)."""
    command = " ".join(process.cmdline())
    return any(word in command for word in ("rnnfleet.runner.warm", "rnnfleet.runner.spawned", "multiprocessing"))


def processes_of_run(run: subprocess.Popen, job: psutil.Process) -> list[psutil.Process]:
    """The run's processes (its shells, job clients, cold jobs) and the paused job's. Not the
    folder's warm server and its idle children: they serve whichever run comes, and idle
    ones hold no job. As psutil.Process objects: a later process that takes one's number is
    neither waited for nor killed."""
    processes = psutil.Process(run.pid).children(recursive=True)
    own = [p for p in processes if not serves_every_run(p) and p.pid != job.pid]
    return [*own, job]


@pytest.mark.parametrize("job_path", list(JOB_PATHS))
def test_killing_snakemake_alone_stops_its_jobs_and_the_rerun_keeps_only_its_own_settings(tmp_path, job_path):
    warm, env, worker = JOB_PATHS[job_path]
    workdir = tmp_path / "run"
    add_datasets(workdir, ["A_1m", "B_1m"])
    write_config(workdir, data_dir="data", train={"epochs": 8, "patience": 8, "warm_workers": warm})
    run, job_pid = start_paused_run(workdir, "epoch", "--cores", "1", env=env)  # one training at a time: the paused one
    job = psutil.Process(job_pid)
    assert job_path_of(job_pid) == job_path  # which path ran: a warm worker of either path, or the job's own process
    first_run = processes_of_run(run, job)
    # Warm: the job's client (Snakemake's shell may exec it) and the worker; cold: the job's process.
    assert len(first_run) >= 2 if warm else job.ppid() == run.pid or job.parent().ppid() == run.pid

    os.kill(run.pid, signal.SIGKILL)  # Snakemake's process alone: its jobs are told nothing
    run.wait(timeout=30)
    write_config(workdir, data_dir="data", train={"epochs": 1, "patience": 1, "warm_workers": warm})
    try:
        snakemake(workdir, env=env)  # the plain command, at once
        alive_after_rerun = sorted(process.pid for process in first_run if process_alive(process))
    finally:
        resume(workdir, "epoch")  # a job of the first run still alive would go on and write now
        for process in first_run:
            try:
                wait_until_gone(process, seconds=60)
            finally:
                if process_alive(process):
                    process.kill()  # psutil: not if another process has taken its number

    assert alive_after_rerun == [], "processes of the killed run outlived the re-run"
    for dataset in ("A_1m", "B_1m"):
        checkpoint = load_checkpoint(workdir / "models" / f"{dataset}.pt")
        metrics = json.loads((workdir / "metrics" / f"{dataset}.json").read_text())
        assert checkpoint["train_config"]["epochs"] == 1 and checkpoint["metrics"]["epochs_run"] == 1
        assert metrics["epochs_run"] == 1 and metrics["pid"] not in {process.pid for process in first_run}
        assert metrics["worker"] == worker
    with open(workdir / "results" / "metrics.csv") as table:
        assert {row["dataset"]: row["epochs_run"] for row in csv.DictReader(table)} == {"A_1m": "1", "B_1m": "1"}
    assert_everything_trained_and_loads(workdir)


def hold_job_file(workdir: Path, partial: Path) -> subprocess.Popen:
    """A job of a run that was killed, slow to stop: it holds its job file (as every working
    job does) and a half-written file until a line reaches its stdin, then says whether the
    file was still there and removes it, as a job on its way out does."""
    partial.write_bytes(b"half a model")
    holder = start_python(
        "import os, sys\n"
        "from rnnfleet.runner.orphans import job_lock_held\n"
        "with job_lock_held():\n"
        "    print('holding', flush=True)\n"
        "    sys.stdin.readline()\n"
        f"    print('kept' if os.path.exists({str(partial)!r}) else 'removed', flush=True)\n"
        f"    os.unlink({str(partial)!r})\n",
        workdir,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert holder.stdout.readline() == "holding\n"
    return holder


def test_a_new_run_waits_for_a_job_of_a_killed_run_and_leaves_its_files_alone_meanwhile(one_model, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(one_model, workdir, symlinks=True)
    holder = hold_job_file(workdir, workdir / "models" / ".A_1m.pt.x1.partial")
    output_path = tmp_path / "snakemake-output.txt"
    with open(output_path, "w") as output:
        run = subprocess.Popen(snakemake_command(workdir), cwd=workdir, stdout=output, stderr=subprocess.STDOUT)
    try:
        waiting = f"rnnfleet: waiting for 1 job(s) of a run that was killed to stop (pid {holder.pid})"
        deadline = time.monotonic() + 120
        while waiting not in output_path.read_text():
            assert run.poll() is None, output_path.read_text()
            assert time.monotonic() < deadline, "the run never waited"
            time.sleep(0.05)
        time.sleep(1)  # the run keeps waiting while the job lives
        assert run.poll() is None
        holder.stdin.write("stop\n")
        holder.stdin.flush()
        assert holder.wait(timeout=30) == 0
        assert holder.stdout.read() == "kept\n"
        assert run.wait(timeout=300) == 0, output_path.read_text()
    finally:
        holder.kill()
        run.kill()
    assert "Nothing to be done" in output_path.read_text()


def test_a_job_of_a_killed_run_that_does_not_stop_makes_the_new_run_refuse(one_model, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(one_model, workdir, symlinks=True)
    partial = workdir / "models" / ".A_1m.pt.x1.partial"
    holder = hold_job_file(workdir, partial)
    try:
        new_run = start_python(
            "from rnnfleet.workflow import recovery\n"
            "recovery.ORPHAN_WAIT_SECONDS = 0.5\n"
            "recovery.claim_run_folder(['models'])\n",
            workdir,
            stderr=subprocess.PIPE,
        )
        stderr = new_run.communicate(timeout=60)[1]
        assert new_run.returncode != 0
        assert (
            f"JobsOfKilledRunAlive: 1 job(s) of an earlier run in this folder that was killed still run "
            f"(pid {holder.pid}) and did not stop within 0.5 s; nothing was run: stop them (kill {holder.pid}) "
            "and run again"
        ) in stderr
        assert partial.exists()
    finally:
        holder.kill()
        holder.wait()


def test_a_job_of_a_run_that_died_publishes_nothing_and_does_not_start(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run = start_python(
        "import os, time\n"
        "from rnnfleet.workflow.recovery import RUN_VARIABLE, claim_run_folder\n"
        "claim_run_folder([])\n"
        "print(os.environ[RUN_VARIABLE], flush=True)\n"
        "time.sleep(600)\n",
        tmp_path,
        stdout=subprocess.PIPE,
    )
    monkeypatch.setenv(RUN_VARIABLE, run.stdout.readline().strip())  # this process: a job of that run
    metrics = tmp_path / "metrics" / "A_1m.json"
    write_json({"epochs_run": 8}, metrics)  # published while the run lives
    run.kill()
    run.wait()

    with pytest.raises(RunGone, match="A_1m.json: not written: the Snakemake run that started this job is gone"):
        write_json({"epochs_run": 1}, metrics)
    assert json.loads(metrics.read_text()) == {"epochs_run": 8}
    assert [path.name for path in metrics.parent.iterdir()] == ["A_1m.json"]  # no half-written file
    started = tmp_path / "started"
    with pytest.raises(SystemExit):
        with run_job_guard("A_1m"):
            started.touch()
    assert not started.exists()
    assert "ERROR: A_1m: not started: the Snakemake run that started this job is gone" in capsys.readouterr().err
    assert not [path for path in RUNS_DIR.iterdir() if path.name.startswith("job-")]  # the job files went with them
