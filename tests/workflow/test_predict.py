"""Forecasts from a saved model file: the same numbers as the trained model, in price units."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import REPO, TINY_ROWS, write_config

from rnnfleet.cli.predict import main
from rnnfleet.forecast.predict import FORECAST_COLUMNS, forecast_at_last_bar
from rnnfleet.prep.prepare import prepare_dataset
from rnnfleet.scores import intervals
from rnnfleet.synthetic import synthetic_bars
from rnnfleet.train.evaluate import train_and_evaluate
from rnnfleet.train.loop import LoopSettings, window_view
from rnnfleet.train.modelfile import build_checkpoint, calibration_record, save_checkpoint

MODEL = {"cell": "lstm", "hidden_size": 8, "num_layers": 1, "dropout": 0.0}
TRAIN = {"seq_len": 16, "batch_size": 64, "epochs": 2, "lr": 0.003, "patience": 2, "seed": 0}
HORIZON = 2  # > 1, so that an off-by-one between bars, windows and targets shows
# The CSV names its columns differently; the model file records the names it was trained with.
COLUMNS = {"timestamp": "time", "open": "open", "high": "high", "low": "low", "close": "Close", "volume": "volume"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(csv path, model file path, arrays, in-memory training result) for one tiny dataset."""
    folder = tmp_path_factory.mktemp("predict")
    csv_path = folder / "A_1m.csv"
    bars = synthetic_bars(TINY_ROWS, seed=7).rename(columns={"timestamp": "time", "close": "Close"})
    bars.to_csv(csv_path, index=False, float_format="%.6f")
    arrays, _ = prepare_dataset(csv_path, TRAIN["seq_len"], HORIZON, val_fraction=0.2, columns=COLUMNS)
    torch.set_num_threads(1)
    result = train_and_evaluate(arrays, MODEL, LoopSettings.of(TRAIN), torch.device("cpu"))
    checkpoint = build_checkpoint(
        "A_1m", result.trained, arrays, MODEL, TRAIN, {"val_loss": result.evaluated.val_loss}, COLUMNS
    )
    checkpoint["calibration"] = calibration_record(result.evaluated)  # as the train job adds it
    model_path = folder / "A_1m.pt"
    save_checkpoint(checkpoint, model_path)
    return csv_path, model_path, arrays, result


def forecasts_for(model_path, csv_path, out, *extra: str) -> pd.DataFrame:
    assert main(["--model", str(model_path), "--csv", str(csv_path), "--out", str(out), *extra]) == 0
    return pd.read_csv(out)


def test_forecasts_from_the_model_file_equal_the_trained_model_bit_for_bit(trained, tmp_path):
    csv_path, model_path, arrays, result = trained
    with torch.no_grad():
        scaled = result.trained.model(window_view(torch.from_numpy(arrays.features), TRAIN["seq_len"]))
    expected_log_return = scaled.numpy().astype(np.float64) * arrays.target_std

    # The arrays end `horizon` bars before the CSV (those bars have no target yet). On the
    # CSV without them, the model file sees exactly the training windows, in one batch of
    # the same shape (CPU matrix kernels may round the last bit differently per batch shape).
    bars = pd.read_csv(csv_path)
    bars.iloc[:-HORIZON].to_csv(tmp_path / "known.csv", index=False, float_format="%.6f")
    forecasts = forecasts_for(model_path, tmp_path / "known.csv", tmp_path / "known_forecasts.csv")
    assert tuple(forecasts.columns) == (*FORECAST_COLUMNS, *INTERVAL_COLUMNS)
    np.testing.assert_array_equal(forecasts["forecast"].to_numpy(), expected_log_return)


INTERVAL_COLUMNS = ("coverage", "forecast_low", "forecast_high", "forecast_close_low", "forecast_close_high")


