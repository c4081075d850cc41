"""Sizing gpu_mem: the arithmetic, and the plain answer on a machine without CUDA."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from conftest import REPO

from rnnfleet.data import PreparedArrays
from rnnfleet.runner.sizing import GIB, Footprint, arrays_for_steps, declared_gb, plan


def test_declared_memory_covers_the_peak_plus_margin_in_whole_gb():
    footprint = Footprint(allocator_peak_bytes=int(1.1 * GIB), outside_allocator_bytes=int(0.5 * GIB))
    assert footprint.peak_bytes == int(1.1 * GIB) + int(0.5 * GIB)
    assert declared_gb(footprint, margin=0.15) == 2  # 1.6 GiB * 1.15 = 1.84 -> 2
    assert declared_gb(footprint, margin=0.3) == 3  # 2.08 -> 3
    assert declared_gb(Footprint(1, 0), margin=0.0) == 1  # never 0


def test_plan_fills_each_card_and_budgets_exactly_that():
    fit = plan(declared=3, card_capacities_gb=[11, 11, 23])  # e.g. two 12 GB cards and a 24 GB one
    assert fit.per_card == [3, 3, 7]
    assert fit.at_once == 13 and fit.resources_gb == 39
    assert plan(declared=40, card_capacities_gb=[23]).at_once == 0


def test_a_few_steps_keep_every_row_on_the_device():
    rows = 10_000
    arrays = PreparedArrays(
        features=np.zeros((rows, 5), np.float32),
        targets=np.zeros(rows, np.float32),
        feature_mean=np.zeros(5, np.float32),
        feature_std=np.ones(5, np.float32),
        target_std=1.0,
        train_end=8_000,
        val_start=8_000,
        last_close=1.0,
        horizon=1,
    )
    short = arrays_for_steps(arrays, steps=5, seq_len=60, batch_size=128)
    assert short.train_end - 59 == 5 * 128 and short.features is arrays.features and short.val_start == 8_000
    assert arrays_for_steps(arrays, steps=1000, seq_len=60, batch_size=128).train_end == 8_000


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

    from rnnfleet.data import load_arrays
    from rnnfleet.synthetic import write_synthetic_csv

    plain = write_synthetic_csv(tmp_path / "plain.csv", 400, 3)
    lines = plain.read_text().splitlines()[1:]  # headerless, ';'-delimited, 15 minutes cut out
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "X_1m.csv").write_text("\n".join(line.replace(",", ";") for line in lines[:200] + lines[215:]))
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
