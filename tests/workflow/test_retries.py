"""Out-of-memory retries through Snakemake's `retries:`, proven on CPU with an injected
torch.OutOfMemoryError (the class CUDA raises when a job exceeds its memory cap)."""

from __future__ import annotations

import csv
import os
import signal

import pytest
from conftest import JOB_PATHS, add_datasets, job_path_of, snakemake, start_paused_run, write_config

from rnnfleet.faults import OOM_ATTEMPTS
from rnnfleet.hooks import PATCHES_OFF_VARIABLE
from rnnfleet.train.models import load_model


def train_log(workdir) -> str:
    return (workdir / "logs" / "train" / "A_1m.log").read_text()


def summary_row(workdir) -> dict:
    with open(workdir / "results" / "metrics.csv") as table:
        return next(csv.DictReader(table))


def test_out_of_memory_is_retried_with_more_gpu_mem_and_the_log_says_so(tmp_path):
    add_datasets(tmp_path, ["A_1m"])
    write_config(tmp_path, data_dir="data", train={"gpu_mem": 2})
    result = snakemake(tmp_path, "--resources", "gpu_mem=3", env={OOM_ATTEMPTS: "1"})

    log = train_log(tmp_path)
    first_error = (
        "ERROR: A_1m: ran out of GPU memory within its train.gpu_mem of 2 GB (attempt 1 of 3); retry 1 of 2 follows"
    )
    assert first_error in log and first_error in result.stderr
    # Twice the declaration, but never more than the whole budget (--resources gpu_mem=3).
    assert "ATTEMPT 2 of 3: retry 1 of 2 of this training, with gpu_mem 3 GB" in log
    assert "the previous attempt ran out of GPU memory" in log
    assert log.rstrip().splitlines()[-1].startswith("A_1m: best epoch")
    load_model(tmp_path / "models" / "A_1m.pt")
    assert summary_row(tmp_path)["status"] == "ok"
    # The attempt number reached the job as a resource, not a param: nothing to re-run.
    dry_run = snakemake(tmp_path, "-n", "--resources", "gpu_mem=3")
    assert "Nothing to be done" in dry_run.stdout + dry_run.stderr


def test_out_of_memory_on_every_attempt_fails_with_advice(tmp_path):
    add_datasets(tmp_path, ["A_1m"])
    write_config(tmp_path, data_dir="data", train={"gpu_mem": 1})
    result = snakemake(tmp_path, check=False, env={OOM_ATTEMPTS: "9"})

    assert result.returncode != 0
    errors = [line for line in train_log(tmp_path).splitlines() if line.startswith("ERROR")]
    assert [error.split("train.gpu_mem of ")[1].split(" (")[0] for error in errors] == ["1 GB", "2 GB", "4 GB"]
    # A retry is announced only where one follows.
    assert ["retry" in error.split("; ")[1] for error in errors] == [True, True, False]
    row = summary_row(tmp_path)
    assert row["status"] == "failed" and "(attempt 3 of 3, the last)" in row["error"]
    assert "raise train.gpu_mem" in row["error"]
    assert not (tmp_path / "models" / "A_1m.pt").exists()


def test_an_error_more_memory_cannot_fix_is_not_retried(tmp_path):
    add_datasets(tmp_path, ["A_1m"])
    write_config(tmp_path, data_dir="data")
    snakemake(tmp_path, "--until", "preprocess")
    (tmp_path / "prep" / "A_1m.npz").write_bytes(b"not an array file")  # newer, so trusted by Snakemake

    result = snakemake(tmp_path, check=False)

    log = train_log(tmp_path)
    assert result.returncode != 0
    # Launched once: Snakemake was told not to launch it again (rnnfleet.hooks.retry_policy).
    assert result.stderr.count("Trying to restart job") == 0, result.stderr[-3000:]
    assert "ATTEMPT" not in log and log.count(": training on ") == 1, log
    assert "not a valid rnnfleet array file" in log and "(not retried: more memory would not help)" in log
    assert "not retried" in summary_row(tmp_path)["error"]


def test_without_the_retry_hook_a_relaunch_stops_at_once_and_says_why(tmp_path):
    add_datasets(tmp_path, ["A_1m"])
    write_config(tmp_path, data_dir="data")
    snakemake(tmp_path, "--until", "preprocess")
    (tmp_path / "prep" / "A_1m.npz").write_bytes(b"not an array file")

    result = snakemake(tmp_path, check=False, env={PATCHES_OFF_VARIABLE: "retry_policy"})

    log = train_log(tmp_path)
    assert result.returncode != 0 and "Trying to restart job" in result.stderr  # stock Snakemake relaunched it
    assert log.count(": training on ") == 1, log  # the later attempts stopped before training
    assert "ATTEMPT 3 of 3: Snakemake launched this training again after an error more memory would not help" in log
    assert "retry" not in log.replace("not retried", "")


@pytest.mark.parametrize("job_path", list(JOB_PATHS))
def test_a_training_killed_by_the_kernel_says_so_and_is_not_retried_with_more_gpu_mem(tmp_path, job_path):
    warm, env, _ = JOB_PATHS[job_path]
    workdir = tmp_path / "run"
    add_datasets(workdir, ["A_1m"])
    write_config(workdir, data_dir="data", train={"warm_workers": warm})
    run, job_pid = start_paused_run(workdir, "epoch", env=env)
    assert job_path_of(job_pid) == job_path  # which path ran

    os.kill(job_pid, signal.SIGKILL)  # what the kernel's OOM killer sends the process using the most memory

    assert run.wait(timeout=300) != 0
    output = (tmp_path / "snakemake-output.txt").read_text()
    log = train_log(workdir)
    assert "Trying to restart job" not in output and "ATTEMPT" not in log, log  # no retry with twice the gpu_mem
    if not warm:
        return  # the killed process was the job's own: nothing of it is left to write a line
    # The job's own process outlives the warm worker it handed the training to: it says what happened.
    line = (
        "ERROR: A_1m: its training process was killed by SIGKILL (exit status 137), probably by the kernel "
        "for lack of host memory (the OOM killer: `dmesg` says); not retried"
    )
    assert line in log and line in output and "Traceback" not in log
    row = summary_row(workdir)
    assert row["status"] == "failed"
    assert row["error"].startswith("train: A_1m: its training process was killed by SIGKILL")
