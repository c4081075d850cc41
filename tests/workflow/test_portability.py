"""Platforms without fork, descriptor passing or peer credentials (Windows; see
docs/platforms.md): the workflow runs its jobs in spawned warm workers and trains the same
models as the fork path; without OS file locks as well, every job runs in its own process."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from conftest import REPO, add_datasets, snakemake, write_config

WITHOUT_UNIX = REPO / "tests" / "without_unix_facilities"
DATASETS = ["A_1m", "B_1m"]


def harness(**variables: str) -> dict[str, str]:
    """The environment of a run under tests/without_unix_facilities."""
    path = os.pathsep.join(filter(None, [str(WITHOUT_UNIX), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path, **variables}


def run_workflow(workdir: Path, env: dict | None = None) -> dict[str, dict]:
    add_datasets(workdir, DATASETS)
    write_config(workdir, data_dir="data")
    snakemake(workdir, env=env)
    return {name: torch.load(workdir / "models" / f"{name}.pt", weights_only=True) for name in DATASETS}


@pytest.fixture(scope="module")
def usual(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    """A run on this platform as it is (the fork path): its folder and models."""
    folder = tmp_path_factory.mktemp("usual")
    return folder, run_workflow(folder)


def assert_same_models(models: dict[str, dict], folder: Path, usual: dict[str, dict]) -> None:
    for name in DATASETS:
        for key, value in usual[name]["state_dict"].items():
            torch.testing.assert_close(models[name]["state_dict"][key], value, rtol=0, atol=0)
        metrics = json.loads((folder / "metrics" / f"{name}.json").read_text())
        assert metrics["val_loss"] == usual[name]["metrics"]["val_loss"]
    assert (folder / "results" / "metrics.csv").exists()


def test_without_fork_and_descriptor_passing_jobs_run_in_spawned_workers_and_the_same_models_come_out(tmp_path, usual):
    spawned = run_workflow(tmp_path / "spawned", env=harness())
    usual_folder, usual = usual

    assert_same_models(spawned, tmp_path / "spawned", usual)
    for name in DATASETS:
        # which path ran: a spawned worker (no fork), against the fork path's warm child
        assert spawned[name]["metrics"]["worker"] == "spawned" and usual[name]["metrics"]["worker"] == "warm"
        assert spawned[name]["metrics"]["warm_server_pid"] not in (None, spawned[name]["metrics"]["pid"])
        for kind in ("preprocess", "train"):
            assert "warm worker unavailable" not in (tmp_path / "spawned" / "logs" / kind / f"{name}.log").read_text()
        assert "spawned worker" in (tmp_path / "spawned" / "logs" / "train" / f"{name}.log").read_text()
    assert (tmp_path / "spawned" / ".snakemake" / "rnnfleet-runs").is_dir()  # the run's registry: OS locks


def test_without_os_file_locks_too_every_job_runs_in_its_own_process_and_the_same_models_come_out(tmp_path, usual):
    portable = run_workflow(tmp_path / "portable", env=harness(RNNFLEET_NO_OS_LOCKS="1"))
    usual_folder, usual = usual

    assert_same_models(portable, tmp_path / "portable", usual)
    for name in DATASETS:
        assert portable[name]["metrics"]["worker"] == "cold" and usual[name]["metrics"]["worker"] == "warm"
        log = (tmp_path / "portable" / "logs" / "train" / f"{name}.log").read_text()
        assert "warm worker unavailable: this platform has no OS file locks" in log
    # Snakemake's own process had no OS file locks either: no run registry (rnnfleet.workflow.recovery)
    assert not (tmp_path / "portable" / ".snakemake" / "rnnfleet-runs").exists()
    assert (usual_folder / ".snakemake" / "rnnfleet-runs").is_dir()
