"""scripts/size_gpu_mem.py: the plain answer on a machine without CUDA, and the dataset it
measures read exactly as the workflow's preprocess job reads it."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from conftest import REPO


def test_without_cuda_the_command_says_so_and_exits_2():
    # CUDA_VISIBLE_DEVICES="" hides every GPU, so this runs the same on a machine with CUDA.
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "size_gpu_mem.py")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert result.returncode == 2
    assert "No CUDA" in result.stderr and "gpu_mem does not matter" in result.stderr
    assert result.stdout == ""


def test_sizing_reads_a_dataset_exactly_as_its_preprocess_job(tmp_path):
    """The sizing script measures the dataset the workflow trains: same layout settings, gaps
    and features, from the same settings object (a semicolon file that only `format:` reads)."""
    import importlib.util

    from conftest import snakemake, write_config

    from rnnfleet.prep.arrays_file import load_arrays
    from rnnfleet.synthetic import write_synthetic_csv

    plain = write_synthetic_csv(tmp_path / "plain.csv", 400, 3)
    lines = plain.read_text().splitlines()[1:]  # headerless, ';'-delimited, 15 minutes cut out
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "X_1m.csv").write_text(
        "".join(line.replace(",", ";") + "\n" for line in lines[:200] + lines[215:])
    )
    config_path = write_config(
        tmp_path,
        data_dir="data",
        format={
            "header": False,
            "delimiter": ";",
            "positions": {
                key: column for column, key in enumerate(("timestamp", "open", "high", "low", "close", "volume"))
            },
        },
        preprocess={"max_gap": "10min"},
        features=["ohlc_returns", "hl_range"],
    )
    snakemake(tmp_path, "prep/X_1m.npz")
    spec = importlib.util.spec_from_file_location("size_gpu_mem", REPO / "scripts" / "size_gpu_mem.py")
    size_gpu_mem = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(size_gpu_mem)
    sized = size_gpu_mem.prepared_arrays(size_gpu_mem.read_config(config_path), tmp_path / "data" / "X_1m.csv")
    trained = load_arrays(tmp_path / "prep" / "X_1m.npz")
    assert len(trained.gap_bars) == 1 and trained.feature_definition == ("ohlc_returns", "hl_range")
    np.testing.assert_array_equal(sized.features, trained.features)
    np.testing.assert_array_equal(sized.targets, trained.targets)
    np.testing.assert_array_equal(sized.gap_bars, trained.gap_bars)
