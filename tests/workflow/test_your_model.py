"""Your own model, features and target through the real snakemake: the examples/ files train,
re-train only when they change, reload with weights_only=True and forecast."""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import REPO, add_datasets, copy_of_run, pending_jobs, snakemake, write_config

from rnnfleet.errors import last_marked_line
from rnnfleet.forecast.predict import forecast_columns
from rnnfleet.train.models import load_model

pytestmark = pytest.mark.long  # minutes: started first (tests/conftest.py)

DATASETS = ["EURUSD_1m", "SPY_1m"]
FORECAST_BARS = 5
# What a run needs besides an example's own config (as --config, after it).
RUN_SETTINGS = [
    "data_dir=data",
    'train={"seq_len": 16, "batch_size": 64, "epochs": 2, "patience": 2}',
    f'predict={{"datasets": "all", "last": {FORECAST_BARS}}}',
]


def folder_with_examples(folder: Path) -> Path:
    """A working folder holding the datasets and a copy of examples/ (as a user's would)."""
    add_datasets(folder, DATASETS)
    shutil.copytree(REPO / "examples", folder / "examples")
    return folder


def edit(path: Path) -> None:
    """Change a file the way a user does: new content, newer modification time."""
    path.write_text(path.read_text() + "\n# edited\n")
    later = time.time() + 5
    os.utime(path, (later, later))


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def forecast_in(folder: Path, model_path: str, *extra: str, out: str = "forecast.csv") -> subprocess.CompletedProcess:
    """python -m rnnfleet.cli.predict run in `folder` (the user's project folder) on its first dataset."""
    command = [
        sys.executable,
        "-m",
        "rnnfleet.cli.predict",
        "--model",
        model_path,
        "--csv",
        f"data/{DATASETS[0]}.csv",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO / "scripts")}
    return subprocess.run(
        [*command, "--out", out, "--last", "2", *extra], cwd=folder, capture_output=True, text=True, env=env
    )


def read_summary(folder: Path) -> dict[str, dict[str, str]]:
    with open(folder / "results" / "metrics.csv") as handle:
        return {row["dataset"]: row for row in csv.DictReader(handle)}


# --- your model -----------------------------------------------------------------------

MODEL_ARGS = ["--configfile", "examples/tcn_gru.yaml", "--replace-workflow-config", "--config", *RUN_SETTINGS]


@pytest.fixture(scope="module")
def model_run(tmp_path_factory) -> Path:
    folder = folder_with_examples(tmp_path_factory.mktemp("your_model"))
    snakemake(folder, *MODEL_ARGS)
    return folder


@pytest.fixture
def model_run_copy(model_run, tmp_path) -> Path:
    copy = copy_of_run(model_run, tmp_path)
    return copy


def test_your_model_trains_saves_and_reloads_with_weights_only(model_run, monkeypatch):
    monkeypatch.chdir(model_run)  # the builder's path is relative to the working folder
    for dataset in DATASETS:
        model_path = model_run / "models" / f"{dataset}.pt"
        raw = torch.load(model_path, weights_only=True)
        assert raw["model_config"] == {
            "builder": "examples/tcn_gru.py:build",
            "channels": 16,
            "kernel_size": 3,
            "hidden_size": 32,
            "input_size": 5,
        }
        assert raw["plugin_sha256"] == {"examples/tcn_gru.py": sha256_file(model_run / "examples" / "tcn_gru.py")}
        model, _ = load_model(model_path)
        assert type(model).__name__ == "ConvGRU"  # rebuilt by the example's builder, not the built-in RNN
        assert any(key.startswith("conv.") for key in raw["state_dict"])
    summary = read_summary(model_run)
    assert {row["model"] for row in summary.values()} == {"examples/tcn_gru.py:build"}
    assert all(row["status"] == "ok" and np.isfinite(float(row["val_skill"])) for row in summary.values())


def test_your_model_forecasts(model_run):
    for dataset in DATASETS:
        forecasts = pd.read_csv(model_run / "predictions" / f"{dataset}.csv")
        intervals = ("coverage", "forecast_low", "forecast_high", "forecast_close_low", "forecast_close_high")
        assert tuple(forecasts.columns) == (*forecast_columns("log_return"), *intervals)
        assert len(forecasts) == FORECAST_BARS
        assert np.isfinite(forecasts["forecast"]).all()


