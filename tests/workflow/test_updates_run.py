"""New bars update a model from its previous weights instead of training it from scratch
(the real snakemake): a dataset of day files gains a day, a single file grows; a changed
setting, a changed earlier bar and update.full_every train from scratch; a killed update
keeps the previous model."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import (
    copy_of_run,
    kill_hard,
    pending_jobs,
    snakemake,
    start_paused_run,
    summary_by_dataset,
    write_config,
)

from rnnfleet.forecast.predict import forecast_csv
from rnnfleet.prep.arrays_file import ARRAYS_FORMAT, load_arrays
from rnnfleet.prep.prepare import DataError
from rnnfleet.prep.targets import TARGETS
from rnnfleet.synthetic import synthetic_bars
from rnnfleet.train.loop import AMP_DTYPES, evaluate_windows, usable_windows, window_view
from rnnfleet.train.models import load_model
from rnnfleet.train.updating import with_normalisation

pytestmark = pytest.mark.long  # minutes: started first (tests/conftest.py)

DAY = 400  # bars of one "day" file
DAYS = 3
GROWING_ROWS = 800  # the single-file dataset's bars before it grows by DAY
# Tiny models' skills are noise: no update is discarded for its skill here (tests/unit/test_updating.py).
UPDATE_SETTINGS = {"recent_bars": 100, "max_skill_drop": 100}


@pytest.fixture(scope="module")
def bars() -> dict[str, pd.DataFrame]:
    """The whole history of each dataset; the runs see a prefix of it."""
    return {"DAYS": synthetic_bars(DAY * (DAYS + 1), 21), "GROWING": synthetic_bars(GROWING_ROWS + 2 * DAY, 22)}


def write_bars(workdir: Path, bars: dict[str, pd.DataFrame], days: int, growing_rows: int) -> None:
    """DAYS as `days` day files (data/DAYS-1m-<day>.csv), GROWING as one file of growing_rows bars."""
    data = workdir / "data"
    data.mkdir(exist_ok=True)
    for day in range(days):
        part = bars["DAYS"].iloc[day * DAY : (day + 1) * DAY]
        part.to_csv(data / f"DAYS-1m-{day:02d}.csv", index=False, float_format="%.6f")
    bars["GROWING"].iloc[:growing_rows].to_csv(data / "GROWING-1m-all.csv", index=False, float_format="%.6f")


@pytest.fixture(scope="module")
def trained(tmp_path_factory, bars) -> Path:
    workdir = tmp_path_factory.mktemp("trained")
    write_bars(workdir, bars, DAYS, GROWING_ROWS)
    write_config(workdir, data_dir="data", datasets={"files": "{dataset}-1m-*"}, update=UPDATE_SETTINGS)
    snakemake(workdir)
    return workdir


@pytest.fixture
def run(trained, tmp_path) -> Path:
    copy = copy_of_run(trained, tmp_path)
    return copy


def appended(workdir: Path, bars) -> None:
    write_bars(workdir, bars, DAYS + 1, GROWING_ROWS + DAY)


def metrics(workdir: Path, dataset: str) -> dict:
    return json.loads((workdir / "metrics" / f"{dataset}.json").read_text())


def train_log(workdir: Path, dataset: str) -> str:
    return (workdir / "logs" / "train" / f"{dataset}.log").read_text()


def planned_lines(result) -> list[str]:
    """The lines of the dry-run's block on models trained before."""
    lines = (result.stdout + result.stderr).splitlines()
    start = next(index for index, line in enumerate(lines) if "model(s) trained before will be replaced" in line)
    block = []
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            return block
        block.append(line.strip())
    return block


def start_val_loss(model_path: Path, arrays_path: Path, amp: str) -> float:
    """The validation loss of the model file's weights on the new arrays, normalised as the model was,
    in the precision `amp` the job recorded (bf16 where the CPU computes it natively, else float32)."""
    model, checkpoint = load_model(model_path)
    arrays = with_normalisation(load_arrays(arrays_path), checkpoint["normalisation"])
    seq_len = checkpoint["features"]["seq_len"]
    windows = window_view(torch.from_numpy(arrays.features), seq_len)
    targets = torch.from_numpy(arrays.targets)[seq_len - 1 :]
    val = torch.from_numpy(usable_windows(arrays, seq_len).val)
    return evaluate_windows(model, windows, targets, AMP_DTYPES[amp], TARGETS[arrays.target], val)[0]