def test_each_forecast_has_its_interval_calibrated_on_the_validation_errors(trained, tmp_path, capsys):
    """The model's forecast +- the ceil((n + 1) c)-th smallest absolute validation error (in
    the target's units); --coverage picks another coverage of the same scores."""
    csv_path, model_path, arrays, result = trained
    forecasts = forecasts_for(model_path, csv_path, tmp_path / "f.csv", "--last", "50")
    scores = np.sort(result.evaluated.calibration.astype(np.float64))
    assert len(scores) >= intervals.fewest_scores(0.9)
    expected = scores[int(np.ceil((len(scores) + 1) * 0.9)) - 1] * arrays.target_std
    low, high = forecasts["forecast_low"], forecasts["forecast_high"]
    np.testing.assert_allclose(high - forecasts["forecast"], expected, rtol=1e-5)
    np.testing.assert_allclose(forecasts["forecast"] - low, expected, rtol=1e-5)
    np.testing.assert_allclose(forecasts["forecast_close_low"], forecasts["close"] * np.exp(low), rtol=1e-12)
    half = forecasts_for(model_path, csv_path, tmp_path / "h.csv", "--last", "50", "--coverage", "0.5")
    assert (
        (half["forecast_high"] < high).all() and set(half["coverage"]) == {0.5} and set(forecasts["coverage"]) == {0.9}
    )
    with pytest.raises(SystemExit):
        main(["--model", str(model_path), "--csv", str(csv_path), "--out", str(tmp_path / "x.csv"), "--coverage", "1"])
    assert "not a coverage between 0 and 1" in capsys.readouterr().err


def test_forecasts_line_up_with_the_bars_they_are_made_at(trained, tmp_path):
    csv_path, model_path, arrays, _ = trained
    forecasts = forecasts_for(model_path, csv_path, tmp_path / "forecasts.csv")
    bars = pd.read_csv(csv_path)
    first_forecast_bar = TRAIN["seq_len"]  # the first bar that ends a full window of features
    assert len(forecasts) == len(bars) - first_forecast_bar == len(arrays.features) - TRAIN["seq_len"] + 1 + HORIZON
    np.testing.assert_array_equal(forecasts["close"], bars["Close"].to_numpy()[first_forecast_bar:])
    assert pd.Timestamp(forecasts["time"].iloc[-1]) == pd.Timestamp(bars["time"].iloc[-1], tz="UTC")
    np.testing.assert_allclose(
        forecasts["forecast_close"], forecasts["close"] * np.exp(forecasts["forecast"]), rtol=1e-15
    )
    assert (forecasts["horizon"] == HORIZON).all()


def test_last_n_gives_the_same_forecasts_as_the_full_file(trained, tmp_path):
    csv_path, model_path, _, _ = trained
    full = forecasts_for(model_path, csv_path, tmp_path / "full.csv")
    tail = forecasts_for(model_path, csv_path, tmp_path / "tail.csv", "--last", "5")
    # Same windows in a smaller batch: equal up to float32 rounding.
    pd.testing.assert_frame_equal(tail, full.tail(5).reset_index(drop=True), rtol=1e-6)


def test_command_line_entry_point_runs_as_a_module(trained, tmp_path):
    csv_path, model_path, _, _ = trained
    out = tmp_path / "forecasts.csv"
    command = [sys.executable, "-m", "rnnfleet.cli.predict", "--model", str(model_path), "--csv", str(csv_path)]
    command += ["--out", str(out), "--last", "1"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "scripts")}
    completed = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert len(pd.read_csv(out)) == 1 and "1 forecast(s)" in completed.stderr


def test_the_forecast_at_the_last_bar_is_the_commands_last_forecast(trained, tmp_path):
    """What the train job puts in the fleet's forecasts table, from the array file alone."""
    csv_path, model_path, arrays, result = trained
    checkpoint = torch.load(model_path, weights_only=True)
    entries = forecast_at_last_bar(result.trained.model, checkpoint, arrays)
    (last,) = forecasts_for(model_path, csv_path, tmp_path / "last.csv", "--last", "1").to_dict("records")
    assert entries["forecast_time"] == last["time"] and entries["forecast_horizon"] == HORIZON
    assert entries["forecast"] == pytest.approx(last["forecast"], rel=1e-6, abs=1e-12)
    assert entries["forecast_close"] == pytest.approx(last["forecast_close"], rel=1e-9)
    assert entries["forecast_low"] == pytest.approx(last["forecast_low"], rel=1e-6, abs=1e-12)
    assert entries["forecast_high"] == pytest.approx(last["forecast_high"], rel=1e-6, abs=1e-12)
    assert forecast_at_last_bar(result.trained.model, checkpoint, replace(arrays, latest_time=-1)) == {}


