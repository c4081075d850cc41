"""Unit tests of updates: row digests, the plan (update or from scratch, and why), the
normalisation an update keeps, the training loop started from a state, the dry-run labels."""

from __future__ import annotations

import math
import zipfile
from dataclasses import replace

import numpy as np
import pytest
import torch
from conftest import schema_defaults

from rnnfleet.prep.arrays_file import array_rows, save_arrays
from rnnfleet.prep.prepare import prepare_dataset, row_digests
from rnnfleet.synthetic import synthetic_bars
from rnnfleet.train.evaluate import train_and_evaluate
from rnnfleet.train.loop import LoopSettings, StartState
from rnnfleet.train.modelfile import build_checkpoint
from rnnfleet.train.updating import (
    FULL,
    UPDATE,
    Plan,
    fit_record,
    next_lineage,
    plan_training,
    rows_sha256,
    skill_drop,
    with_normalisation,
)
from rnnfleet.workflow.update_plans import NEW_BARS, SETTINGS_CHANGED, expected_fit

MODEL = {"cell": "lstm", "hidden_size": 8, "num_layers": 1, "dropout": 0.0}
TRAIN = {"seq_len": 16, "batch_size": 64, "epochs": 2, "lr": 0.003, "patience": 2, "seed": 0}
LOOP = LoopSettings.of(TRAIN)
EVALUATE = {"production": "scored", "folds": 0}
FINGERPRINT = "f" * 64

UPDATE_SETTINGS = schema_defaults("update")


def prepared(csv_path, bars):
    bars.to_csv(csv_path, index=False, float_format="%.6f")
    return prepare_dataset(csv_path, seq_len=TRAIN["seq_len"], horizon=1, val_fraction=0.2)[0]


@pytest.fixture(scope="module")
def grown(tmp_path_factory):
    """(arrays of 1,200 bars, arrays of the same bars plus 300, the first ones' model file contents)."""
    folder = tmp_path_factory.mktemp("data")
    bars = synthetic_bars(1500, 4)
    before, after = prepared(folder / "a.csv", bars.iloc[:1200]), prepared(folder / "b.csv", bars)
    torch.manual_seed(0)
    result = train_and_evaluate(before, MODEL, LOOP, torch.device("cpu"))
    lineage = next_lineage(Plan(FULL, "no previous model"), before, FINGERPRINT, fit_record("full", before, {}, 0.0, 0))
    checkpoint = build_checkpoint("A", result.trained, before, MODEL, TRAIN, {}, lineage=lineage)
    return before, after, checkpoint


def test_row_digests_change_with_any_value_and_not_with_the_rows_after():
    features, targets = np.random.default_rng(0).standard_normal((50, 3)), np.arange(50.0)
    digests = row_digests(features, targets)
    assert digests.dtype == np.uint64 and len(set(digests.tolist())) == 50
    changed = features.copy()
    changed[7, 2] = np.nextafter(changed[7, 2], 1.0)  # the smallest change a float64 can take
    assert np.flatnonzero(row_digests(changed, targets) != digests).tolist() == [7]
    assert np.array_equal(row_digests(features[:30], targets[:30]), digests[:30])


def test_the_earlier_rows_of_grown_bars_hash_alike_and_their_stored_arrays_differ(grown):
    before, after, _ = grown
    assert after.rows == before.rows + 300
    assert rows_sha256(after, before.rows) == rows_sha256(before, before.rows)
    # The preprocess re-normalised with its own training part: stored values are not comparable.
    assert not np.array_equal(after.features[: before.rows], before.features)


def test_new_bars_plan_an_update_and_the_rest_a_fit_from_scratch(grown):
    before, after, checkpoint = grown

    def plan(previous=checkpoint, arrays=after, fingerprint=FINGERPRINT, evaluate=EVALUATE, **update):
        return plan_training(previous, None, arrays, fingerprint, {**UPDATE_SETTINGS, **update}, evaluate)

    assert plan() == Plan(UPDATE, "300 new bars", checkpoint)
    assert plan().label == "update: 300 new bars"
    assert plan(previous=None).label == "full fit: no previous model"
    assert plan(fingerprint="0" * 64).label == "re-train: settings or code changed"
    assert plan(arrays=before).label == "re-train: no new bars"
    # As many rows as the model has seen, the last one changed (a repaired cut line): a change.
    repaired = before.row_digests.copy()
    repaired[-1] ^= np.uint64(1)
    assert plan(arrays=replace(before, row_digests=repaired)).label == "re-train: earlier bars changed"
    assert plan(enabled=False).label == "re-train: update.enabled is false"
    assert plan(full_every=0).label == "re-train: update.full_every: 0 update(s) since the full fit"
    assert plan(evaluate={"production": "refit", "folds": 0}).kind == FULL
    digests = after.row_digests.copy()
    digests[100] ^= np.uint64(1)
    assert plan(arrays=replace(after, row_digests=digests)).label == "re-train: earlier bars changed"
    gaps = replace(after, gap_bars=np.array([500], dtype=np.int64))
    assert plan(arrays=gaps).label == "re-train: earlier bars changed"
    without_lineage = {key: value for key, value in checkpoint.items() if key != "lineage"}
    assert plan(previous=without_lineage).kind == FULL