def test_new_bars_update_each_model_from_its_previous_weights(run, bars):
    first = {dataset: metrics(run, dataset) for dataset in ("DAYS", "GROWING")}
    previous = {dataset: run / "models" / f"{dataset}.pt" for dataset in first}
    kept = run.parent / "kept"
    kept.mkdir()
    for path in previous.values():
        shutil.copy(path, kept / path.name)
    assert {m["made"] for m in first.values()} == {"full"}
    appended(run, bars)

    dry_run = snakemake(run, "-n")
    assert planned_lines(dry_run) == ["update: new bars/new files: 2 (datasets: DAYS, GROWING)"]

    snakemake(run)

    for dataset in ("DAYS", "GROWING"):
        after = metrics(run, dataset)
        assert after["made"] == "update 1" and after["made_reason"] == f"update: {DAY} new bars"
        assert f"{dataset}: update: {DAY} new bars" in train_log(run, dataset)
        assert "epoch   0  val_loss" in train_log(run, dataset)
        assert after["rows"] == first[dataset]["rows"] + DAY and after["new_rows"] == DAY
        # The update started from the previous model: its epoch 0 is that model on the new
        # validation windows, far from what a fresh model gives.
        expected = start_val_loss(kept / f"{dataset}.pt", run / "prep" / f"{dataset}.npz", after["amp"])
        assert after["update_start_val_loss"] == pytest.approx(expected, rel=1e-5)
        assert after["lineage"]["updates"] == 1 and after["lineage"]["full_fit"]["rows"] == first[dataset]["rows"]
        assert [entry["made"] for entry in after["lineage"]["history"]] == ["full", "update"]
        # Fewer windows than a full fit: the new training windows and update.recent_bars before them.
        assert after["update_train_windows"] < after["train_windows"]
        # Its inputs keep their meaning: the normalisation is the first fit's.
        _, old = load_model(kept / f"{dataset}.pt")
        _, new = load_model(previous[dataset])
        assert new["normalisation"] == old["normalisation"]
        assert new["lineage"]["updates"] == 1 and "optimizer_state" in new
        # Its forecast intervals are calibrated anew, on the updated model's validation errors.
        assert len(new["calibration"]["scores"]) == after["calibration_windows"] == after["val_windows"]
        assert not np.array_equal(new["calibration"]["scores"].numpy(), old["calibration"]["scores"].numpy())
    assert {row["made"] for row in summary_by_dataset(run).values()} == {"update 1"}

    # The fleet's forecast of the day-file dataset is what `rnnfleet predict` gives from the
    # dataset's name in the folder (its own files), and from its last two day files alone.
    (written,) = pd.read_csv(run / "results" / "forecasts.csv").query("dataset == 'DAYS'").to_dict("records")
    last_two = [f"data/DAYS-1m-{day:02d}.csv" for day in (DAYS - 1, DAYS)]
    for given in (["--dataset", "DAYS"], ["--model", "models/DAYS.pt", "--csv", *last_two]):
        command = [sys.executable, "-m", "rnnfleet.cli", "predict", *given, "--out", "one.csv", "--last", "1"]
        subprocess.run(command, cwd=run, check=True, capture_output=True)
        (predicted,) = pd.read_csv(run / "one.csv").to_dict("records")
        assert pd.Timestamp(predicted["time"]) == pd.Timestamp(written["time"]), given
        assert predicted["forecast"] == pytest.approx(written["forecast"], rel=1e-6, abs=1e-12), given

    # The updated model forecasts.
    forecast_csv(previous["GROWING"], run / "data/GROWING-1m-all.csv", run / "forecasts.csv", last=5)
    forecasts = pd.read_csv(run / "forecasts.csv")
    assert len(forecasts) == 5 and forecasts["forecast_close"].notna().all()


# The target of runs whose test reads DAYS's files alone (metrics, logs): its jobs, not
# GROWING's, the table's or the figures'.
DAYS_MODEL = "models/DAYS.pt"


def preprocess_log(workdir: Path, dataset: str) -> str:
    return (workdir / "logs" / "preprocess" / f"{dataset}.log").read_text()


