"""The demo workflow through a real one-node SLURM cluster with profiles/slurm.

The session fixture runs tests/slurm/start_cluster.sh, which installs Debian's slurm-wlm and
munge where they are missing (as root, with apt-get) and starts munged, slurmctld and
slurmd. Where that is impossible the test is skipped with the script's reason, except under
CI (CI set), where it fails: CI must really run it.

The packed profile (profiles/slurm-packed) too: K datasets per SLURM job holding one GPU, the
trainings at once inside it within the job's gpu_mem budget, and a failed or killed job that
keeps the datasets it finished.
"""

from __future__ import annotations

import base64
import csv
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import (
    PAUSE_AT,
    PAUSE_FILE,
    REPO,
    add_datasets,
    most_at_once,
    pending_jobs,
    snakemake,
    snakemake_command,
    summary_by_dataset,
    write_config,
)

from rnnfleet.faults import PACKED_JOB_EXIT, PRETRAIN_CRASH

pytestmark = pytest.mark.long  # minutes: started first (tests/conftest.py)

START_CLUSTER = REPO / "tests" / "slurm" / "start_cluster.sh"
# The real profile, then the test cluster's own settings (status via squeue, fast polling).
PROFILES = ("--profile", str(REPO / "profiles" / "slurm"), "--profile", str(REPO / "tests" / "slurm" / "profile"))
# Forecasts too: each dataset's SLURM job then holds preprocess, train and predict.
WITH_PREDICTIONS = ("--config", 'predict={"datasets": "all"}')
# `make test` installs the SLURM executor here, apart from the venv (requirements-slurm.txt).
SLURM_PLUGIN_FOLDER = Path(sys.prefix) / "slurm-plugin"
FAST_STATUS_CHECKS = REPO / "tests" / "slurm" / "fast_status"
CANNOT_INSTALL, FOREIGN_CONFIG = 3, 4
DATASETS = {"BTCUSDT_1m", "EURUSD_1m"}  # one SLURM job each


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    started = subprocess.run(["bash", str(START_CLUSTER)], capture_output=True, text=True, timeout=900)
    if started.returncode == 0:
        return
    reason = f"cannot start a SLURM test cluster: {started.stderr.strip()} (exit {started.returncode})"
    if os.environ.get("CI") or started.returncode not in (CANNOT_INSTALL, FOREIGN_CONFIG):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm_executor_env() -> dict[str, str]:
    """Environment for snakemake commands that need the SLURM executor plugin, which checks
    the test cluster's short jobs every few seconds (tests/slurm/fast_status)."""
    folders = [str(FAST_STATUS_CHECKS)]
    if not importlib.util.find_spec("snakemake_executor_plugin_slurm"):  # else in the venv (`make slurm`)
        if not (SLURM_PLUGIN_FOLDER / "snakemake_executor_plugin_slurm").is_dir():
            reason = f"the SLURM executor plugin is not installed (make test puts it in {SLURM_PLUGIN_FOLDER})"
            if os.environ.get("CI"):
                pytest.fail(reason)
            pytest.skip(reason)
        folders.append(str(SLURM_PLUGIN_FOLDER))
    return {"PYTHONPATH": os.pathsep.join(filter(None, [*folders, os.environ.get("PYTHONPATH")]))}


def submitted_jobs(snakemake_output: str) -> dict[str, str]:
    """{SLURM job id: its SLURM log file} as the executor plugin reports its sbatch calls."""
    return dict(re.findall(r"submitted with SLURM jobid (\d+) \(log: (.+?)\)\.", snakemake_output))


def slurm_job(job_id: str) -> dict[str, str]:
    """The controller's record of a job (finished jobs stay for MinJobAge)."""
    line = subprocess.run(["scontrol", "show", "job", "--oneliner", job_id], capture_output=True, text=True).stdout
    return dict(field.split("=", 1) for field in line.split() if "=" in field)


def newest_slurm_job_id() -> int:
    ids = subprocess.run(["squeue", "--states=all", "--noheader", "--format=%i"], capture_output=True, text=True)
    return max((int(job_id) for job_id in ids.stdout.split()), default=0)


