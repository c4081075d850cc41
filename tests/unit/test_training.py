"""Unit tests of the training loop, the model file and its round trip."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
import torch

from rnnfleet.atomic_files import atomic_write
from rnnfleet.errors import UserError
from rnnfleet.precision import cpu_computes_bf16_natively
from rnnfleet.prep.prepare import prepare_dataset
from rnnfleet.synthetic import write_synthetic_csv
from rnnfleet.train.evaluate import train_and_evaluate
from rnnfleet.train.loop import LoopSettings, window_view
from rnnfleet.train.modelfile import ModelFileError, build_checkpoint, load_checkpoint, save_checkpoint
from rnnfleet.train.models import load_model

MODEL = {"cell": "lstm", "hidden_size": 16, "num_layers": 1, "dropout": 0.0}
TRAIN = {"seq_len": 20, "batch_size": 64, "epochs": 6, "lr": 0.003, "patience": 3, "seed": 0}
LOOP = LoopSettings.of(TRAIN)


@pytest.fixture(scope="module")
def arrays(tmp_path_factory):
    csv_path = write_synthetic_csv(tmp_path_factory.mktemp("data") / "A_1m.csv", 3000, 3)
    return prepare_dataset(csv_path, seq_len=TRAIN["seq_len"], horizon=1, val_fraction=0.2)[0]


def test_windows_are_views_in_bar_order():
    features = torch.arange(30, dtype=torch.float32).reshape(10, 3)
    windows = window_view(features, 4)
    assert windows.shape == (7, 4, 3)
    assert windows.untyped_storage().data_ptr() == features.untyped_storage().data_ptr()  # no copy
    torch.testing.assert_close(windows[2], features[2:6])


@pytest.mark.slow
def test_model_beats_the_naive_forecast_on_structured_data(arrays):
    torch.set_num_threads(1)
    result = train_and_evaluate(arrays, MODEL, LOOP, torch.device("cpu"))
    assert result.evaluated.skill > 0.05, (result.evaluated.val_loss, result.evaluated.naive_val_loss)
    assert 1 <= result.trained.best_epoch <= result.trained.epochs_run <= TRAIN["epochs"]
    assert result.evaluated.val_loss == min(entry["val_loss"] for entry in result.trained.history)


@pytest.mark.parametrize("cell, amp", [("gru", "off"), ("lstm", "bf16")])
def test_other_cells_and_mixed_precision_path_run(arrays, cell, amp):
    """Where the CPU computes bfloat16 natively, bf16 trains; elsewhere oneDNN's LSTM may refuse
    it, and then the user gets one line naming train.amp instead of an internal error."""
    settings = replace(LOOP, epochs=1, amp=amp)
    try:
        result = train_and_evaluate(arrays, {**MODEL, "cell": cell}, settings, torch.device("cpu"))
    except UserError as error:
        assert amp == "bf16" and not cpu_computes_bf16_natively(), error
        assert str(error).startswith("config key 'train.amp' = 'bf16': cpu cannot run this model in bf16 (")
        return
    assert np.isfinite(result.evaluated.val_loss)


def test_saved_model_predicts_exactly_like_the_trained_one(arrays, tmp_path):
    train = {**TRAIN, "epochs": 2}
    result = train_and_evaluate(arrays, MODEL, LoopSettings.of(train), torch.device("cpu"))
    save_checkpoint(
        build_checkpoint("A_1m", result.trained, arrays, MODEL, train, {"val_loss": result.evaluated.val_loss}),
        tmp_path / "A.pt",
    )
    model, checkpoint = load_model(tmp_path / "A.pt")
    windows = window_view(torch.from_numpy(arrays.features), train["seq_len"])[-100:]
    with torch.no_grad():
        torch.testing.assert_close(model(windows), result.trained.model(windows), rtol=0, atol=0)
    assert checkpoint["features"]["horizon"] == 1 and checkpoint["versions"]["torch"]


def test_truncated_or_foreign_model_files_give_clear_errors(arrays, tmp_path):
    result = train_and_evaluate(arrays, MODEL, replace(LOOP, epochs=1), torch.device("cpu"))
    path = tmp_path / "A.pt"
    save_checkpoint(build_checkpoint("A_1m", result.trained, arrays, MODEL, TRAIN, {}), path)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ModelFileError, match="not a readable rnnfleet model file"):
        load_checkpoint(path)
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(ModelFileError, match="not an rnnfleet model file"):
        load_checkpoint(tmp_path / "other.pt")


def test_atomic_write_gives_normal_file_permissions(tmp_path):
    with atomic_write(tmp_path / "metrics.json") as handle:
        handle.write(b"{}")
    (tmp_path / "plain.json").write_bytes(b"{}")
    assert (tmp_path / "metrics.json").stat().st_mode == (tmp_path / "plain.json").stat().st_mode


def test_atomic_write_syncs_the_file_and_its_folder_unless_told_it_need_not(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr("rnnfleet.atomic_files.os.fsync", synced.append)
    with atomic_write(tmp_path / "model.pt") as handle:
        handle.write(b"weights")
    assert len(synced) == 2  # the file, then the folder that holds its new name
    with atomic_write(tmp_path / "figure.svg", durable=False) as handle:
        handle.write(b"<svg/>")
    assert len(synced) == 2 and (tmp_path / "figure.svg").read_bytes() == b"<svg/>"


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "model.pt"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_write(target) as handle:
        handle.write(b"half")
        raise RuntimeError("killed mid-write")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]


def test_log_shows_each_epoch_and_progress_inside_long_epochs(arrays, monkeypatch, capsys):
    from rnnfleet.train import loop as training

    train = replace(LOOP, epochs=2)
    train_and_evaluate(arrays, MODEL, train, torch.device("cpu"))
    quick = capsys.readouterr().err.splitlines()
    assert [line.split()[:2] for line in quick] == [["epoch", "1"], ["epoch", "2"]]  # short epochs: no progress lines
    assert re.fullmatch(r"epoch +1  train_loss [\d.]+  val_loss [\d.]+  [\d.]+s  [\d,]+ samples/s", quick[0])

    monkeypatch.setattr(training, "PROGRESS_EVERY_SECONDS", 0.0)  # every batch counts as a long wait
    train_and_evaluate(arrays, MODEL, replace(train, epochs=1), torch.device("cpu"))
    progress = [line for line in capsys.readouterr().err.splitlines() if line.startswith("  epoch")]
    n_batches = -(-(arrays.train_end - TRAIN["seq_len"] + 1) // TRAIN["batch_size"])
    assert len(progress) == n_batches
    assert re.fullmatch(r"  epoch 1: batch 1/\d+ \(\d+%\), [\d,]+ samples/s, ~\d+s left in this epoch", progress[0])