def assert_arrays_of_a_full_preprocess(workdir: Path, dataset: str, tmp_path: Path) -> None:
    """The dataset's array file holds, member by member, what a preprocess of every file gives
    (the real workflow in a copy of the folder without its arrays and bars cache)."""
    full = tmp_path / "full"
    shutil.copytree(workdir, full, symlinks=True)
    shutil.rmtree(full / "prep")
    snakemake(full, f"prep/{dataset}.npz")
    files = len(list((workdir / "data").glob(f"{dataset}-1m-*")))
    assert f"{files} file(s) read" in preprocess_log(full, dataset), "the copy read every file"
    with np.load(workdir / "prep" / f"{dataset}.npz") as made, np.load(full / "prep" / f"{dataset}.npz") as every:
        assert made.files == every.files
        for member in every.files:
            np.testing.assert_array_equal(made[member], every[member], err_msg=member, strict=True)


def test_a_new_day_file_is_the_only_file_read_its_rows_appended_and_the_arrays_are_those_of_reading_every_file(
    run, bars, tmp_path
):
    part = bars["DAYS"].iloc[DAYS * DAY : (DAYS + 1) * DAY]  # the morning's file; the others untouched
    part.to_csv(run / "data" / f"DAYS-1m-{DAYS:02d}.csv", index=False, float_format="%.6f")
    # Without the bars cache too: the earlier files' rows come from the previous arrays.
    (run / "prep" / "bars" / "DAYS.npz").unlink()
    snakemake(run, "prep/DAYS.npz")
    log = preprocess_log(run, "DAYS")
    assert (
        f"DAYS ({DAYS + 1} files under data): 1 file(s) read ({DAY:,} bars), {DAYS} earlier file(s) not read: "
        "their rows are those of the previous arrays" in log
    )
    assert f"the rows of {DAY:,} new bars appended to the previous arrays'" in log
    assert f"data/DAYS-1m-{DAYS:02d}.csv: read as" in log and "DAYS-1m-00.csv: read as" not in log
    assert_arrays_of_a_full_preprocess(run, "DAYS", tmp_path)


def test_an_array_file_of_the_older_format_is_made_again_once(run):
    arrays_path = run / "prep" / "DAYS.npz"
    # As an older rnnfleet left it: normalised features, no format, no copy kept to append
    # to, and its job's record (Snakemake's metadata) without the format param.
    with np.load(arrays_path) as stored:
        older = {name: stored[name] for name in stored.files if name not in ("arrays_format", "raw_features")}
    older["features"] = load_arrays(arrays_path).features
    np.savez(arrays_path, **older)
    (run / "prep" / "bars" / "DAYS.arrays.npz").unlink(missing_ok=True)
    record_path = run / ".snakemake" / "metadata" / base64.b64encode(b"prep/DAYS.npz").decode()
    record = json.loads(record_path.read_text())
    params = record["params"]
    assert params.count(repr(ARRAYS_FORMAT)) == 1, params  # the format param, and no other of that value
    params.remove(repr(ARRAYS_FORMAT))
    record_path.write_text(json.dumps({**record, "params": params}))
    with pytest.raises(DataError, match="an array file of format 1, not 2"):
        load_arrays(arrays_path)

    dry_run = snakemake(run, "-n")
    assert set(pending_jobs(dry_run.stdout + dry_run.stderr, "preprocess")) == {"DAYS"}
    snakemake(run, "prep/DAYS.npz")
    assert load_arrays(arrays_path).rows == older["raw_targets"].shape[0]
    dry_run = snakemake(run, "-n")
    assert pending_jobs(dry_run.stdout + dry_run.stderr, "preprocess") == {}


def test_the_dry_run_counts_new_bars_once_the_arrays_are_made(run, bars):
    appended(run, bars)
    snakemake(run, "prep/GROWING.npz", "prep/DAYS.npz")
    assert planned_lines(snakemake(run, "-n")) == [f"update: {DAY} new bars: 2 (datasets: DAYS, GROWING)"]