def test_trainings_go_through_sbatch_and_a_rerun_submits_nothing(slurm_cluster, slurm_executor_env, tmp_path):
    workdir = tmp_path
    add_datasets(workdir, sorted(DATASETS))
    write_config(workdir, data_dir="data")
    first = snakemake(workdir, *PROFILES, *WITH_PREDICTIONS, env=slurm_executor_env)

    for dataset in DATASETS:
        assert (workdir / "models" / f"{dataset}.pt").stat().st_size > 0
        assert (workdir / "predictions" / f"{dataset}.csv").stat().st_size > 0
    with open(workdir / "results" / "metrics.csv") as table:
        assert {row["dataset"] for row in csv.DictReader(table)} == DATASETS

    # One SLURM job per dataset (its preprocess, train and predict grouped), each really run
    # by SLURM with the profile's GPU request; summarize and plots ran locally.
    jobs = submitted_jobs(first.stderr)
    assert len(jobs) == len(DATASETS), first.stderr[-3000:]
    for job_id, slurm_log in jobs.items():
        record = slurm_job(job_id)
        assert record["JobState"] == "COMPLETED", record
        assert re.fullmatch(r"gres[:/]gpu:1", record.get("TresPerJob", "")), record  # 22.05: gres:gpu:1
        assert "rule train" in Path(slurm_log).read_text()
    assert "localrule summarize:" in first.stderr and "localrule plots:" in first.stderr
    # Each training ran inside the job that trained it, on a GPU SLURM assigned to it.
    logged = {}
    for dataset in DATASETS:
        first_line = (workdir / "logs" / "train" / f"{dataset}.log").read_text().splitlines()[0]
        logged[dataset] = re.search(r"SLURM job (\d+)", first_line).group(1)
        assert "CUDA_VISIBLE_DEVICES=" in first_line, first_line
    assert sorted(logged.values()) == sorted(jobs)

    newest_before = newest_slurm_job_id()
    rerun = snakemake(workdir, *PROFILES, *WITH_PREDICTIONS, env=slurm_executor_env)
    assert "Nothing to be done" in rerun.stderr + rerun.stdout
    assert submitted_jobs(rerun.stderr) == {}
    assert newest_slurm_job_id() == newest_before


PACKED_PROFILES = (
    "--profile",
    str(REPO / "profiles" / "slurm-packed"),
    "--profile",
    str(REPO / "tests" / "slurm" / "profile"),
)


def trainings_by_slurm_job(workdir: Path, datasets: list[str]) -> dict[str, list[tuple[float, float]]]:
    """{SLURM job id: (start, end) of each training it ran}, from the trainings' own logs and metrics."""
    by_job: dict[str, list[tuple[float, float]]] = {}
    for dataset in datasets:
        # Each attempt's first line names the SLURM job it ran in; the last attempt wrote the model.
        job_id = re.findall(r"SLURM job (\d+)", (workdir / "logs" / "train" / f"{dataset}.log").read_text())[-1]
        metrics = json.loads((workdir / "metrics" / f"{dataset}.json").read_text())
        by_job.setdefault(job_id, []).append((metrics["process_started_at"], metrics["finished_at"]))
    return by_job


def test_packed_profile_trains_several_datasets_per_slurm_job_on_one_gpu_within_its_budget(
    slurm_cluster, slurm_executor_env, tmp_path
):
    workdir = tmp_path  # only this test's datasets: four, within one job of the profile's K = 10
    datasets = [f"P{i}_1m" for i in range(4)]
    add_datasets(workdir, datasets)
    write_config(workdir, data_dir="data", train={"gpu_mem": 1})
    # Each job's GPU budget: 2 GB, 2 trainings of 1 GB at once.
    run = snakemake(workdir, *PACKED_PROFILES, "--resources", "gpu_mem=2", env=slurm_executor_env, timeout=1500)

    for dataset in datasets:
        assert (workdir / "models" / f"{dataset}.pt").stat().st_size > 0
    jobs = submitted_jobs(run.stderr)
    assert len(jobs) == 1, run.stderr[-3000:]  # all four in one SLURM job
    for job_id in jobs:
        record = slurm_job(job_id)
        assert record["JobState"] == "COMPLETED", record
        # ONE GPU for the job (sbatch --gres=gpu:1, on its one node), not one per training
        assert re.fullmatch(r"gres[:/]gpu:1", record.get("TresPerNode", "")), record
        assert "TresPerJob" not in record, record
    by_job = trainings_by_slurm_job(workdir, datasets)
    assert sorted(by_job) == sorted(jobs)
    assert sorted(len(trainings) for trainings in by_job.values()) == [4]
    peaks = [most_at_once(trainings) for trainings in by_job.values()]
    assert max(peaks) == 2, peaks  # two of the four at once on the job's GPU, never over its budget