def test_editing_your_model_file_retrains_what_uses_it_and_rnnfleet_code_does_not(model_run_copy):
    for package_file in ("train/models.py", "train/loop.py"):
        os.utime(REPO / "scripts" / "rnnfleet" / package_file)  # rnnfleet's own code is not an input
    assert pending_jobs(snakemake(model_run_copy, "-n", *MODEL_ARGS).stdout, "train") == {}
    edit(model_run_copy / "examples" / "tcn_gru.py")
    dry = snakemake(model_run_copy, "-n", *MODEL_ARGS).stdout
    pending = pending_jobs(dry, "train")
    assert set(pending) == set(DATASETS)
    assert all("examples/tcn_gru.py" in reason for reason in pending.values())
    assert pending_jobs(dry, "preprocess") == {}  # the arrays do not depend on the model


def test_a_builder_returning_the_wrong_shape_fails_each_dataset_with_one_line(tmp_path):
    add_datasets(tmp_path, DATASETS)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "bad.py").write_text(
        "import torch\n\ndef build(input_size, width):\n    return torch.nn.Linear(input_size, width)\n"
    )
    (tmp_path / "bad.yaml").write_text("model:\n  builder: mine/bad.py:build\n  width: 3\n")
    args = ["--configfile", "bad.yaml", "--replace-workflow-config", "--config", *RUN_SETTINGS]
    result = snakemake(tmp_path, *args, check=False)
    assert result.returncode != 0
    for dataset in DATASETS:
        log_path = tmp_path / "logs" / "train" / f"{dataset}.log"
        assert "Traceback" not in log_path.read_text()
        assert last_marked_line(log_path).startswith(
            "ERROR: mine/bad.py: function build: the model maps a batch of shape (2, 16, 5) to (2, 16, 3)"
        )
    summary = read_summary(tmp_path)
    assert {row["status"] for row in summary.values()} == {"failed"}
    assert all("mine/bad.py: function build" in row["error"] for row in summary.values())


# --- your features --------------------------------------------------------------------

FEATURE_ARGS = ["--configfile", "examples/momentum_features.yaml"]


@pytest.fixture(scope="module")
def features_run(tmp_path_factory) -> Path:
    folder = folder_with_examples(tmp_path_factory.mktemp("your_features"))
    write_config(folder, data_dir="data", predict={"datasets": "all", "last": FORECAST_BARS})
    snakemake(folder, *FEATURE_ARGS)
    return folder


def test_your_features_are_recorded_in_the_model_file_and_used_for_forecasts(features_run, monkeypatch):
    monkeypatch.chdir(features_run)
    definition = ["ohlc_returns", "log_volume", "time_of_day", "examples/momentum_features.py:momentum"]
    for dataset in DATASETS:
        model_path = features_run / "models" / f"{dataset}.pt"
        raw = torch.load(model_path, weights_only=True)
        assert raw["features"]["definition"] == definition
        feature_file = features_run / "examples" / "momentum_features.py"
        assert raw["plugin_sha256"] == {"examples/momentum_features.py": sha256_file(feature_file)}
        assert raw["features"]["names"][-3:] == [f"{definition[-1]}[{column}]" for column in range(3)]
        assert raw["features"]["warmup"] == 15  # the 15-bar return needs 15 earlier bars
        assert raw["model_config"]["input_size"] == 4 + 1 + 2 + 3
        model, checkpoint = load_model(model_path)
        forecasts = pd.read_csv(features_run / "predictions" / f"{dataset}.csv")
        assert len(forecasts) == FORECAST_BARS and np.isfinite(forecasts["forecast"]).all()
    summary = read_summary(features_run)
    assert {row["features"] for row in summary.values()} == {" + ".join(definition)}


def test_editing_your_feature_file_reprocesses_and_retrains(features_run, tmp_path):
    copy = copy_of_run(features_run, tmp_path)
    assert "Nothing to be done" in (result := snakemake(copy, "-n", *FEATURE_ARGS)).stdout + result.stderr
    edit(copy / "examples" / "momentum_features.py")
    dry = snakemake(copy, "-n", *FEATURE_ARGS).stdout
    assert set(pending_jobs(dry, "preprocess")) == set(DATASETS)
    assert set(pending_jobs(dry, "train")) == set(DATASETS)


# --- a model file runs only the code you trust -----------------------------------------

MODEL_FILE = f"models/{DATASETS[0]}.pt"


@pytest.mark.parametrize("run", ["model_run", "features_run"])
def test_a_model_trained_in_the_folder_forecasts_with_its_own_plugin_without_flags(request, run, tmp_path):
    forecast = forecast_in(request.getfixturevalue(run), MODEL_FILE, out=str(tmp_path / "forecast.csv"))
    assert forecast.returncode == 0, forecast.stderr
    assert "refused" not in forecast.stderr and len(pd.read_csv(tmp_path / "forecast.csv")) == 2


