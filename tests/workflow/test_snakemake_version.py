"""A run on a Snakemake other than the supported one says so in one line at its start."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

from rnnfleet.snakemake_version import SUPPORTED_SNAKEMAKE

# The real snakemake command, its version reported as a later release's.
LATER_RELEASE = "9.99.0"
AS_LATER_RELEASE = (
    f"import sys, snakemake; snakemake.__version__ = {LATER_RELEASE!r}; "
    "from snakemake.cli import main; sys.argv[0] = 'snakemake'; main()"
)


def test_a_dry_run_on_another_snakemake_says_so_once_and_plans_as_usual(workdir):
    command = [sys.executable, "-c", AS_LATER_RELEASE, "-s", str(REPO / "Snakefile"), "-d", str(workdir), "-n"]
    result = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if f"rnnfleet supports {SUPPORTED_SNAKEMAKE}" in line]
    assert lines == [
        f"rnnfleet: Snakemake {LATER_RELEASE} is installed, rnnfleet supports {SUPPORTED_SNAKEMAKE} alone: its "
        "replacements of Snakemake's internals are off (slower planning of large fleets, less protection of "
        f"model files); install it with pip install snakemake=={SUPPORTED_SNAKEMAKE}"
    ]
    assert [line for line in result.stderr.splitlines() if LATER_RELEASE in line] == lines  # said once
    assert "train" in result.stdout  # planned as usual


def test_a_dry_run_on_the_supported_snakemake_says_nothing_of_versions(workdir):
    command = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir), "-n"]
    result = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rnnfleet supports" not in result.stderr