def test_packed_job_keeps_the_datasets_that_finished_when_one_fails(slurm_cluster, slurm_executor_env, tmp_path):
    workdir = tmp_path  # only this test's datasets, so that they fill whole jobs
    datasets = [f"Q{i}_1m" for i in range(3)]
    add_datasets(workdir, datasets)
    write_config(workdir, data_dir="data", train={"gpu_mem": 1})
    # All three in one job whose budget (1 GB) allows one training at once, though it has 2 CPUs.
    packing = ("--group-components", "dataset=3", "--resources", "gpu_mem=1")
    failing = {**slurm_executor_env, "RNNFLEET_FAULT_TRAIN_CRASH": "Q1_1m"}
    first = snakemake(workdir, *PACKED_PROFILES, *packing, env=failing, check=False, timeout=900)

    assert first.returncode != 0
    assert len(submitted_jobs(first.stderr)) == 1, first.stderr[-3000:]
    assert "kept the results of its 2 finished dataset(s): Q0_1m, Q2_1m" in first.stderr
    assert sorted(path.stem for path in (workdir / "models").glob("*.pt")) == ["Q0_1m", "Q2_1m"]
    assert (workdir / "results" / "not_done.txt").read_text().split() == ["Q1_1m"]
    (only_job,) = trainings_by_slurm_job(workdir, ["Q0_1m", "Q2_1m"]).values()
    assert most_at_once(only_job) == 1, only_job
    kept = {name: (workdir / "models" / f"{name}.pt").stat().st_mtime_ns for name in ("Q0_1m", "Q2_1m")}

    # The next run trains only the failed dataset, in one job of its own; the others stay.
    second = snakemake(workdir, *PACKED_PROFILES, *packing, env=slurm_executor_env, timeout=900)
    assert len(submitted_jobs(second.stderr)) == 1
    assert set(trainings_by_slurm_job(workdir, ["Q1_1m"])) == set(submitted_jobs(second.stderr))
    assert {name: (workdir / "models" / f"{name}.pt").stat().st_mtime_ns for name in kept} == kept
    assert summary_by_dataset(workdir).keys() == set(datasets)


def test_packed_job_that_fails_after_all_its_datasets_finished_counts_as_succeeded(
    slurm_cluster, slurm_executor_env, tmp_path
):
    workdir = tmp_path  # only this test's datasets, so that they fill one job
    datasets = ["E0_1m", "E1_1m"]
    add_datasets(workdir, datasets)
    write_config(workdir, data_dir="data", train={"gpu_mem": 1})
    failing_at_end = {**slurm_executor_env, PACKED_JOB_EXIT: "1"}  # the job's Snakemake exits 1 when done
    packing = ("--group-components", "dataset=2", "--resources", "gpu_mem=2")
    run = snakemake(workdir, *PACKED_PROFILES, *packing, env=failing_at_end, timeout=900)

    (job_id,) = submitted_jobs(run.stderr)  # not submitted again
    assert slurm_job(job_id)["JobState"] == "FAILED", "the job did not fail: nothing tested"
    assert "failed after all its 2 dataset(s) had finished; kept their results: E0_1m, E1_1m" in run.stderr
    assert trainings_by_slurm_job(workdir, datasets).keys() == {job_id}
    assert summary_by_dataset(workdir).keys() == set(datasets)
    again = snakemake(workdir, *PACKED_PROFILES, *packing, "-n", env=slurm_executor_env)
    assert pending_jobs(again.stdout + again.stderr, "train") == {}