def plant_outside(folder: Path, kind: str, marker: Path) -> Path:
    """A plug-in file outside the project folder `folder` that creates `marker` when imported
    and otherwise does what the real one does (so that, trusted, it forecasts)."""
    planted = folder.parent / "elsewhere" / "evil.py"
    planted.parent.mkdir(exist_ok=True)
    real = "import numpy as np\ndef log_volume(bars):\n    return np.log1p(bars['volume'].to_numpy(dtype=float))\n"
    if kind == "builder":
        real = (folder / "examples" / "tcn_gru.py").read_text()
    planted.write_text(f"open({str(marker)!r}, 'w').close()\n{real}")
    return planted


def craft(model_path: Path, **changes) -> None:
    """Rewrite a model file as someone else could: each entry changed by a function of its
    value, or removed (None)."""
    checkpoint = torch.load(model_path, weights_only=True)
    for key, change in changes.items():
        if change is None:
            del checkpoint[key]
        else:
            checkpoint[key] = change(checkpoint[key])
    model_path.unlink()
    torch.save(checkpoint, model_path)


def name_outside_plugin(folder: Path, kind: str, planted: Path) -> None:
    """The folder's first model file, crafted to name `planted` as its builder or a feature,
    with that file's true hash recorded beside it (the most a crafted file can do)."""
    if kind == "builder":
        changes = {"model_config": lambda config: {**config, "builder": f"{planted}:build"}}
    else:
        changes = {"features": lambda features: {**features, "definition": ["ohlc_returns", f"{planted}:log_volume"]}}
    changes["plugin_sha256"] = lambda recorded: {**recorded, str(planted): sha256_file(planted)}
    craft(folder / MODEL_FILE, **changes)


def assert_refused(stderr: str, plugin: Path | str, reason: str) -> None:
    line = stderr.strip()
    assert "\n" not in line and "Traceback" not in line, stderr
    assert f"{MODEL_FILE}: refused to import plug-in file {plugin}: {reason}" in line
    assert (
        f"nothing was imported. If you trust that file, name it: python -m rnnfleet.cli.predict --trust {plugin}"
        in line
    )


@pytest.mark.parametrize("kind", ["builder", "feature"])
def test_a_model_file_naming_a_plugin_outside_the_folder_imports_nothing_until_trusted(model_run_copy, kind):
    marker = model_run_copy.parent / f"{kind}-code-ran"
    planted = plant_outside(model_run_copy, kind, marker)
    name_outside_plugin(model_run_copy, kind, planted)

    refused = forecast_in(model_run_copy, MODEL_FILE)
    assert refused.returncode == 1
    assert_refused(refused.stderr, planted, f"it lies outside the project folder {model_run_copy.resolve()}")
    assert not marker.exists() and not (model_run_copy / "forecast.csv").exists()

    # Named by the user, the same file runs (so the refusal above is what kept it from running).
    trusted = forecast_in(model_run_copy, MODEL_FILE, "--trust", str(planted))
    assert trusted.returncode == 0, trusted.stderr
    assert marker.exists() and len(pd.read_csv(model_run_copy / "forecast.csv")) == 2


@pytest.mark.parametrize("kind", ["builder", "feature"])
def test_the_workflows_predict_rule_imports_nothing_a_model_file_names_outside_the_folder(model_run_copy, kind):
    marker = model_run_copy.parent / f"{kind}-code-ran"
    planted = plant_outside(model_run_copy, kind, marker)
    name_outside_plugin(model_run_copy, kind, planted)
    log_path = model_run_copy / "logs" / "predict" / f"{DATASETS[0]}.log"
    log_path.unlink()
    result = snakemake(model_run_copy, f"predictions/{DATASETS[0]}.csv", *MODEL_ARGS, check=False)
    assert result.returncode != 0 and not marker.exists()
    assert_refused(last_marked_line(log_path).removeprefix("ERROR: "), planted, "it lies outside the project folder")
    assert str(planted) in str(torch.load(model_run_copy / MODEL_FILE, weights_only=True))  # not re-trained


def test_a_plugin_in_the_folder_changed_since_training_is_refused_until_trusted(model_run_copy):
    marker = model_run_copy / "changed-code-ran"
    builder = model_run_copy / "examples" / "tcn_gru.py"
    builder.write_text(f"open({str(marker)!r}, 'w').close()\n{builder.read_text()}")
    refused = forecast_in(model_run_copy, MODEL_FILE)
    assert refused.returncode == 1
    assert_refused(refused.stderr, "examples/tcn_gru.py", "its content is not what the model was trained with")
    assert not marker.exists()
    trusted = forecast_in(model_run_copy, MODEL_FILE, "--trust", "examples/tcn_gru.py")
    assert trusted.returncode == 0, trusted.stderr
    assert marker.exists()