def test_an_update_keeps_the_first_fits_normalisation(grown):
    before, after, checkpoint = grown
    kept = with_normalisation(after, checkpoint["normalisation"])
    assert np.array_equal(kept.feature_mean, before.feature_mean) and kept.target_std == before.target_std
    # The earlier rows' inputs are what the model was trained on (up to float32 rounding).
    np.testing.assert_allclose(kept.features[: before.rows], before.features, atol=1e-5)
    np.testing.assert_allclose(kept.targets[: before.rows], before.targets, atol=1e-5)


def test_an_update_starts_from_the_previous_weights_and_trains_only_its_windows(grown):
    before, after, checkpoint = grown
    kept = with_normalisation(after, checkpoint["normalisation"])
    from_row = before.train_end - 50
    start = StartState(checkpoint["state_dict"], checkpoint["optimizer_state"], from_row)
    updated = train_and_evaluate(kept, MODEL, replace(LOOP, epochs=1), torch.device("cpu"), start)
    fresh = train_and_evaluate(kept, MODEL, replace(LOOP, epochs=1), torch.device("cpu"))
    # Epoch 0 is the previous model on the new validation windows: the best of the epochs.
    assert (
        math.isfinite(updated.trained.start_val_loss) and updated.evaluated.val_loss <= updated.trained.start_val_loss
    )
    if updated.trained.best_epoch == 0:
        for key, value in checkpoint["state_dict"].items():
            torch.testing.assert_close(updated.trained.model.state_dict()[key], value)
    # The naive baseline is the full fit's (every training window), the work a fraction of it.
    assert updated.evaluated.naive_val_loss == fresh.evaluated.naive_val_loss
    assert updated.trained.history[0]["train_loss"] != fresh.trained.history[0]["train_loss"]
    assert fresh.trained.start_val_loss is None and updated.trained.optimizer_state["state"]


def test_an_update_far_below_its_full_fits_skill_is_named():
    full_fit = {"skill": 0.05, "test_skill": 0.04}
    assert skill_drop({"skill": 0.04, "test_skill": 0.03}, full_fit, 0.02) is None
    assert skill_drop({"skill": 0.04, "test_skill": 0.01}, full_fit, 0.02) == (
        "the update's test skill +0.0100 is more than update.max_skill_drop (0.02) below the full fit's +0.0400"
    )
    assert skill_drop({"skill": float("nan")}, full_fit, 0.02) is None


def test_the_dry_run_labels_say_update_or_retrain_and_why(grown, tmp_path):
    before, _, _ = grown
    lineage = {"updates": 2, "rows": before.rows - 10}

    def label(changed=False, update=UPDATE_SETTINGS, lineage=lineage, preprocess_runs=True, rows=lambda: None):
        return expected_fit(changed, update, EVALUATE, lineage, preprocess_runs, rows)

    assert label() == NEW_BARS
    assert label(changed=True) == SETTINGS_CHANGED
    assert label(update={**UPDATE_SETTINGS, "full_every": 2}).startswith("re-train: update.full_every: 2")
    save_arrays(before, tmp_path / "a.npz")
    assert array_rows(str(tmp_path / "a.npz")) == before.rows
    rows = lambda: array_rows(str(tmp_path / "a.npz"))  # noqa: E731
    assert label(preprocess_runs=False, rows=rows) == "update: 10 new bars"
    (tmp_path / "broken.npz").write_bytes(b"not a zip")
    assert array_rows(str(tmp_path / "broken.npz")) is None
    assert zipfile.is_zipfile(tmp_path / "a.npz")