def test_a_day_file_cut_inside_its_last_line_is_read_without_it_and_its_repair_is_an_update(run, bars):
    first = metrics(run, "DAYS")
    day_file = run / "data" / f"DAYS-1m-{DAYS:02d}.csv"
    bars["DAYS"].iloc[DAYS * DAY : (DAYS + 1) * DAY].to_csv(day_file, index=False, float_format="%.6f")
    whole = day_file.read_text()
    day_file.write_text(whole[:-4])  # the line end and the last number's last three digits lost
    snakemake(run, DAYS_MODEL)
    cut = metrics(run, "DAYS")
    assert (cut["made"], cut["rows"]) == ("update 1", first["rows"] + DAY - 1)
    note = (
        f"note: {day_file.relative_to(run)}: the last line has no line end (the file may have been cut while it "
        "was written): its last row was left out"
    )
    assert note in preprocess_log(run, "DAYS")

    day_file.write_text(whole)  # the file repaired: one more bar, the others unchanged
    assert planned_lines(snakemake(run, "-n")) == ["update: new bars/new files: 1 (datasets: DAYS)"]
    snakemake(run, DAYS_MODEL)
    assert "DAYS: update: 1 new bars" in train_log(run, "DAYS")
    repaired = metrics(run, "DAYS")
    assert (repaired["made"], repaired["rows"]) == ("update 2", first["rows"] + DAY)


def test_a_cut_last_line_that_is_a_grown_files_only_new_bar_is_refused_and_the_model_kept(run, bars):
    growing, model = run / "data" / "GROWING-1m-all.csv", run / "models" / "GROWING.pt"
    kept = model.read_bytes()
    bars["GROWING"].iloc[: GROWING_ROWS + 1].to_csv(growing, index=False, float_format="%.6f")
    whole = growing.read_text()
    growing.write_text(whole[:-4])  # the one new line cut inside its last number, its line end lost
    result = snakemake(run, check=False)
    refused = (
        "data/GROWING-1m-all.csv: the last line has no line end (the file may have been cut while it was written), "
        "and that line is its only new bar: nothing new to train on, the model is kept"
    )
    assert result.returncode != 0 and refused in result.stdout + result.stderr
    assert refused in preprocess_log(run, "GROWING")
    assert model.read_bytes() == kept

    growing.write_text(whole)  # the line complete
    snakemake(run)
    assert "GROWING: update: 1 new bars" in train_log(run, "GROWING")


def test_a_changed_setting_trains_from_scratch(run, bars):
    appended(run, bars)
    changed = ("--config", 'train={"lr": 0.002}')
    assert planned_lines(snakemake(run, "-n", *changed)) == ["re-train: settings changed: 2 (datasets: DAYS, GROWING)"]
    snakemake(run, *changed)
    for dataset in ("DAYS", "GROWING"):
        assert metrics(run, dataset)["made"] == "full"
        assert f"{dataset}: re-train: settings or code changed" in train_log(run, dataset)
        assert "epoch   0" not in train_log(run, dataset)


def test_parts_of_fixed_size_keep_their_size_as_days_are_added_and_updates_go_on(run, bars):
    fixed = (DAYS_MODEL, "--config", 'preprocess={"val_bars": 300, "test_bars": 200}')
    snakemake(run, *fixed)  # the parts changed: preprocessed and trained again
    made = "DAYS (3 files under data): arrays made from every bar: the previous arrays were made with other settings"
    assert made in preprocess_log(run, "DAYS")
    first = metrics(run, "DAYS")
    assert (first["made"], first["val_windows"], first["test_windows"]) == ("full", 300, 200)
    appended(run, bars)
    snakemake(run, *fixed)
    assert f"the rows of {DAY:,} new bars appended" in preprocess_log(run, "DAYS")
    after = metrics(run, "DAYS")
    assert (after["made"], after["val_windows"], after["test_windows"]) == ("update 1", 300, 200)
    assert after["rows"] == first["rows"] + DAY and after["train_windows"] == first["train_windows"] + DAY


