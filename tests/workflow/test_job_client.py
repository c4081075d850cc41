"""rnnfleet.runner.job_client: the process of every per-dataset job (preprocess, train, predict,
export) starts without Snakemake or torch, reads only JSON, and keeps the run's settings to this user."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import PROGRAMS, add_datasets, snakemake, write_config

from rnnfleet.runner import job_client

# What a job's process may import on its way to a running warm server: the client's own
# modules and light standard ones. tempfile, pathlib, subprocess, ast, argparse (with
# shutil) and filelock each cost 5 to 70 ms of every job's start (rnnfleet.runner.warm_client).
HEAVY_FOR_A_CLIENT = {
    "snakemake", "torch", "pandas", "numpy", "filelock", "pathlib", "tempfile", "subprocess",
    "ast", "argparse", "shutil", "rnnfleet.runner.warm", "rnnfleet.runner.device", "rnnfleet.runner.jobs",
}  # fmt: skip


def test_a_job_reaches_a_running_warm_server_without_heavy_imports(tmp_path, monkeypatch):
    # A job's process, run twice: the first starts the folder's warm server, the second finds
    # it running; the second's modules are those of the way to a running server. (The job's
    # arguments are incomplete on purpose: the warm child reports that, which shows it ran there.)
    monkeypatch.chdir(tmp_path)
    settings = job_client.write_settings({"preprocess": {"warm_workers": True}})
    probe = PROGRAMS / "job_client_probe.py"
    command = [sys.executable, str(probe), "preprocess", "--log", "job.log", "--settings", str(settings)]
    # Snakemake sets $TMPDIR for its jobs, to a short folder of its own: the server's socket
    # path must fit AF_UNIX's ~100 bytes, which pytest's tmp_path under a worker may not.
    job_tmp = Path(tempfile.mkdtemp(prefix="rnnfleet-test-"))
    snakemake_job_env = {**os.environ, "TMPDIR": str(job_tmp)}
    try:
        for _ in range(2):
            subprocess.run(
                [*command, "--text", "dataset", "none_1m", "--value", "threads", "1"],
                cwd=tmp_path,
                env=snakemake_job_env,
                capture_output=True,
            )
    finally:
        shutil.rmtree(job_tmp, ignore_errors=True)
    log = (tmp_path / "job.log").read_text()
    assert "warm worker unavailable" not in log and "internal error TypeError" in log
    modules = set(json.loads((tmp_path / "modules.json").read_text()))
    assert "rnnfleet.runner.warm_client" in modules
    assert modules & HEAVY_FOR_A_CLIENT == set()


# Each per-dataset rule -> the kind of job its command hands to the client (job_client.JOBS).
PER_DATASET_KINDS = {"preprocess": "preprocess", "train": "train", "predict": "predict", "export_onnx": "export"}


def planned_commands(dry_run_output: str) -> dict[tuple[str, str], str | None]:
    """{(rule, dataset): its shell command, None for a job without one (`script:`)} of each
    job with a dataset in a `snakemake -n -p` listing."""
    jobs, rule, dataset = {}, None, None
    for line in dry_run_output.splitlines():
        stripped = line.strip()
        if stripped.startswith(("rule ", "localrule ")):
            rule, dataset = stripped.split()[1].rstrip(":"), None
        elif stripped.startswith("wildcards: dataset="):
            dataset = stripped.split("dataset=")[1].split(",")[0]
            jobs[rule, dataset] = None
        elif stripped.startswith("Shell command:") and dataset is not None:
            command = stripped.removeprefix("Shell command:").strip()
            jobs[rule, dataset] = None if command in ("", "None") else command  # a `script:` job: None
    return jobs


def test_every_per_dataset_job_is_a_command_of_the_job_client(tmp_path):
    """No per-dataset job is a `script:` (none starts Snakemake's Python per dataset): in a
    dry-run of every kind of them, each one's command is scripts/job.py with its kind and dataset."""
    pytest.importorskip("onnxruntime", reason="export.onnx needs requirements-onnx.txt")
    add_datasets(tmp_path, ["A_1m", "B_1m"])
    write_config(tmp_path, data_dir="data", predict={"datasets": "all"}, export={"onnx": True})
    result = snakemake(tmp_path, "-n", "-p")
    commands = planned_commands(result.stdout + result.stderr)
    assert sorted(commands) == sorted((rule, name) for rule in PER_DATASET_KINDS for name in ("A_1m", "B_1m"))
    for (rule, dataset), command in commands.items():
        assert command is not None, f"{rule} job of {dataset} has no shell command"
        words = shlex.split(command)
        assert Path(words[1]).as_posix().endswith("scripts/job.py") and words[2] == PER_DATASET_KINDS[rule], command
        assert f" --text dataset {dataset} " in command, command


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
    with pytest.raises(ValueError, match="not a JSON value"):
        job_client.job_arguments(options)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ([], "the first word must be one of preprocess, train"),
        (["fit", "--log", "x.log", "--settings", "s.json"], "the first word must be one of"),
        (["train", "--log", "x.log"], "--log and --settings are required"),
        (["train", "--log", "x.log", "--settings", "s.json", "--text", "dataset"], "incomplete '--text'"),
        (["train", "--log", "x.log", "--settings", "s.json", "--threads", "2"], "unexpected or incomplete '--threads'"),
    ],
)
def test_a_malformed_command_line_stops_with_the_usage(arguments, problem):
    with pytest.raises(SystemExit, match="usage: scripts/job.py") as stop:
        job_client.parse_command_line(arguments)
    assert problem in str(stop.value)