def test_several_files_or_a_glob_are_joined_like_one_file(trained, tmp_path, capsys):
    """Two day files (the second too short for a window alone) give the forecasts of the
    one file they were cut from; a quoted glob the same; a pattern matching nothing one line."""
    csv_path, model_path, _, _ = trained
    whole = forecasts_for(model_path, csv_path, tmp_path / "whole.csv", "--last", "3")
    bars = pd.read_csv(csv_path)
    days = tmp_path / "days"
    days.mkdir()
    cut = len(bars) - 5  # the "today" file: 5 bars, fewer than a window
    bars.iloc[:cut].to_csv(days / "A_1m-2024-01-01.csv", index=False, float_format="%.6f")
    bars.iloc[cut:].to_csv(days / "A_1m-2024-01-02.csv", index=False, float_format="%.6f")
    assert (
        main(["--model", str(model_path), "--csv", str(days / "A_1m-2024-01-02.csv"), "--out", str(tmp_path / "x.csv")])
        == 1
    )
    assert "give earlier bars too (several files are joined in time order" in capsys.readouterr().err
    files = [str(days / "A_1m-2024-01-01.csv"), str(days / "A_1m-2024-01-02.csv")]
    out = tmp_path / "joined.csv"
    assert main(["--model", str(model_path), "--csv", *files, "--out", str(out), "--last", "3"]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(out), whole)
    assert "2 files under" in capsys.readouterr().err
    globbed = forecasts_for(model_path, days / "A_1m-*.csv", tmp_path / "globbed.csv", "--last", "3")
    pd.testing.assert_frame_equal(globbed, whole)
    assert main(["--model", str(model_path), "--csv", str(days / "B_*.csv"), "--out", str(out)]) == 1
    assert capsys.readouterr().err.strip().endswith("B_*.csv: no file matches that pattern")


def test_a_dataset_of_many_day_files_prints_one_read_as_line_not_one_per_file(trained, tmp_path, capsys):
    """Six day files: one 'read as' line naming the six files joined and their time range."""
    csv_path, model_path, _, _ = trained
    bars = pd.read_csv(csv_path)
    days = tmp_path / "days"
    days.mkdir()
    for day, rows in enumerate(np.array_split(np.arange(len(bars)), 6), start=1):
        bars.iloc[rows].to_csv(days / f"A_1m-2024-01-0{day}.csv", index=False, float_format="%.6f")
    forecasts_for(model_path, days / "A_1m-*.csv", tmp_path / "f.csv", "--last", "1")
    read_lines = [line for line in capsys.readouterr().err.splitlines() if ": read as " in line]
    assert len(read_lines) == 1, read_lines
    assert read_lines[0].startswith(f"(6 files under {days}): read as 6 files joined: ")
    assert f"{len(bars)} bars, " in read_lines[0]
    forecasts_for(model_path, csv_path, tmp_path / "g.csv", "--last", "1")  # one file: its own line
    assert f"{csv_path}: read as " in capsys.readouterr().err


def test_too_short_or_malformed_csv_is_one_clear_error(trained, tmp_path, capsys):
    csv_path, model_path, _, _ = trained
    short = tmp_path / "short.csv"
    pd.read_csv(csv_path).head(TRAIN["seq_len"]).to_csv(short, index=False)
    assert main(["--model", str(model_path), "--csv", str(short), "--out", str(tmp_path / "x.csv")]) == 1
    assert f"a forecast needs at least {TRAIN['seq_len'] + 1}" in capsys.readouterr().err
    renamed = tmp_path / "renamed.csv"
    pd.read_csv(csv_path).rename(columns={"Close": "close"}).to_csv(renamed, index=False)
    assert main(["--model", str(model_path), "--csv", str(renamed), "--out", str(tmp_path / "x.csv")]) == 1
    assert "missing required column(s) Close" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


def predict_error(model_path, csv_path, out) -> str:
    """The one line the real command prints when it refuses (exit status 1, no forecasts)."""
    command = [sys.executable, "-m", "rnnfleet.cli.predict", "--model", str(model_path), "--csv", str(csv_path)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "scripts")}
    completed = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True, env=env)
    assert completed.returncode == 1, completed.stderr
    assert completed.stderr.count("\n") == 1 and "Traceback" not in completed.stderr, completed.stderr
    assert not os.path.exists(out)
    return completed.stderr.strip()


