"""The fleet's history in MLflow (tracking.mlflow), through the real snakemake and the real
mlflow package: each run that trains is one MLflow run whose parameters, fleet metrics and
table match the run's results; per-dataset child runs hold each dataset's scores and loss
curves; the MLflow server lists the runs; a store that cannot be written costs one warning."""

from __future__ import annotations

import csv
import json
import math
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import add_datasets, copy_of_run, snakemake, write_config

pytest.importorskip("mlflow", reason="requirements-mlflow.txt (in requirements-dev.txt) is not installed")
from mlflow.tracking import MlflowClient  # noqa: E402

pytestmark = pytest.mark.long  # minutes: started first (tests/conftest.py)

DATASETS = ["A_1m", "B_1m"]
TRACKING = {"mlflow": {"enabled": True, "per_dataset_runs": True}}


def table(workdir: Path) -> dict[str, dict]:
    with open(workdir / "results" / "metrics.csv") as handle:
        return {row["dataset"]: row for row in csv.DictReader(handle)}


@pytest.fixture(scope="module")
def tracked(tmp_path_factory) -> Path:
    """Two runs with tracking on: the first trains every dataset, the second (another
    train.lr) trains them again."""
    workdir = tmp_path_factory.mktemp("tracked")
    add_datasets(workdir, DATASETS)
    write_config(workdir, data_dir="data", tracking=TRACKING)
    snakemake(workdir)
    (workdir / "first_table.csv").write_bytes((workdir / "results" / "metrics.csv").read_bytes())
    write_config(workdir, data_dir="data", tracking=TRACKING, train={"lr": 0.002})
    snakemake(workdir)
    return workdir


