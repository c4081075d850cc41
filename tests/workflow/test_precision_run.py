"""train.amp in a real run: the model's metrics and the job's log name the precision auto chose."""

from __future__ import annotations

import json

import torch
from conftest import add_datasets, snakemake, write_config

from rnnfleet import precision


def test_metrics_and_job_log_name_the_precision_used(tmp_path):
    add_datasets(tmp_path, ["A_1m"])
    write_config(tmp_path, data_dir="data")  # train.amp left at its default, auto
    snakemake(tmp_path, "models/A_1m.pt")
    metrics = json.loads((tmp_path / "metrics" / "A_1m.json").read_text())
    expected = precision.resolve_amp("auto", torch.device(metrics["device"]))
    assert metrics["amp"] == expected
    assert f"amp {expected}," in (tmp_path / "logs" / "train" / "A_1m.log").read_text()
