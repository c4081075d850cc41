"""Walk-forward folds (rnnfleet.train.walkforward) and the re-fit for production, in process: where
the folds lie, that nothing after a fold's origin reaches its training, that finished folds
are read back instead of trained again, and that a re-fit runs its epochs on every row."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
import yaml
from conftest import REPO

from rnnfleet.errors import SettingsError
from rnnfleet.prep.gaps import window_numbers
from rnnfleet.prep.prepare import prepare_dataset
from rnnfleet.prep.split import embargo_rows
from rnnfleet.synthetic import write_synthetic_csv
from rnnfleet.train.evaluate import score_test_period, train_and_evaluate
from rnnfleet.train.loop import LoopSettings, all_rows_train, refit_on_all_rows
from rnnfleet.train.walkforward import (
    absolute_rows,
    fold_arrays,
    fold_plan,
    folds_summary,
    is_own_split,
    run_folds,
)
from rnnfleet.workflow.config_check import config_problems

SEQ_LEN, HORIZON = 16, 1
SMALL_MODEL = {"cell": "gru", "hidden_size": 8, "num_layers": 1, "dropout": 0.0}
SMALL_LOOP = LoopSettings(seq_len=SEQ_LEN, batch_size=64, lr=0.003, epochs=3, patience=3, seed=0, amp="off")


@pytest.fixture(scope="module")
def arrays(tmp_path_factory):
    path = write_synthetic_csv(tmp_path_factory.mktemp("folds") / "A_1m.csv", 1500, 3)
    return prepare_dataset(path, SEQ_LEN, HORIZON, val_fraction=0.2, test_fraction=0.1)[0]


def plan_of(arrays, folds, window="expanding", step=0):
    return fold_plan(arrays.rows, arrays.split, folds, window, step, SEQ_LEN, HORIZON, arrays.warmup, "A_1m")


@pytest.mark.parametrize("window", ["expanding", "sliding"])
def test_folds_test_periods_follow_their_training_back_to_back_the_latest_ending_at_the_last_row(arrays, window):
    plan = plan_of(arrays, 3, window)
    test_rows = arrays.rows - arrays.split.test_start
    embargo = embargo_rows(SEQ_LEN, HORIZON, arrays.warmup)
    parts = [absolute_rows(fold) for fold in plan]
    assert [fold.number for fold in plan] == [1, 2, 3]
    assert parts[-1][4:] == (arrays.split.test_start, arrays.rows)  # the latest is the test part
    for (_, train_end, val_start, val_end, test_start, test_end), later in zip(parts, parts[1:] + [None], strict=True):
        assert val_start - train_end == embargo == test_start - val_end  # the parts lie as in the dataset's split
        assert val_end - val_start == arrays.split.val_end - arrays.split.val_start
        assert test_end - test_start == test_rows
        if later is not None:
            assert later[4] == test_end  # step 0: the next test period starts where this one ends
    if window == "expanding":
        assert {part[0] for part in parts} == {0}
        assert is_own_split(plan[-1], arrays.rows, arrays.split)
        assert not any(is_own_split(fold, arrays.rows, arrays.split) for fold in plan[:-1])
    else:
        assert [part[0] for part in parts] == [0, test_rows, 2 * test_rows]  # slides by the step
        assert len({fold.end_row - fold.first_row for fold in plan}) == 1  # every fold as long
        assert not any(is_own_split(fold, arrays.rows, arrays.split) for fold in plan)


def test_a_step_moves_the_origins_that_many_rows(arrays):
    plan = plan_of(arrays, 4, step=25)
    origins = [absolute_rows(fold)[4] for fold in plan]
    assert np.diff(origins).tolist() == [25, 25, 25] and origins[-1] == arrays.split.test_start


def test_too_many_folds_for_the_rows_is_one_line_naming_the_dataset_and_the_settings(arrays):
    with pytest.raises(SettingsError) as raised:  # not a data error: the file needs no fixing
        plan_of(arrays, 50)
    message = str(raised.value)
    assert message.startswith("A_1m: evaluate.folds=50") and "lower evaluate.folds or evaluate.step" in message
    assert "\n" not in message


def test_a_fold_is_normalised_by_its_own_training_part(arrays):
    own, oldest = plan_of(arrays, 3)[-1], plan_of(arrays, 3)[0]
    same = fold_arrays(arrays, own)  # the dataset's split: the array file's statistics again
    np.testing.assert_allclose(same.features, arrays.features, atol=1e-4)
    np.testing.assert_allclose(same.feature_mean, arrays.feature_mean, atol=1e-5)
    first = fold_arrays(arrays, oldest)
    train_rows = first.features[: oldest.split.train_end].astype(np.float64)
    np.testing.assert_allclose(train_rows.mean(axis=0), 0, atol=1e-4)
    np.testing.assert_allclose(train_rows.std(axis=0), 1, atol=1e-3)
    assert first.rows == oldest.end_row and first.split == oldest.split


def test_nothing_after_a_folds_origin_reaches_its_training(arrays):
    torch.set_num_threads(1)
    fold = plan_of(arrays, 3)[0]
    origin = fold.first_row + fold.split.test_start
    first_test_input = origin - SEQ_LEN + 1  # the first bar a test window of the fold reads
    rng = np.random.default_rng(1)
    # The raw values: what a fold normalises with its own training part's statistics.
    features = arrays.raw_features.copy()
    features[first_test_input:] *= rng.uniform(0.5, 1.5, features[first_test_input:].shape)
    targets = arrays.raw_targets.copy()
    targets[origin:] = rng.normal(size=len(targets) - origin) * targets.std()
    perturbed = replace(arrays, raw_features=features, raw_targets=targets)
    cpu = torch.device("cpu")
    result = train_and_evaluate(fold_arrays(arrays, fold), SMALL_MODEL, SMALL_LOOP, cpu)
    result_perturbed = train_and_evaluate(fold_arrays(perturbed, fold), SMALL_MODEL, SMALL_LOOP, cpu)
    for name, weights in result.trained.model.state_dict().items():
        assert torch.equal(weights, result_perturbed.trained.model.state_dict()[name]), name
    assert result.evaluated.val_loss == result_perturbed.evaluated.val_loss
    assert not np.array_equal(
        result.evaluated.test_outputs, result_perturbed.evaluated.test_outputs
    )  # the test period did change


def fake_training(calls: list):
    """A train_and_score that records which fold (by its first test row) it trained."""

    class Trained:
        best_epoch, epochs_run, train_seconds = 1, 1, 0.0

    class Evaluated:
        skill = 0.1

        def __init__(self, test_scores: dict):
            self.test_scores = test_scores

    def train_and_score(part):
        calls.append(part.split.test_start)
        return Trained(), Evaluated({"test_skill": 0.01 * len(calls), "test_skill_low": -0.1})

    return train_and_score


def test_finished_folds_are_read_back_and_only_the_others_trained(arrays, tmp_path):
    plan = plan_of(arrays, 3)[:-1]
    folder = tmp_path / "A_1m" / "key"
    calls: list[int] = []
    first_entries = run_folds(plan, arrays, SEQ_LEN, folder, fake_training(calls), lambda line: None)
    assert len(calls) == 2 and sorted(first_entries) == [1, 2]
    (folder / "fold-2.json").write_text("{not json")  # a fold file cut short
    calls.clear()
    lines: list[str] = []
    entries = run_folds(plan, arrays, SEQ_LEN, folder, fake_training(calls), lines.append)
    assert calls == [plan[1].split.test_start]  # fold 2 only
    assert entries[1] == first_entries[1]
    assert any(line.startswith("fold 1: scores read back from") for line in lines)
    assert json.loads((folder / "fold-2.json").read_text())["fold"] == 2


def test_another_settings_key_starts_over_and_removes_the_old_folds(arrays, tmp_path):
    plan = plan_of(arrays, 2)[:-1]
    run_folds(plan, arrays, SEQ_LEN, tmp_path / "A_1m" / "old", fake_training([]), lambda line: None)
    calls: list[int] = []
    run_folds(plan, arrays, SEQ_LEN, tmp_path / "A_1m" / "new", fake_training(calls), lambda line: None)
    assert len(calls) == 1
    assert [path.name for path in (tmp_path / "A_1m").iterdir()] == ["new"]


def test_the_folds_summary_gives_mean_spread_and_counts():
    entries = [{"test_skill": skill, "test_skill_low": low} for skill, low in [(0.2, 0.1), (-0.1, -0.3), (0.05, -0.01)]]
    summary = folds_summary(entries)
    assert summary["folds_skill_mean"] == pytest.approx(0.05)
    assert summary["folds_skill_sd"] == pytest.approx(np.std([0.2, -0.1, 0.05], ddof=1))
    assert (summary["folds_positive"], summary["folds_beat"], summary["folds_scored"]) == (2, 1, 3)
    assert folds_summary(entries[:1])["folds_skill_sd"] is None


def test_a_refit_trains_its_epochs_on_every_row_without_validation(arrays):
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    scored = train_and_evaluate(arrays, SMALL_MODEL, SMALL_LOOP, cpu)
    refit = refit_on_all_rows(arrays, SMALL_MODEL, replace(SMALL_LOOP, patience=1), cpu, epochs=2)
    assert refit.epochs_run == refit.best_epoch == 2  # no early stopping, the last epoch kept
    assert math.isnan(refit.val_objective) and refit.best_pass is None  # no validation pass
    every = window_numbers(arrays.rows, all_rows_train(arrays).split, arrays.gap_bars, SEQ_LEN, HORIZON, arrays.warmup)
    scored_windows = window_numbers(arrays.rows, arrays.split, arrays.gap_bars, SEQ_LEN, HORIZON, arrays.warmup)
    assert len(every.train) > len(scored_windows.train) + len(scored_windows.val) + len(scored_windows.test)
    assert any(
        not torch.equal(weights, refit.model.state_dict()[name])
        for name, weights in scored.trained.model.state_dict().items()
    )
    scores = score_test_period(arrays, scored.evaluated, SEQ_LEN, 1.0, 10, 200)
    assert scores["test_windows"] > 0


def test_folds_without_a_test_part_are_refused_before_any_job():
    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    problems = config_problems({"preprocess": {"test_fraction": 0}, "evaluate": {"folds": 3}}, schema)
    assert problems == [
        "config key 'evaluate.folds' = 3 needs a test part, and 'preprocess.test_fraction' is 0; "
        "allowed: evaluate.folds 0, or a test_fraction above 0"
    ]
    assert config_problems({"evaluate": {"folds": 3, "window": "sliding", "step": 100}}, schema) == []
    assert config_problems({"evaluate": {"window": "rolling"}}, schema)  # not a window
