"""Every Snakemake function rnnfleet replaces or wraps is in one table with its stock source's
hash, and `make test` fails when the installed Snakemake (or job-step plugin) differs."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO

from rnnfleet.hooks import snakemake_contract, snakemake_speedups
from rnnfleet.hooks.snakemake_contract import CONTRACT, Patch, differences

SLURM_PLUGIN_FOLDER = REPO / ".venv" / "slurm-plugin"  # make test installs the job-step plugin there


@pytest.fixture
def with_slurm_plugin(monkeypatch):
    if SLURM_PLUGIN_FOLDER.is_dir():
        monkeypatch.syspath_prepend(str(SLURM_PLUGIN_FOLDER))


def test_every_patched_function_is_as_rnnfleet_was_written_for(with_slurm_plugin):
    assert differences() == []


def test_a_changed_or_missing_function_is_named():
    planted = (
        Patch("snakemake.jobs:Job.shellcmd", "planted", "0" * 64),
        Patch("snakemake.jobs:Job.no_such_function", "planted", "0" * 64),
    )
    found = differences(planted)
    assert found[0] == "snakemake.jobs:Job.shellcmd (planted) has changed"
    assert found[1].startswith("snakemake.jobs:Job.no_such_function (planted) not found")


def test_the_speed_ups_replace_only_what_the_table_holds():
    targets = {patch.target for patch in CONTRACT}
    assert set(snakemake_speedups.REPLACEMENTS) <= targets
    assert set(snakemake_speedups.STOCK_SOURCE_SHA256) == set(snakemake_contract.stock_hashes("snakemake_speedups"))


def test_the_upgrade_check_prints_the_table_and_its_verdict():
    command = [sys.executable, "-m", "rnnfleet.hooks.snakemake_contract"]
    result = subprocess.run(command, capture_output=True, text=True, env={"PYTHONPATH": str(REPO / "scripts")})
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(CONTRACT) + 2 and lines[-1] == "nothing changed"
