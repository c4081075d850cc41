"""ONNX files through the real workflow and the real `rnnfleet export` command: export.onnx
writes exports/<dataset>.onnx for every model, an unchanged model is not exported again and a
changed (updated) one is; the command exports a project's models (one bad name costs itself alone),
refuses to write over a model or data file, prints a file's metadata, and says in one line
what to install where onnx is missing (rnnfleet itself runs without it). In process:
tests/unit/test_export_onnx.py."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys

import pandas as pd
import pytest
import torch
from conftest import REPO, TINY_ROWS, add_datasets, pending_jobs, planned_jobs, planned_rules, snakemake, write_config

from rnnfleet.synthetic import synthetic_bars

pytest.importorskip("onnxruntime", reason="the export's optional packages: pip install -r requirements-onnx.txt")
from rnnfleet.cli.commands import main  # noqa: E402

DATASETS = ["A_1m", "B_1m"]


def rnnfleet(folder, *args: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of the `rnnfleet` command's main (rnnfleet.cli.commands.main) run
    in this process in folder (torch is imported once for the whole file)."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(list(args))
    finally:
        os.chdir(here)
    return status, out.getvalue(), err.getvalue()


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """(a folder after one real run with export.onnx: true on one core, its stderr)."""
    folder = tmp_path_factory.mktemp("export_run")
    add_datasets(folder, DATASETS)
    write_config(folder, data_dir="data", export={"onnx": True})
    return folder, snakemake(folder, "--cores", "1").stderr


@pytest.fixture(scope="module")
def exported(first_run):
    return first_run[0]


def test_exports_wait_for_every_training_that_can_run(first_run):
    """On one core, every training starts before the first export: an export never holds a
    core a training could use (priority -10 against the training's 10)."""
    started = [job.rule for job in planned_jobs(first_run[1])]
    assert started.count("train") == len(DATASETS) and started.count("export_onnx") == len(DATASETS)
    assert max(i for i, rule in enumerate(started) if rule == "train") < started.index("export_onnx")


def test_the_workflow_exports_every_model_and_again_only_the_one_that_changed(exported):
    for name in DATASETS:
        status, described, _ = rnnfleet(exported, "export", "--describe", f"exports/{name}.onnx")
        assert status == 0 and f"dataset: {name}" in described
        assert f"model_sha256: {sha256(exported / 'models' / f'{name}.pt')}" in described
        assert "checked with ONNX Runtime" in (exported / "logs" / "export" / f"{name}.log").read_text()
    assert pending_jobs(snakemake(exported, "-n").stdout, "export_onnx") == {}  # unchanged: not again
    unknown = snakemake(exported, "exports/C_1m.onnx", check=False)
    assert unknown.returncode != 0 and "exports/C_1m.onnx: no dataset 'C_1m'" in unknown.stderr

    b_export = (exported / "exports" / "B_1m.onnx").stat().st_mtime_ns
    # 60 new bars at the end of A's file: its model is updated from its previous weights.
    new_bars = synthetic_bars(TINY_ROWS + 60, seed=5).iloc[TINY_ROWS:]
    new_bars.to_csv(exported / "data" / "A_1m.csv", mode="a", header=False, index=False, float_format="%.6f")
    old_model = sha256(exported / "models" / "A_1m.pt")
    snakemake(exported)
    assert json.loads((exported / "metrics" / "A_1m.json").read_text())["made"] == "update 1"
    assert sha256(exported / "models" / "A_1m.pt") != old_model
    _, described, _ = rnnfleet(exported, "export", "--describe", "exports/A_1m.onnx")
    assert f"model_sha256: {sha256(exported / 'models' / 'A_1m.pt')}" in described
    assert (exported / "exports" / "B_1m.onnx").stat().st_mtime_ns == b_export


def test_the_command_exports_a_projects_models_and_one_bad_name_costs_itself_alone(exported):
    status, _, stderr = rnnfleet(exported, "export", "--out-dir", "mine")
    assert status == 0, stderr
    assert sorted(path.name for path in (exported / "mine").iterdir()) == ["A_1m.onnx", "B_1m.onnx"]
    status, _, stderr = rnnfleet(exported, "export", "B_1m", "C_1m", "--out-dir", "some")
    assert status == 1
    assert [path.name for path in (exported / "some").iterdir()] == ["B_1m.onnx"]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    # The line names the command as typed: export has no --dataset option.
    assert errors == ["error: rnnfleet export C_1m: no such dataset in . (2 found: A_1m, B_1m)"]


def test_the_command_never_writes_over_a_model_or_data_file(exported):
    before = sha256(exported / "models" / "B_1m.pt")
    given = ["--model", "models/A_1m.pt", "--csv", "data/A_1m.csv"]
    for out in ("models/B_1m.pt", "data/A_1m.csv", "models", "models/A_1m.onnx", "data/A_1m.onnx"):
        status, _, stderr = rnnfleet(exported, "export", *given, "--out", out)
        assert status == 1 and stderr.count("\n") == 1 and out in stderr
    assert sha256(exported / "models" / "B_1m.pt") == before
    status, _, stderr = rnnfleet(exported, "export", *given, "--out", "one/A.onnx")
    assert status == 0 and (exported / "one" / "A.onnx").exists(), stderr
    assert not (exported / "models" / "A_1m.onnx").exists() and not (exported / "data" / "A_1m.onnx").exists()


def test_without_onnx_rnnfleet_imports_and_runs_and_export_says_what_to_install(exported):
    """A fresh Python where onnx and onnxruntime cannot be imported: the rnnfleet command and
    its modules import, and the export refuses in one line naming what to install."""
    code = (
        "import sys; sys.modules['onnx'] = sys.modules['onnxruntime'] = None\n"
        "import rnnfleet.cli.commands, rnnfleet.forecast.predict, rnnfleet.forecast.export_onnx\n"
        "sys.exit(rnnfleet.cli.commands.main(['export', 'A_1m']))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "scripts")}
    result = subprocess.run([sys.executable, "-c", code], cwd=exported, capture_output=True, text=True, env=env)
    assert result.returncode == 1
    assert result.stderr.startswith("error: rnnfleet export needs onnx and onnxruntime")
    assert "requirements-onnx.txt" in result.stderr and result.stderr.count("\n") == 1


def example_forecast(folder, bars_file: str, without_rnnfleet: bool = False) -> tuple[float, float, str]:
    """(forecast, close, how the bars were read) of examples/onnx/forecast.py on exports/B_1m.onnx."""
    example = str(REPO / "examples" / "onnx" / "forecast.py")
    hide = "import runpy, sys; sys.modules['rnnfleet'] = None; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    command = [sys.executable, *(["-c", hide] if without_rnnfleet else []), example, "exports/B_1m.onnx", bars_file]
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run(command, cwd=folder, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if "1 bar(s) ahead:" in line)
    forecast, close = re.search(r"ahead: (\S+) \(close (\S+)\)", line).groups()
    return float(forecast), float(close), result.stdout.splitlines()[0]


def test_the_python_example_gives_rnnfleet_predicts_forecast_from_raw_bars_or_named_columns(exported):
    """examples/onnx/forecast.py (onnxruntime; no torch) on an exported file: the forecast
    rnnfleet predict makes at the last bar, from a raw headerless Binance file through
    rnnfleet's reader, and from a CSV with named columns where rnnfleet cannot be imported."""
    status, _, stderr = rnnfleet(exported, "predict", "--dataset", "B_1m", "--out", "b.csv", "--last", "1")
    assert status == 0, stderr
    wanted = pd.read_csv(exported / "b.csv")
    target_std = float(torch.load(exported / "models" / "B_1m.pt", weights_only=True)["normalisation"]["target_std"])
    bars = pd.read_csv(exported / "data" / "B_1m.csv")
    open_time = pd.to_datetime(bars["timestamp"]).astype("int64") // 10**6
    klines = pd.DataFrame(
        {"open_time": open_time, **{key: bars[key] for key in ("open", "high", "low", "close", "volume")}}
    )
    klines["close_time"], klines["quote"], klines["trades"] = open_time + 59_999, 1.0, 7
    klines["taker_base"], klines["taker_quote"], klines["ignore"] = 0.5, 0.5, 0
    klines.to_csv(exported / "B-1m-raw.csv", header=False, index=False)  # Binance's 12 columns, no header
    runs = {
        "raw Binance": (example_forecast(exported, "B-1m-raw.csv"), "rnnfleet's reader: "),
        "named columns": (
            example_forecast(exported, "data/B_1m.csv", without_rnnfleet=True),
            "a CSV with the header names open, high, low, close, volume",
        ),
    }
    for name, ((forecast, close, how), reader) in runs.items():
        assert how.startswith(f"bars read with {reader}"), (name, how)
        assert abs(forecast - wanted["forecast"].iloc[-1]) < 1e-5 * target_std, name
        assert close == pytest.approx(wanted["forecast_close"].iloc[-1], rel=1e-8), name


def test_the_export_bench_runs_end_to_end_and_reports_each_latency():
    """bench/bench_export.py at tiny sizes (no timing is asserted): every row of its table."""
    command = [sys.executable, str(REPO / "bench" / "bench_export.py"), "--rows", "400", "--batch", "8"]
    command += ["--reps", "1", "--command-reps", "1"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    for row in ("one window (in process)", "batch of 8 windows (in process)", "one forecast, a fresh process"):
        assert re.search(rf"{re.escape(row)} +[0-9.]+ ms +[0-9.]+ ms +[0-9.]+x", result.stdout), result.stdout


def test_models_fine_tuned_from_the_fleets_pretrained_model_export_and_match_predict(tmp_path):
    # train.init fleet: every dataset's model starts from the pretrain job's weights; its file is
    # the same kind of model file, and the export's own check compares it with rnnfleet predict
    add_datasets(tmp_path, DATASETS, rows=2 * TINY_ROWS)
    write_config(tmp_path, data_dir="data", train={"init": "fleet"}, export={"onnx": True})
    snakemake(tmp_path)
    for name in DATASETS:
        model = torch.load(tmp_path / "models" / f"{name}.pt", map_location="cpu", weights_only=True)
        assert model["lineage"]["init"]["from"] == "fleet", model["lineage"]["init"]
        log = (tmp_path / "logs" / "export" / f"{name}.log").read_text()
        assert "checked with ONNX Runtime" in log and "against rnnfleet predict" in log
        _, described, _ = rnnfleet(tmp_path, "export", "--describe", f"exports/{name}.onnx")
        assert f"model_sha256: {sha256(tmp_path / 'models' / f'{name}.pt')}" in described


def test_a_removed_datasets_outputs_are_skipped_by_export_listed_by_clean_and_set_aside_with_remove(exported, tmp_path):
    folder = tmp_path / "project"
    shutil.copytree(exported, folder, symlinks=True)
    (folder / "data" / "B_1m.csv").unlink()  # the user removed a dataset's file
    b_outputs = ["exports/B_1m.onnx", "metrics/B_1m.json", "models/B_1m.pt", "prep/B_1m.npz"]
    assert all((folder / path).is_file() for path in b_outputs)

    status, _, err = rnnfleet(folder, "export")
    assert status == 0, err  # the fleet's export is not failed by what no dataset owns
    assert err.count("models/B_1m.pt: no dataset owns it any more") == 1
    assert (folder / "exports" / "A_1m.onnx").is_file()

    def clean(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "rnnfleet.cli", "clean", "--project", str(folder), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    listed = clean()
    assert listed.returncode == 0, listed.stderr
    (line,) = [line for line in listed.stdout.splitlines() if line.startswith("B_1m:")]
    assert all(path in line for path in b_outputs) and "A_1m" not in listed.stdout
    assert all((folder / path).is_file() for path in b_outputs)  # listing moves nothing

    removed = clean("--remove")
    assert removed.returncode == 0, removed.stderr
    (aside,) = (folder / ".snakemake" / "rnnfleet-unowned").iterdir()
    for path in b_outputs:
        assert not (folder / path).exists() and (aside / path).is_file()  # moved, never deleted
    assert (folder / "models" / "A_1m.pt").is_file()
    assert "nothing to clean" in clean().stdout
    planned = planned_rules(snakemake(folder, "-n").stdout)  # the table drops B; nothing is trained again
    assert not {"preprocess", "train", "export_onnx"} & set(planned), planned
