"""Where a run and its jobs tell each other they are alive: the names both sides use.

The run (the Snakemake process, rnnfleet.workflow.recovery) holds locked files in RUNS_DIR for its
life; each of its jobs (rnnfleet.runner.orphans) holds one of its own there and tests the run's.
"""

from __future__ import annotations

from pathlib import Path

SNAKEMAKE_DIR = Path(".snakemake")
RUNS_DIR = SNAKEMAKE_DIR / "rnnfleet-runs"  # two locked files per live run, one per working job
RUN_VARIABLE = "RNNFLEET_RUN"  # in each job's environment: "<host>/<run id>" of the run that started it
ALIVE_SUFFIX = ".alive"  # a run's second file: the one its jobs test
JOB_PREFIX = "job-"  # a working job's file


def run_alive_path(run_id: str) -> Path:
    """The file a run holds and its jobs test: a second one, so that a job's test (which
    locks it for an instant when the run is gone) never makes a starting run see a dead run alive."""
    return RUNS_DIR / f"run-{run_id}{ALIVE_SUFFIX}"