def test_a_changed_earlier_bar_trains_from_scratch(run, bars, tmp_path):
    appended(run, bars)
    first_day = run / "data" / "DAYS-1m-00.csv"
    frame = pd.read_csv(first_day)
    frame.loc[10, "close"] *= 1.001
    frame.loc[10, "high"] = max(frame.loc[10, "high"], frame.loc[10, "close"])
    frame.to_csv(first_day, index=False, float_format="%.6f")
    snakemake(run)
    assert metrics(run, "DAYS")["made"] == "full"
    assert "DAYS: re-train: earlier bars changed" in train_log(run, "DAYS")
    assert metrics(run, "GROWING")["made"] == "update 1"
    # The changed file is read again, with the new one; the others come from the bars cache.
    log = preprocess_log(run, "DAYS")
    assert "arrays made from every bar: data/DAYS-1m-00.csv changed since the previous arrays were made" in log
    # Which bar changed: row 10 of the first day file, its close (and the high raised to it where needed).
    bar = bars["DAYS"].iloc[10]
    assert f"data/DAYS-1m-00.csv: changed since it was read (first at its bar {bar['timestamp'][:16]} UTC: " in log
    assert ": read again" in log
    assert f"2 file(s) read ({2 * DAY:,} bars), {DAYS - 1} file(s) unchanged" in log
    assert_arrays_of_a_full_preprocess(run, "DAYS", tmp_path)


def test_update_full_every_trains_from_scratch_after_that_many_updates(run, bars):
    write_config(
        run, data_dir="data", datasets={"files": "{dataset}-1m-*"}, update={**UPDATE_SETTINGS, "full_every": 1}
    )
    appended(run, bars)
    snakemake(run)  # the first update
    assert metrics(run, "GROWING")["made"] == "update 1"
    grown = bars["GROWING"].iloc[: GROWING_ROWS + 2 * DAY]
    grown.to_csv(run / "data/GROWING-1m-all.csv", index=False, float_format="%.6f")

    assert planned_lines(snakemake(run, "-n")) == [
        "re-train: update.full_every: 1 update(s) since the full fit: 1 (datasets: GROWING)"
    ]
    snakemake(run)
    assert metrics(run, "GROWING")["made"] == "full"
    assert "re-train: update.full_every: 1 update(s) since the full fit" in train_log(run, "GROWING")


def test_a_killed_update_keeps_the_previous_model(run, bars):
    model = run / "models" / "GROWING.pt"
    old = model.read_bytes()
    appended(run, bars)
    snakemake_run, job_pid = start_paused_run(run, "epoch", "models/GROWING.pt")
    assert "GROWING: update: " in train_log(run, "GROWING"), "the paused job was not an update: nothing tested"
    assert model.read_bytes() == old  # readable at its path while it is updated
    kill_hard(snakemake_run, job_pid)

    assert model.read_bytes() == old  # with no Snakemake command after the kill
    snakemake(run)
    assert metrics(run, "GROWING")["made"] == "update 1"
    assert np.isfinite(metrics(run, "GROWING")["test_skill"])


def test_update_settings_from_the_command_line_act_as_from_config_yaml(run, bars):
    appended(run, bars)
    off = ("--config", 'update={"enabled": false}')
    assert planned_lines(snakemake(run, "-n", *off)) == [
        "re-train: update.enabled is false: 2 (datasets: DAYS, GROWING)"
    ]
    snakemake(run, *off)
    assert {metrics(run, dataset)["made"] for dataset in ("DAYS", "GROWING")} == {"full"}


def test_a_datasets_sheet_row_turns_updates_off_for_its_dataset_alone(run, bars):
    (run / "config").mkdir()
    sheet = "dataset\tfiles\tupdate.enabled\nDAYS\tDAYS-1m-*\t\nGROWING\tGROWING-1m-all.csv\tfalse\n"
    (run / "config" / "datasets.tsv").write_text(sheet)
    write_config(run, data_dir="data", datasets={"files": "", "sheet": "config/datasets.tsv"}, update=UPDATE_SETTINGS)
    unchanged = snakemake(run, "-n")
    assert pending_jobs(unchanged.stdout + unchanged.stderr, "train") == {}  # same datasets, same settings
    appended(run, bars)
    assert sorted(planned_lines(snakemake(run, "-n"))) == [
        "re-train: update.enabled is false: 1 (datasets: GROWING)",
        "update: new bars/new files: 1 (datasets: DAYS)",
    ]
    snakemake(run)
    assert (metrics(run, "DAYS")["made"], metrics(run, "GROWING")["made"]) == ("update 1", "full")