def test_killed_packed_job_keeps_what_it_finished_and_retries_only_the_rest(
    slurm_cluster, slurm_executor_env, tmp_path
):
    workdir = tmp_path  # only this test's datasets, so that they fill whole jobs
    datasets = [f"K{i}_1m" for i in range(3)]
    add_datasets(workdir, datasets)
    write_config(workdir, data_dir="data", train={"gpu_mem": 1})
    # One job of three; the first training to start an epoch waits there (holding one of the
    # two places the budget gives) while the other two train in the other place.
    marker = workdir / "paused-at-epoch"
    output = workdir / "snakemake-output.txt"
    command = snakemake_command(
        workdir, *PACKED_PROFILES, "--group-components", "dataset=3", "--resources", "gpu_mem=2"
    )
    env = {**os.environ, **slurm_executor_env, PAUSE_AT: "epoch", PAUSE_FILE: str(marker)}
    with open(output, "w") as sink:
        run = subprocess.Popen(command, cwd=workdir, stdout=sink, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 600
        while not marker.exists() or len(finished_trainings(workdir)) < 2:
            assert run.poll() is None, output.read_text()[-3000:]
            assert time.monotonic() < deadline, output.read_text()[-3000:]
            time.sleep(0.2)
        # By content: Snakemake touches the outputs of the jobs it records as done.
        finished = {path.stem: path.read_bytes() for path in (workdir / "models").glob("*.pt")}
        (killed_job,) = submitted_jobs(output.read_text())
        subprocess.run(["scancel", killed_job], check=True)  # as when its wall time runs out
        run.wait(timeout=900)
    finally:
        if run.poll() is None:
            run.kill()
    text = output.read_text()

    # Snakemake retried the job with the one dataset it had not finished, in a SLURM job of its own.
    assert run.returncode == 0, text[-3000:]
    assert len(finished) == 2, finished
    # Also when the cancel hit a finished training's job step while it was still shutting
    # down: that step counts as succeeded inside the job (whether it did this time is printed).
    kept_inside_job = [line for line in slurm_logs(workdir) if "stopped after the job had finished" in line]
    print("steps stopped after their job finished:", kept_inside_job or "none")
    rnnfleet_lines = [line for line in text.splitlines() if "rnnfleet:" in line]
    assert f"kept the results of its 2 finished dataset(s): {', '.join(sorted(finished))}" in text, rnnfleet_lines
    (retry_job,) = set(submitted_jobs(text)) - {killed_job}
    (paused,) = set(datasets) - set(finished)
    assert trainings_by_slurm_job(workdir, [paused]).keys() == {retry_job}
    assert trainings_by_slurm_job(workdir, sorted(finished)).keys() == {killed_job}  # not trained again
    assert {name: (workdir / "models" / f"{name}.pt").read_bytes() for name in finished} == finished
    assert summary_by_dataset(workdir).keys() == set(datasets)
    done, total = re.findall(r"(\d+) of (\d+) steps \(\d+%\) done", text)[-1]
    assert done == total, f"the progress count ended at {done} of {total}"  # the kept jobs counted


def slurm_logs(workdir: Path) -> list[str]:
    """The lines of every SLURM job log of the run (what the Snakemake inside each job printed)."""
    return [
        line
        for log in sorted((workdir / ".snakemake" / "slurm_logs").rglob("*.log"))
        for line in log.read_text().splitlines()
    ]


def finished_trainings(workdir: Path) -> list[str]:
    """Datasets whose model is written and whose train job Snakemake has recorded as ended
    (its incomplete marker, .snakemake/incomplete/<base64 of the path>, gone)."""
    markers = workdir / ".snakemake" / "incomplete"
    return [
        path.stem
        for path in (workdir / "models").glob("*.pt")
        if not (markers / base64.urlsafe_b64encode(f"models/{path.name}".encode()).decode()).exists()
    ]


def test_packed_profile_with_the_fleet_start_trains_past_a_failed_pretraining_then_from_it(
    slurm_cluster, slurm_executor_env, tmp_path
):
    workdir = tmp_path  # only this test's datasets, so that they fill whole jobs
    datasets = [f"F{i}_1m" for i in range(2)]
    add_datasets(workdir, datasets)
    write_config(workdir, data_dir="data", train={"init": "fleet", "gpu_mem": 1})
    packing = ("--group-components", "dataset=2", "--resources", "gpu_mem=2")
    failing = {**slurm_executor_env, PRETRAIN_CRASH: "1"}
    first = snakemake(workdir, *PACKED_PROFILES, *packing, env=failing, check=False, timeout=900)

    # Three SLURM jobs: the preprocesses together, the pretraining on a GPU (it fails), then
    # the trainings together, from scratch (their own Snakemake leaves the pretrained file out).
    # On a cluster the job's own line is in its cluster log: Snakemake's report of it stays.
    assert first.returncode != 0 and "Error in rule pretrain" in first.stderr, first.stderr[-3000:]
    jobs = submitted_jobs(first.stderr)
    assert len(jobs) == 3, first.stderr[-3000:]
    (pretrain_job,) = [job_id for job_id, log in jobs.items() if "rule_pretrain" in log]
    assert re.fullmatch(r"gres[:/]gpu:1", slurm_job(pretrain_job).get("TresPerNode", ""))
    (train_job,) = trainings_by_slurm_job(workdir, datasets)
    assert train_job in jobs and slurm_job(train_job)["JobState"] == "COMPLETED"
    notes = {row["init_note"] for row in summary_by_dataset(workdir).values()}
    assert len(notes) == 1 and notes.pop().startswith("from scratch: the fleet's pretraining failed: "), notes

    # The next run: the pretraining on its GPU, then every dataset again, from it.
    second = snakemake(workdir, *PACKED_PROFILES, *packing, env=slurm_executor_env, timeout=900)
    assert len(submitted_jobs(second.stderr)) == 2, second.stderr[-3000:]
    assert {row["init"] for row in summary_by_dataset(workdir).values()} == {"fleet"}
