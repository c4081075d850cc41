"""The speed benchmark runs end to end (tiny sizes; no timing is asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO


def test_speed_bench_runs_and_reports_ratios(tmp_path):
    command = [sys.executable, str(REPO / "bench" / "bench_speed.py"), "--datasets", "2", "--rows", "600"]
    command += [
        "--epochs",
        "1",
        "--reps",
        "1",
        "--cores",
        "2",
        "--variants",
        "naive,snakemake,one-proc",
        "--out",
        str(tmp_path),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "x naive" in result.stdout and "snakemake / best one-process" in result.stdout
    record = json.loads((tmp_path / "speed.jsonl").read_text().splitlines()[-1])
    assert set(record["models_per_min"]) == {"naive", "snakemake", "one-proc-1t", "one-proc-2t"}
    assert all(value > 0 for value in record["models_per_min"].values())
    assert record["snakemake_split_seconds"]["train_seconds"] > 0
