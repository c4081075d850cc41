"""The demo workflow through a real one-node SLURM cluster with profiles/slurm.

The session fixture runs tests/slurm/start_cluster.sh, which installs Debian's slurm-wlm and
munge where they are missing (as root, with apt-get) and starts munged, slurmctld and
slurmd. Where that is impossible the test is skipped with the script's reason, except under
CI (CI set), where it fails: CI must really run it.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, snakemake

START_CLUSTER = REPO / "tests" / "slurm" / "start_cluster.sh"
# The real profile, then the test cluster's own settings (status via squeue, fast polling).
PROFILES = ("--profile", str(REPO / "profiles" / "slurm"), "--profile", str(REPO / "tests" / "slurm" / "profile"))
# Forecasts too: each dataset's SLURM job then holds preprocess, train and predict.
WITH_PREDICTIONS = ("--config", 'predict={"datasets": "all"}')
# `make test` installs the SLURM executor here, apart from the venv (requirements-slurm.txt).
SLURM_PLUGIN_FOLDER = Path(sys.prefix) / "slurm-plugin"
CANNOT_INSTALL, FOREIGN_CONFIG = 3, 4
DATASETS = {"BTCUSDT_1m", "EURUSD_1m", "SPY_1m"}


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
    """Environment for snakemake commands that need the SLURM executor plugin."""
    if importlib.util.find_spec("snakemake_executor_plugin_slurm"):
        return {}  # installed in the venv (`make slurm`)
    if not (SLURM_PLUGIN_FOLDER / "snakemake_executor_plugin_slurm").is_dir():
        reason = f"the SLURM executor plugin is not installed (make test puts it in {SLURM_PLUGIN_FOLDER})"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(SLURM_PLUGIN_FOLDER), os.environ.get("PYTHONPATH")]))}


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


def test_trainings_go_through_sbatch_and_a_rerun_submits_nothing(slurm_cluster, slurm_executor_env, workdir):
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
