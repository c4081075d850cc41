"""Platforms without fcntl, fork or Unix sockets (Windows; see docs/platforms.md): the
workflow runs, every job in its own process, and trains the same models."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from conftest import REPO, add_datasets, snakemake, write_config

WITHOUT_UNIX = REPO / "tests" / "without_unix_facilities"
DATASETS = ["A_1m", "B_1m"]


def run_workflow(workdir: Path, env: dict | None = None) -> dict[str, dict]:
    add_datasets(workdir, DATASETS)
    write_config(workdir, data_dir="data")
    snakemake(workdir, env=env)
    return {name: torch.load(workdir / "models" / f"{name}.pt", weights_only=True) for name in DATASETS}


def test_without_fcntl_fork_and_unix_sockets_the_same_models_come_out(tmp_path):
    hidden = {"PYTHONPATH": os.pathsep.join(filter(None, [str(WITHOUT_UNIX), os.environ.get("PYTHONPATH")]))}
    portable = run_workflow(tmp_path / "portable", env=hidden)
    usual = run_workflow(tmp_path / "usual")

    for name in DATASETS:
        # which path ran: the jobs of the first run had no fork, so no warm worker
        assert portable[name]["metrics"]["worker"] == "cold" and usual[name]["metrics"]["worker"] == "warm"
        log = (tmp_path / "portable" / "logs" / "train" / f"{name}.log").read_text()
        assert "warm worker unavailable: this platform has no fork()" in log
        for key, value in usual[name]["state_dict"].items():
            torch.testing.assert_close(portable[name]["state_dict"][key], value, rtol=0, atol=0)
        metrics = json.loads((tmp_path / "portable" / "metrics" / f"{name}.json").read_text())
        assert metrics["val_loss"] == usual[name]["metrics"]["val_loss"]
    assert (tmp_path / "portable" / "results" / "metrics.csv").exists()
    # Snakemake's own process had no OS file locks either: no run registry (rnnfleet.workflow.recovery)
    assert not (tmp_path / "portable" / ".snakemake" / "rnnfleet-runs").exists()
    assert (tmp_path / "usual" / ".snakemake" / "rnnfleet-runs").is_dir()
