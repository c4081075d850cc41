"""The MPS switch. Starting a real MPS daemon needs an NVIDIA driver; here only the plain
failure where there is none is checked (bench/gpu_check_multi.sh measures MPS on a GPU)."""

from __future__ import annotations

import shutil

import pytest
from conftest import snakemake


@pytest.mark.skipif(shutil.which("nvidia-cuda-mps-control") is not None, reason="checks the no-driver message")
def test_mps_without_the_driver_stops_before_any_job(workdir):
    result = snakemake(workdir, "--config", "mps=true", check=False)
    assert result.returncode != 0
    assert "nvidia-cuda-mps-control" in result.stderr and "set mps: false" in result.stderr
    assert not (workdir / "prep").exists() and not (workdir / "models").exists()
    assert snakemake(workdir, "-n", "--config", "mps=true").returncode == 0  # a dry-run starts nothing