@pytest.fixture(scope="module")
def server_port(tmp_path_factory) -> Iterator[tuple[int, Path]]:
    """An MLflow server on localhost over a store a tracked run writes while the server comes
    up (it takes seconds), and that store's folder. The store is made first: two processes
    creating one SQLite store at once would race through its migrations."""
    folder = tmp_path_factory.mktemp("served")
    port = free_port()
    store = f"sqlite:///{folder / 'mlruns.db'}"
    MlflowClient(tracking_uri=store).search_experiments()
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store, "--host", "127.0.0.1", "-w", "1"]
    server = subprocess.Popen([*command, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield port, folder
    finally:
        server.terminate()
        server.wait(timeout=30)


def client_of(workdir: Path, experiment_name: str = "") -> tuple[MlflowClient, list]:
    """The client of the folder's store and the fleet runs (not the datasets') of the
    experiment (default: named after the folder), oldest first."""
    client = MlflowClient(tracking_uri=f"sqlite:///{workdir / 'mlruns.db'}")
    experiment = client.get_experiment_by_name(experiment_name or workdir.name)
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    return client, [run for run in runs if "mlflow.parentRunId" not in run.data.tags]


def test_each_run_that_trains_is_one_mlflow_run_with_the_runs_settings_and_table(tracked, tmp_path):
    client, runs = client_of(tracked)
    assert len(runs) == 2
    first, second = runs
    assert first.data.params["train.lr"] != second.data.params["train.lr"] == "0.002"
    assert second.data.params["tracking.mlflow.enabled"] == "true" and second.data.params["data_dir"] == "data"
    for run, table_file in ((first, tracked / "first_table.csv"), (second, tracked / "results" / "metrics.csv")):
        rows = list(csv.DictReader(table_file.open()))
        metrics = run.data.metrics
        assert (metrics["datasets"], metrics["trained_from_scratch"], metrics["not_done"]) == (2, 2, 0)
        skills = [float(row["test_skill"]) for row in rows]
        assert metrics["test_skill_mean"] == pytest.approx(statistics.mean(skills))
        assert metrics["test_skill_max"] == pytest.approx(max(skills))
        assert metrics["beats_baseline"] == sum(row["test_verdict"] == "beats the baseline" for row in rows)
        assert run.info.status == "FINISHED" and run.data.tags["rnnfleet.outcome"] == "success"
        # MLflow's UI opens the experiment on its runs (model training), not on its GenAI view.
        kind = client.get_experiment(run.info.experiment_id).tags["mlflow.experimentKind"]
        assert kind == "custom_model_development"
        logged = Path(client.download_artifacts(run.info.run_id, "metrics.csv", str(tmp_path / run.info.run_id)))
        assert logged.read_bytes() == table_file.read_bytes()  # the table of that run, one row a dataset
        artifacts = {artifact.path for artifact in client.list_artifacts(run.info.run_id)}
        assert {"metrics.csv", "forecasts.csv", "metrics.html", "skill.png"} <= artifacts


def test_each_dataset_has_a_child_run_with_its_scores_and_loss_curves(tracked):
    client, runs = client_of(tracked)
    rows = table(tracked)
    children = client.search_runs(
        [runs[-1].info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{runs[-1].info.run_id}'"
    )
    assert sorted(child.info.run_name for child in children) == DATASETS
    for child in children:
        dataset = child.info.run_name
        row, params, metrics = rows[dataset], child.data.params, child.data.metrics
        assert metrics["test_skill"] == pytest.approx(float(row["test_skill"]))
        assert params["made"] == "full" and params["status"] == "ok"
        # The words of the row are parameters, never NaN metrics; every filled cell is one or the other.
        assert params["test_verdict"] == row["test_verdict"] and params["fleet_verdict"] == row["fleet_verdict"]
        assert params["median_step"] == row["median_step"] and params["fleet_correction"] == row["fleet_correction"]
        assert all(math.isfinite(value) for value in metrics.values()), metrics
        filled = {key for key, value in row.items() if value and value != "nan" and key != "dataset"}
        assert filled == set(params) | set(metrics) - {"epoch_train_loss", "epoch_val_loss"}
        history = json.loads((tracked / "metrics" / f"{dataset}.json").read_text())["history"]
        curve = client.get_metric_history(child.info.run_id, "epoch_val_loss")
        assert [point.step for point in curve] == [entry["epoch"] for entry in history]
        assert [point.value for point in curve] == pytest.approx([entry["val_loss"] for entry in history])


def test_changing_tracking_re_trains_nothing_and_a_run_that_trains_nothing_logs_nothing(tracked, tmp_path):
    workdir = copy_of_run(tracked, tmp_path)  # the same store, another folder name: name the experiment
    tracking = {"mlflow": {"enabled": True, "experiment": tracked.name}}
    write_config(workdir, data_dir="data", tracking=tracking, train={"lr": 0.002})
    assert "Nothing to be done" in snakemake(workdir, "-n").stdout
    snakemake(workdir)
    assert len(client_of(workdir, tracked.name)[1]) == 2


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_mlflow_server_lists_the_fleets_runs(server_port):
    port, folder = server_port
    add_datasets(folder, DATASETS)
    write_config(folder, data_dir="data", tracking=TRACKING)
    snakemake(folder)
    experiment = client_of(folder)[1][0].info.experiment_id
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/2.0/mlflow/runs/search",
        data=json.dumps({"experiment_ids": [experiment], "max_results": 100}).encode(),
        headers={"Content-Type": "application/json"},
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                found = json.load(response)["runs"]
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    names = sorted(run["info"]["run_name"] for run in found)
    assert names[1:] == DATASETS and names[0].startswith("20")  # the fleet's run (its start), its datasets' runs


def test_a_store_that_cannot_be_written_is_one_warning_and_the_fleet_trains(tracked, tmp_path):
    """Tracking turned on from the command line (--config hands its values over as text)."""
    workdir = copy_of_run(tracked, tmp_path)
    (workdir / "not_a_folder").write_text("a file, where the store's folder would be\n")
    write_config(workdir, data_dir="data", train={"lr": 0.003})  # tracking as the repo's config.yaml: off
    broken = f"sqlite:///{workdir / 'not_a_folder' / 'runs.db'}"
    result = snakemake(workdir, "--config", f"tracking={{mlflow: {{enabled: true, tracking_uri: '{broken}'}}}}")
    warnings = [line for line in result.stderr.splitlines() if "MLflow tracking" in line]
    assert len(warnings) == 1 and warnings[0].startswith(f"rnnfleet: WARNING: MLflow tracking ({broken}): ")
    assert "not logged" in warnings[0] and "Traceback" not in result.stderr
    assert {row["status"] for row in table(workdir).values()} == {"ok"}
    assert table(workdir)["A_1m"]["test_skill"] != table(tracked)["A_1m"]["test_skill"]  # trained again
