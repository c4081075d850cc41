"""A process that does not train never starts CUDA: preprocess, summarize, plots, predict and
export, and Snakemake's own process, on both paths of warm workers. Every process of the run
is told a CUDA GPU is there and any start of CUDA is recorded and fails (tests/cuda_tripwire);
the trainings are asked for the CPU (train.device: cpu), with the precision chosen for the
device (train.amp: auto)."""

from __future__ import annotations

import json
import os

import pytest
from conftest import REPO, add_datasets, snakemake, write_config

pytest.importorskip("onnxruntime", reason="the export's optional packages: pip install -r requirements-onnx.txt")

TRIPWIRE = REPO / "tests" / "cuda_tripwire"
WITHOUT_UNIX = REPO / "tests" / "without_unix_facilities"
DATASETS = ["A_1m", "B_1m"]


@pytest.mark.parametrize(("harness", "worker"), [([], "warm"), ([WITHOUT_UNIX], "spawned")], ids=["fork", "spawn"])
def test_no_process_of_a_run_starts_cuda_where_a_gpu_is_announced_and_trainings_use_the_cpu(tmp_path, harness, worker):
    record = tmp_path / "cuda-started.txt"
    add_datasets(tmp_path, DATASETS)
    write_config(
        tmp_path,
        data_dir="data",
        train={"device": "cpu", "amp": "auto"},
        predict={"datasets": "all"},
        export={"onnx": True},
    )
    path = os.pathsep.join(str(folder) for folder in [TRIPWIRE, *harness, os.environ.get("PYTHONPATH")] if folder)
    snakemake(tmp_path, env={"PYTHONPATH": path, "RNNFLEET_CUDA_TRIPWIRE": str(record)})

    assert not record.exists(), record.read_text()
    for name in DATASETS:
        assert (tmp_path / "predictions" / f"{name}.csv").stat().st_size > 0
        assert (tmp_path / "exports" / f"{name}.onnx").stat().st_size > 0
        metrics = json.loads((tmp_path / "metrics" / f"{name}.json").read_text())
        assert metrics["worker"] == worker  # which path ran
    assert (tmp_path / "results" / "metrics.csv").exists()


def test_the_tripwire_catches_a_process_that_starts_cuda(tmp_path):
    """The control: the same environment records and fails a process that does start CUDA."""
    import subprocess
    import sys

    record = tmp_path / "cuda-started.txt"
    code = "import torch\nassert torch.cuda.is_available()\ntorch.cuda.set_per_process_memory_fraction(0.5, 0)\n"
    env = {**os.environ, "PYTHONPATH": str(TRIPWIRE), "RNNFLEET_CUDA_TRIPWIRE": str(record)}
    started = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert started.returncode != 0 and "tests/cuda_tripwire" in started.stderr
    assert "set_per_process_memory_fraction" in record.read_text()
