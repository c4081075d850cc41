"""The packed-job hooks where Snakemake's internals are not the ones they know: each applies
nothing, says so in one warning line, and leaves the stock behaviour (the SLURM tests in
tests/workflow/test_slurm.py cover them where they apply)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from snakemake.jobs import GroupJob
from snakemake.scheduling.job_scheduler import JobScheduler

from rnnfleet.hooks import packed_jobs


@pytest.fixture(autouse=True)
def stock_scheduler(monkeypatch):
    """Whatever a test patches on the scheduler is put back after it."""
    monkeypatch.setattr(JobScheduler, "_handle_error", JobScheduler._handle_error)


def test_the_split_applies_once_to_the_scheduler_it_knows():
    stock = JobScheduler._handle_error
    assert packed_jobs.apply_split_on_failure()
    patched = JobScheduler._handle_error
    assert patched is not stock and patched.__rnnfleet_packed__
    assert packed_jobs.apply_split_on_failure() and JobScheduler._handle_error is patched


def test_a_scheduler_without_the_group_internals_is_left_stock_with_one_warning(monkeypatch, capsys):
    monkeypatch.delattr(GroupJob, "finalize")
    stock = JobScheduler._handle_error
    assert not packed_jobs.apply_split_on_failure()
    assert JobScheduler._handle_error is stock
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "removes the results of the others in that job" in lines[0], lines


def test_a_scheduler_without_a_finish_queue_keeps_the_stock_error_handling():
    assert not packed_jobs._count_as_succeeded(SimpleNamespace(), object())
    queue = SimpleNamespace(_tofinish=[], _open_jobs=SimpleNamespace(release=lambda: None))
    job = object()
    assert packed_jobs._count_as_succeeded(queue, job) and queue._tofinish == [job]


def test_inside_a_job_an_unknown_step_executor_runs_one_step_at_a_time_with_one_warning(monkeypatch, capsys):
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
