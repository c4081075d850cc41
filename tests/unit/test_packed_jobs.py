"""The packed-job hooks in this process: the split applies once; inside a job, a job-step
executor other than the one they know leaves the steps one at a time with one warning line,
and the budget bounds the job's trainings (the SLURM tests in tests/workflow/test_slurm.py
cover them where they apply; the gate that applies them: tests/unit/test_snakemake_contract.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from snakemake.scheduling.job_scheduler import JobScheduler

from rnnfleet.hooks import packed_jobs


@pytest.fixture(autouse=True)
def stock_scheduler(monkeypatch):
    """Whatever a test patches on the scheduler is put back after it."""
    monkeypatch.setattr(JobScheduler, "_handle_error", JobScheduler._handle_error)


def test_the_split_applies_once_to_the_scheduler_it_knows():
    stock = JobScheduler._handle_error
    packed_jobs.apply_split_on_failure()
    patched = JobScheduler._handle_error
    assert patched is not stock and patched.__rnnfleet_packed__
    packed_jobs.apply_split_on_failure()
    assert JobScheduler._handle_error is patched


def test_a_job_counted_as_succeeded_goes_to_the_finish_queue_and_wakes_the_scheduler():
    woken = []
    queue = SimpleNamespace(_tofinish=[], _open_jobs=SimpleNamespace(release=lambda: woken.append(True)))
    job = object()
    packed_jobs._count_as_succeeded(queue, job)
    assert queue._tofinish == [job] and woken == [True]


def test_inside_a_job_without_the_step_executor_plugin_steps_run_one_at_a_time_with_one_warning(monkeypatch, capsys):
    monkeypatch.setattr(packed_jobs, "_concurrent_overlapping_steps", lambda: False)
    registered = {}
    workflow = SimpleNamespace(
        execution_settings=SimpleNamespace(keep_going=False),
        register_resource=registered.__setitem__,
        resource_scopes={},
    )
    assert packed_jobs.apply_inside_job(workflow) is None
    assert workflow.execution_settings.keep_going  # keep-going applies all the same
    assert registered == {} and workflow.resource_scopes == {}
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "a packed job runs one step at a time" in lines[0], lines


def test_inside_a_job_the_budget_bounds_the_trainings_of_that_job(monkeypatch):
    monkeypatch.setattr(packed_jobs, "_concurrent_overlapping_steps", lambda: True)
    monkeypatch.setenv(packed_jobs.JOB_GPU_MEM_VARIABLE, "12")
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "8")
    registered = {}
    workflow = SimpleNamespace(
        execution_settings=SimpleNamespace(keep_going=False),
        register_resource=registered.__setitem__,
        resource_scopes={},
    )
    assert packed_jobs.apply_inside_job(workflow) == 12
    assert registered == {"_nodes": 8, "gpu_mem": 12} and workflow.resource_scopes == {"gpu_mem": "global"}