def damaged_model(model_path, tmp_path, damage: str):
    """A copy of the model file, damaged one way."""
    path = tmp_path / f"{damage.replace(' ', '_')}.pt"
    whole = model_path.read_bytes()
    checkpoint = torch.load(model_path, weights_only=True)
    if damage == "weights of another shape":
        first = next(iter(checkpoint["state_dict"]))
        checkpoint["state_dict"] = {**checkpoint["state_dict"], first: torch.zeros(3)}
        torch.save(checkpoint, path)
    elif damage == "no normalisation":
        del checkpoint["normalisation"]
        torch.save(checkpoint, path)
    elif damage == "random bytes":
        path.write_bytes(np.random.default_rng(0).bytes(len(whole)))
    elif damage == "emptied":
        path.write_bytes(b"")
    elif damage == "cut short":
        path.write_bytes(whole[: len(whole) // 2])
    elif damage == "one byte of the weights flipped":
        path.write_bytes(flipped_weight_byte(model_path))
    elif damage == "os.system pickled in":
        torch.save({**checkpoint, "normalisation": RunsACommand()}, path)
    return path


class RunsACommand:
    def __reduce__(self):
        return os.system, ("echo this must never run",)


def flipped_weight_byte(model_path) -> bytes:
    """The model file's bytes with one byte flipped inside the largest weight tensor's storage
    (the zip's structure intact, so only the checksum tells)."""
    import struct
    import zipfile

    whole = bytearray(model_path.read_bytes())
    with zipfile.ZipFile(model_path) as archive:
        info = max((item for item in archive.infolist() if "/data/" in item.filename), key=lambda item: item.file_size)
    name_length, extra_length = struct.unpack("<HH", whole[info.header_offset + 26 : info.header_offset + 30])
    start = info.header_offset + 30 + name_length + extra_length
    whole[start + info.file_size // 2] ^= 0xFF
    return bytes(whole)


DAMAGE_LINES = {
    "weights of another shape": "its weights do not fit the model it records (built-in 'rnn', input_size 5): size "
    "mismatch for rnn.weight_ih_l0: copying a param with shape torch.Size([3]) from checkpoint",
    "no normalisation": "an incomplete rnnfleet model file (no 'normalisation'); it was changed after rnnfleet "
    "wrote it: train its dataset again",
    "random bytes": "not a readable rnnfleet model file: it is not a file torch.save writes (not a zip archive)",
    "emptied": "not a readable rnnfleet model file: the file is empty (0 bytes)",
    "cut short": "not a readable rnnfleet model file: it is cut short or damaged (",
    "one byte of the weights flipped": "damaged: its part '",
    "os.system pickled in": "refused: it holds pickled Python objects (it names posix.system), and loading those "
    "could run code",
}


@pytest.mark.parametrize("damage", list(DAMAGE_LINES))
def test_a_damaged_model_file_is_one_line_naming_it(trained, tmp_path, damage):
    csv_path, model_path, _, _ = trained
    path = damaged_model(model_path, tmp_path, damage)
    line = predict_error(path, csv_path, tmp_path / "forecasts.csv")
    assert line.startswith(f"error: {path}: {DAMAGE_LINES[damage]}"), line
    assert "weights_only" not in line  # torch's advice to load unsafely never reaches the user
    if damage != "os.system pickled in":
        assert "pickled" not in line


def test_too_many_nan_rows_name_the_option_of_the_command(trained, tmp_path):
    csv_path, model_path, _, _ = trained
    lines = csv_path.read_text().splitlines()
    cells = lines[10].split(",")
    cells[4] = "nan"  # a close
    lines[10] = ",".join(cells)
    with_nan = tmp_path / "with_nan.csv"
    with_nan.write_text("\n".join(lines) + "\n")
    line = predict_error(model_path, with_nan, tmp_path / "forecasts.csv")
    assert line == (
        f"error: {with_nan}: 1 of {TINY_ROWS} rows hold NaN or infinite values, more than the allowed fraction 0.0 "
        "(option --max-bad-fraction)"
    )
    assert "max_bad_fraction" not in line
    forecasts = forecasts_for(model_path, with_nan, tmp_path / "forecasts.csv", "--max-bad-fraction", "0.01")
    assert len(forecasts) > 0  # the option named is the one that lets the row be dropped


def test_out_naming_an_input_a_folder_or_an_unusable_device_is_one_line_and_replaces_nothing(trained, tmp_path):
    csv_path, model_path, _, _ = trained
    bars, model = tmp_path / "bars.csv", tmp_path / "model.pt"
    shutil.copy(csv_path, bars)
    shutil.copy(model_path, model)
    kept = {bars: bars.read_bytes(), model: model.read_bytes()}
    env = {**os.environ, "PYTHONPATH": str(REPO / "scripts")}
    cases = {
        "--csv": (
            str(bars),
            f"--out {bars} is the --csv file: it would be replaced by the forecasts; name another file",
        ),
        "--model": (str(model), f"--out {model} is the --model file: it would be replaced by the forecasts"),
        "folder": (str(tmp_path), f"--out {tmp_path} is a folder; name the forecasts file to write"),
    }
    for case, (out, expected) in cases.items():
        command = [
            sys.executable,
            "-m",
            "rnnfleet.cli.predict",
            "--model",
            str(model),
            "--csv",
            str(bars),
            "--out",
            out,
        ]
        completed = subprocess.run(command, capture_output=True, text=True, env=env)
        assert completed.returncode == 1 and completed.stderr.startswith(f"error: {expected}"), (case, completed.stderr)
        assert completed.stderr.count("\n") == 1, completed.stderr
    assert {path: path.read_bytes() for path in kept} == kept
    if not torch.cuda.is_available():  # the CPU-only build make installs
        command = [sys.executable, "-m", "rnnfleet.cli.predict", "--model", str(model), "--csv", str(bars)]
        completed = subprocess.run(
            [*command, "--out", str(tmp_path / "f.csv"), "--device", "cuda"], capture_output=True, text=True, env=env
        )
        assert completed.returncode == 1 and "Traceback" not in completed.stderr, completed.stderr
        assert completed.stderr.startswith("error: --device cuda: "), completed.stderr


def test_out_never_replaces_a_model_a_data_file_or_an_output_of_the_project_however_spelled(
    trained, tmp_path, monkeypatch, capsys
):
    csv_path, model_path, _, _ = trained
    write_config(tmp_path, data_dir="data")
    for folder in ("data", "models", "results"):
        (tmp_path / folder).mkdir()
    for name in ("A_1m", "B_1m"):
        shutil.copy(csv_path, tmp_path / "data" / f"{name}.csv")
        shutil.copy(model_path, tmp_path / "models" / f"{name}.pt")
    (tmp_path / "results" / "metrics.csv").write_text("dataset,status\nA_1m,ok\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "model_link.csv").symlink_to("models/B_1m.pt")
    os.link(tmp_path / "models/B_1m.pt", tmp_path / "model_hard_link.csv")
    os.link(tmp_path / "data/B_1m.csv", tmp_path / "data_hard_link.csv")
    (tmp_path / "sub" / "table_link.csv").symlink_to("../results/metrics.csv")
    kept = {
        path: path.read_bytes() for folder in ("data", "models", "results") for path in (tmp_path / folder).iterdir()
    }
    project = os.path.realpath(tmp_path)
    cases = {
        "models/B_1m.pt": "is a model file",
        "./models/../models/B_1m.pt": "is a model file",
        "model_link.csv": "is a model file",
        "model_hard_link.csv": "is a model file",
        "data_hard_link.csv": f"is {project}/data/B_1m.csv of the project folder under another name (a hard link)",
        "sub/table_link.csv": f"lies in the project folder's paths.results folder {project}/results",
        "./results/../results/metrics.csv": f"lies in the project folder's paths.results folder {project}/results",
        "data/NEW_1m.csv": f"lies in the project folder's data_dir folder {project}/data",
    }
    monkeypatch.chdir(tmp_path)
    for out, words in cases.items():
        assert main(["--model", "models/A_1m.pt", "--csv", "data/A_1m.csv", "--out", out]) == 1, out
        error = capsys.readouterr().err
        assert error.startswith(f"error: --out {out} {words}") and error.count("\n") == 1, (out, error)
    assert {path: path.read_bytes() for path in kept} == kept
    assert not (tmp_path / "data/NEW_1m.csv").exists()
    assert main(["--model", "models/A_1m.pt", "--csv", "data/A_1m.csv", "--out", "forecasts.csv", "--last", "1"]) == 0


def test_a_named_pipe_given_to_csv_is_named_as_such(trained, tmp_path, capsys):
    _, model_path, _, _ = trained
    pipe = tmp_path / "recent.csv"
    os.mkfifo(pipe)  # opening it would wait for a writer: it is named before any open
    assert main(["--model", str(model_path), "--csv", str(pipe), "--out", str(tmp_path / "f.csv")]) == 1
    error = capsys.readouterr().err
    assert error == f"error: {pipe}: is a named pipe (FIFO), not a regular file; give a file of bars\n"
