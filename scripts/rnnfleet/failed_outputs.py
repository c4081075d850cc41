"""The files whose jobs failed for good in this run, as the main Snakemake process tells the
jobs it starts (rnnfleet.hooks.past_failed_inputs sets it; the rules' input functions read it,
in that process and in a cluster job's own Snakemake, which sbatch hands the environment)."""

from __future__ import annotations

import os

# The files, os.pathsep between them.
FAILED_OUTPUTS = "RNNFLEET_FAILED_OUTPUTS"


def failed_outputs() -> set[str]:
    """The files this run's main Snakemake process dropped from the inputs of the jobs it
    released (empty in a run where none was)."""
    return set(filter(None, os.environ.get(FAILED_OUTPUTS, "").split(os.pathsep)))
