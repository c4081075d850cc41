"""The MPS switch. Starting a real MPS daemon needs an NVIDIA driver; here only the plain
failure where there is none is checked (bench/gpu_check_multi.sh measures MPS on a GPU)."""

from __future__ import annotations

import os
import shutil
import sys

from conftest import snakemake


def path_without_mps_control() -> str:
    """PATH less the folders that hold nvidia-cuda-mps-control (the Python running the tests stays)."""
    folders = [sys.prefix + "/bin"] + os.environ["PATH"].split(os.pathsep)
    return os.pathsep.join(folder for folder in folders if not shutil.which("nvidia-cuda-mps-control", path=folder))


def test_mps_without_the_driver_stops_before_any_job(workdir):
    # On a machine with the NVIDIA driver, the control program is taken off PATH for this run.
    result = snakemake(workdir, "--config", "mps=true", check=False, env={"PATH": path_without_mps_control()})
    assert result.returncode != 0
    assert "nvidia-cuda-mps-control" in result.stderr and "set mps: false" in result.stderr
    assert not (workdir / "prep").exists() and not (workdir / "models").exists()
    assert snakemake(workdir, "-n", "--config", "mps=true").returncode == 0  # a dry-run starts nothing
