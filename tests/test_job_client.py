"""rnnfleet.job_client: the process of each preprocess and train job starts without Snakemake
or torch, reads only literals and JSON, and keeps the run's settings to this user."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from conftest import REPO

from rnnfleet import job_client


def test_the_client_imports_neither_snakemake_nor_torch_nor_pandas():
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import rnnfleet.job_client, rnnfleet.errors, rnnfleet.warm;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'snakemake', 'torch', 'pandas', 'numpy'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, str(REPO / "scripts")], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_settings_file_is_named_by_its_content_and_private(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = {"train": {"warm_workers": False, "train_hparams": {"epochs": 2}}}
    path = job_client.write_settings(settings)
    assert path == job_client.settings_path(settings)
    assert json.loads(path.read_text()) == settings
    assert job_client.write_settings(settings) == path  # written once
    other = job_client.settings_path({"train": {"warm_workers": False, "train_hparams": {"epochs": 3}}})
    assert other != path
    if os.name == "posix":
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_job_arguments_join_settings_texts_and_literals(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = job_client.write_settings({"train": {"warm_workers": True, "columns": {"close": "c"}}})
    options = job_client.parse_command_line(
        ["train", "--log", "x.log", "--settings", str(path), "--text", "dataset", "A_1m"]
        + ["--text", "model_path", "models/1.pt", "--value", "threads", "2", "--value", "gpu_mem_gb", "4"]
    )
    kwargs, warm = job_client.job_arguments(options)
    assert warm is True
    assert kwargs == {
        "columns": {"close": "c"},
        "dataset": "A_1m",
        "model_path": "models/1.pt",
        "threads": 2,
        "gpu_mem_gb": 4,
    }


def test_a_value_that_is_code_is_refused_not_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = job_client.write_settings({"preprocess": {"warm_workers": False}})
    marker = tmp_path / "ran"
    options = job_client.parse_command_line(
        ["preprocess", "--log", "x.log", "--settings", str(path)]
        + ["--value", "seq_len", f"__import__('pathlib').Path({str(marker)!r}).touch()"]
    )
    with pytest.raises(ValueError, match="not a Python literal"):
        job_client.job_arguments(options)
    assert not marker.exists()