def test_a_model_file_without_recorded_hashes_forecasts_where_the_config_names_its_plugin(model_run_copy):
    craft(model_run_copy / MODEL_FILE, plugin_sha256=None)  # as rnnfleet wrote them before it recorded hashes
    refused = forecast_in(model_run_copy, MODEL_FILE)
    assert refused.returncode == 1
    assert_refused(refused.stderr, "examples/tcn_gru.py", "the model file records no content hash for it")
    predictions = model_run_copy / "predictions" / f"{DATASETS[0]}.csv"
    before = predictions.stat().st_mtime_ns
    snakemake(model_run_copy, predictions.relative_to(model_run_copy).as_posix(), *MODEL_ARGS)
    assert predictions.stat().st_mtime_ns > before and len(pd.read_csv(predictions)) == FORECAST_BARS
    assert "plugin_sha256" not in torch.load(model_run_copy / MODEL_FILE, weights_only=True)  # not re-trained


# --- your target ----------------------------------------------------------------------

TARGET_CASES = {
    "abs_log_return": ("training mean", "MSE (scaled)"),
    "realised_volatility": ("training mean", "MSE (scaled)"),
    "direction": ("training share of up moves", "log loss"),
}


def test_each_target_trains_reports_its_baseline_and_forecasts_in_its_units(tmp_path):
    # One run: a datasets sheet gives each dataset one of the targets.
    names = {target: f"{target.upper().replace('_', '')}_1m" for target in TARGET_CASES}
    add_datasets(tmp_path, list(names.values()))
    sheet = ["dataset\tfiles\ttarget", *(f"{name}\t{name}.csv\t{target}" for target, name in names.items())]
    (tmp_path / "datasets.tsv").write_text("\n".join(sheet) + "\n")
    write_config(
        tmp_path,
        data_dir="data",
        datasets={"sheet": "datasets.tsv"},
        predict={"datasets": "all", "last": FORECAST_BARS},
    )
    snakemake(tmp_path)
    summary = read_summary(tmp_path)
    table_html = (tmp_path / "results" / "metrics.html").read_text()
    for target, name in names.items():
        baseline, loss = TARGET_CASES[target]
        row = summary[name]
        assert (row["target"], row["baseline"], row["loss"]) == (f"{target} over 1 bar(s)", baseline, loss)
        assert float(row["naive_val_loss"]) > 0 and np.isfinite(float(row["val_skill"]))
        assert (row["val_accuracy"] != "") == (target == "direction")
        forecasts = pd.read_csv(tmp_path / "predictions" / f"{name}.csv")
        intervals = () if target == "direction" else ("coverage", "forecast_low", "forecast_high")
        assert tuple(forecasts.columns) == ("time", "close", "horizon", "target", "forecast", *intervals)
        assert set(forecasts["target"]) == {target}  # the units of forecast
        if intervals:  # an |return| or a volatility: the interval never reaches below 0
            assert (forecasts["forecast_low"] >= 0).all()
            assert (forecasts["forecast_low"] <= forecasts["forecast"]).all()
        values = forecasts["forecast"]
        if target == "direction":
            assert values.between(0, 1).all()  # a probability, not a logit
        else:  # back in log-return units: the size of a 1-minute move, not a standardised score
            typical = np.abs(np.diff(np.log(pd.read_csv(tmp_path / "data" / f"{name}.csv")["close"]))).mean()
            assert values.abs().median() < 20 * typical
        assert baseline in table_html and target in table_html


def test_the_report_names_your_model(model_run_copy):
    snakemake(model_run_copy, "--report", "report.html", *MODEL_ARGS)
    text = (model_run_copy / "report.html").read_text()
    assert "built by <tt" in text and "examples/tcn_gru.py:build" in text


def test_a_broken_model_file_stops_the_run_before_any_model_is_removed(model_run_copy):
    model_file = model_run_copy / "examples" / "tcn_gru.py"
    model_file.write_text(model_file.read_text().replace("def build(", "def build(("))  # a syntax error
    models_before = {path.name: path.stat().st_mtime_ns for path in (model_run_copy / "models").glob("*.pt")}
    result = snakemake(model_run_copy, *MODEL_ARGS, check=False)
    assert result.returncode != 0
    assert "examples/tcn_gru.py: importing it failed (SyntaxError" in result.stderr
    assert "nothing was run" in result.stderr
    after = {path.name: path.stat().st_mtime_ns for path in (model_run_copy / "models").glob("*.pt")}
    assert after == models_before and len(after) == len(DATASETS)
