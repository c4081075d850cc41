"""Honest scores: the three-part split and its embargo, the test-period statistics
(rnnfleet.scores.test_period) against hand-computed cases, no test bar reaching training, refused
old array and model files, the forest chart."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
import yaml
from conftest import REPO

from rnnfleet.errors import UserError
from rnnfleet.prep.gaps import window_numbers
from rnnfleet.prep.prepare import DataError, prepare_dataset, split_and_normalise
from rnnfleet.prep.split import SplitSettings
from rnnfleet.scores import test_period
from rnnfleet.synthetic import synthetic_bars, write_synthetic_csv
from rnnfleet.train.evaluate import score_test_period, train_and_evaluate
from rnnfleet.train.loop import LoopSettings
from rnnfleet.workflow.config_check import config_problems

# --- the split ----------------------------------------------------------------------------


def touched_bars(window_ends: np.ndarray, seq_len: int, horizon: int, warmup: int) -> set[int]:
    """Every bar a window (inputs or target) ending at these feature rows touches, by brute force."""
    return {bar for end in window_ends for bar in range(end - seq_len + 1, end + warmup + horizon + 1)}


@pytest.mark.parametrize(
    ("rows", "seq_len", "horizon", "warmup", "val_fraction", "test_fraction"),
    [(1000, 10, 3, 1, 0.2, 0.15), (500, 30, 1, 3, 0.1, 0.3), (2000, 60, 5, 2, 0.25, 0.05)],
)
def test_no_bar_is_touched_by_windows_of_two_parts(rows, seq_len, horizon, warmup, val_fraction, test_fraction):
    split = SplitSettings(seq_len, horizon, val_fraction, test_fraction, warmup).points(rows)
    parts = window_numbers(rows, split, np.zeros(0, dtype=np.int64), seq_len, horizon, warmup)
    train, val, test = (touched_bars(part + seq_len - 1, seq_len, horizon, warmup) for part in parts)
    assert train and val and test
    assert max(train) < min(val) and max(val) < min(test)
    assert rows - split.test_start == round(rows * test_fraction)  # the test part is the last test_fraction


def test_test_fraction_zero_leaves_no_test_part():
    split = SplitSettings(10, 1, 0.2, 0.0).points(1000)
    assert split.test_start == split.val_end == 1000


def test_too_few_rows_for_the_test_part_says_what_is_needed_and_that_is_enough():
    seq_len, horizon, warmup = 20, 1, 1
    with pytest.raises(DataError, match="too few rows for one training window plus validation and test") as raised:
        split_and_normalise(np.zeros((60, 5)), np.zeros(60), seq_len, horizon, 0.2, 1.0, test_fraction=0.15)
    message = str(raised.value)
    assert "preprocess.test_fraction=0.15" in message and "\n" not in message
    needed_bars = int(message.split("need at least ")[1].split()[0])
    needed_rows = needed_bars - warmup - horizon  # feature rows: bars without warm-up and last target
    arrays = split_and_normalise(np.zeros((needed_rows, 5)), np.zeros(needed_rows), seq_len, horizon, 0.2, 1.0)
    assert arrays.split.test_start < arrays.rows
    with pytest.raises(DataError, match="too few rows"):
        split_and_normalise(np.zeros((needed_rows - 1, 5)), np.zeros(needed_rows - 1), seq_len, horizon, 0.2, 1.0)


def test_fractions_that_leave_nothing_to_train_are_refused_naming_both_keys():
    with pytest.raises(UserError, match="preprocess.val_fraction .* preprocess.test_fraction"):
        SplitSettings(10, 1, 0.5, 0.5).points(1000)
    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    problems = config_problems({"preprocess": {"val_fraction": 0.6, "test_fraction": 0.4}}, schema)
    assert problems == [
        "config keys 'preprocess.val_fraction' = 0.6 and 'preprocess.test_fraction' = 0.4 add up to 1; "
        "allowed: a sum below 1 (the rest trains)"
    ]
    assert config_problems({"preprocess": {"val_fraction": 0.6}}, schema) == []  # 0.6 + the default 0.15


# --- the statistics, by hand --------------------------------------------------------------


def test_skill_is_one_minus_the_loss_ratio():
    assert test_period.skill(np.array([1.0, 1.0]), np.array([2.0, 2.0])) == 0.5
    assert test_period.skill(np.array([3.0]), np.array([2.0])) == -0.5
    assert math.isnan(test_period.skill(np.array([1.0]), np.array([0.0])))


def test_window_losses_are_squared_error_and_log_loss():
    np.testing.assert_allclose(test_period.window_losses(np.array([1.0, -2.0]), np.array([0.5, 1.0]), False), [0.25, 9])
    # logit 0 -> p = 0.5 -> log 2 either way; logit log(3) -> p = 0.75: -log(0.75) for a 1, -log(0.25) for a 0
    logits, labels = np.array([0.0, 0.0, math.log(3), math.log(3)]), np.array([1.0, 0.0, 1.0, 0.0])
    expected = [math.log(2), math.log(2), -math.log(0.75), -math.log(0.25)]
    np.testing.assert_allclose(test_period.window_losses(logits, labels, True), expected)


def test_diebold_mariano_by_hand():
    model, baseline = np.array([1.0, 2.0, 3.0, 4.0]), np.zeros(4)  # d = 1, 2, 3, 4; mean 2.5
    # lag 0: gamma_0 = (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25; statistic 2.5 / sqrt(1.25 / 4)
    statistic, p_value = test_period.diebold_mariano(model, baseline, lag=0)
    assert statistic == pytest.approx(2.5 / math.sqrt(1.25 / 4))
    assert p_value == pytest.approx(math.erfc(statistic / math.sqrt(2)))
    # lag 1: gamma_1 = (-1.5 * -0.5 + -0.5 * 0.5 + 0.5 * 1.5) / 4 = 0.3125, Bartlett weight 1/2:
    # variance 1.25 + 2 * 0.5 * 0.3125 = 1.5625; statistic 2.5 / sqrt(1.5625 / 4) = 4
    assert test_period.diebold_mariano(model, baseline, lag=1)[0] == pytest.approx(4.0)
    statistic, p_value = test_period.diebold_mariano(np.array([1.0, 3.0]), np.array([3.0, 1.0]), lag=0)
    assert statistic == 0 and p_value == 1
    assert all(math.isnan(value) for value in test_period.diebold_mariano(np.ones(5), np.zeros(5), lag=2))


def test_the_block_is_shortened_on_short_test_periods_to_give_ten_blocks():
    assert [test_period.bootstrap_block(60, windows) for windows in (6000, 600, 300, 25, 5)] == [60, 60, 30, 2, 1]


def test_block_sums_are_circular():
    np.testing.assert_array_equal(test_period.block_sums(np.array([1.0, 2.0, 3.0, 4.0]), 3), [6, 9, 8, 7])


def test_bootstrap_with_one_block_of_the_whole_period_gives_the_skill_itself():
    rng = np.random.default_rng(1)
    model, baseline = rng.random(50), rng.random(50) + 0.5
    # Every resample is the whole series rotated: the same sums, the same skill.
    low, high = test_period.bootstrap_skill_interval(model, baseline, block=50, resamples=200, seed=3)
    assert low == pytest.approx(test_period.skill(model, baseline)) and high == pytest.approx(low)


def test_bootstrap_interval_is_deterministic_and_tells_signal_from_noise():
    rng = np.random.default_rng(2)
    actual = rng.standard_normal(2000)
    baseline = actual**2  # the zero forecast
    signal = (0.5 * actual + 0.5 * rng.standard_normal(2000) - actual) ** 2  # expected skill 1 - 0.5 = 0.5
    noise = (0.05 * rng.standard_normal(2000) - actual) ** 2  # a forecast of pure noise
    first = test_period.bootstrap_skill_interval(signal, baseline, block=20, resamples=500, seed=0)
    assert first == test_period.bootstrap_skill_interval(signal, baseline, block=20, resamples=500, seed=0)
    assert first != test_period.bootstrap_skill_interval(signal, baseline, block=20, resamples=500, seed=1)
    assert 0.4 < first[0] < first[1] < 0.6
    low, high = test_period.bootstrap_skill_interval(noise, baseline, block=20, resamples=500, seed=0)
    assert low < 0 < high and test_period.verdict(low, high) == test_period.NOT_DISTINGUISHABLE
    assert test_period.verdict(*first) == test_period.BEATS and test_period.verdict(-0.2, -0.1) == test_period.WORSE


def test_hit_rate_and_sign_trading_by_hand():
    forecasts, actual = np.array([1.0, -1.0, 2.0, 0.5]), np.array([0.1, 0.2, -0.3, 0.0])
    assert test_period.hit_rate(forecasts, actual) == pytest.approx(1 / 3)  # the flat bar counts for neither
    # long 0.001 and short -0.002: +10 and +20 bps gross, 1 bps cost each; no trade on a 0 forecast
    trades = test_period.sign_trading_bps(np.array([1.0, -1.0, 0.0]), np.array([0.001, -0.002, 0.005]), 1.0)
    assert trades == pytest.approx((9 + 19) / 2)
    assert math.isnan(test_period.sign_trading_bps(np.zeros(3), np.ones(3), 1.0))


# --- no test bar reaches training ---------------------------------------------------------

SMALL_MODEL = {"cell": "lstm", "hidden_size": 8, "num_layers": 1, "dropout": 0.0}
SMALL_LOOP = LoopSettings(seq_len=16, batch_size=64, lr=0.003, epochs=3, patience=3, seed=0, amp="off")


def test_perturbing_test_period_bars_changes_no_trained_weight(tmp_path):
    torch.set_num_threads(1)
    seq_len = SMALL_LOOP.seq_len
    bars = synthetic_bars(1500, seed=5)
    bars.to_csv(tmp_path / "A_1m.csv", index=False)
    arrays, _ = prepare_dataset(tmp_path / "A_1m.csv", seq_len, horizon=2, val_fraction=0.2, test_fraction=0.15)
    # The first bar any test window touches (the first input of the window ending at test_start);
    # from there on every price and volume changes.
    first_test_bar = arrays.split.test_start - seq_len + 1
    perturbed = bars.copy()
    rng = np.random.default_rng(0)
    factor = np.exp(rng.normal(0, 0.01, len(bars) - first_test_bar))
    for column in ("open", "high", "low", "close", "volume"):
        perturbed.loc[first_test_bar:, column] = perturbed.loc[first_test_bar:, column] * factor
    perturbed.to_csv(tmp_path / "B_1m.csv", index=False)
    arrays_perturbed, _ = prepare_dataset(tmp_path / "B_1m.csv", seq_len, 2, 0.2, 0.15)
    assert arrays_perturbed.split == arrays.split
    # The perturbation reached the test windows' inputs and targets, and nothing before them.
    last_seen_row = arrays.split.val_end - 1
    assert not np.array_equal(arrays.features[first_test_bar:], arrays_perturbed.features[first_test_bar:])
    assert not np.array_equal(
        arrays.targets[arrays.split.test_start :], arrays_perturbed.targets[arrays.split.test_start :]
    )
    np.testing.assert_array_equal(arrays.features[: last_seen_row + 1], arrays_perturbed.features[: last_seen_row + 1])

    cpu = torch.device("cpu")
    result = train_and_evaluate(arrays, SMALL_MODEL, SMALL_LOOP, cpu)
    result_perturbed = train_and_evaluate(arrays_perturbed, SMALL_MODEL, SMALL_LOOP, cpu)
    weights, weights_perturbed = result.trained.model.state_dict(), result_perturbed.trained.model.state_dict()
    assert weights.keys() == weights_perturbed.keys()
    for name in weights:
        assert torch.equal(weights[name], weights_perturbed[name]), name
    assert (result.trained.best_epoch, result.evaluated.val_loss, result.trained.history) == (
        result_perturbed.trained.best_epoch,
        result_perturbed.evaluated.val_loss,
        [
            {**entry, "seconds": old["seconds"]}
            for entry, old in zip(result_perturbed.trained.history, result.trained.history, strict=True)
        ],
    )
    scores = score_test_period(arrays, result.evaluated, seq_len, cost_bps=1.0, block_bars=10, bootstrap=200)
    scores_perturbed = score_test_period(arrays_perturbed, result_perturbed.evaluated, seq_len, 1.0, 10, 200)
    assert scores["test_windows"] == scores_perturbed["test_windows"] > 0
    assert scores["test_loss"] != scores_perturbed["test_loss"]  # the same model, other test bars


def test_the_test_series_for_the_report_is_the_test_period_in_the_targets_units(tmp_path):
    """At most TEST_SERIES_POINTS test windows, evenly spread from the first to the last, with
    the actual target and the forecast in the target's units (the report's lower panel)."""
    from rnnfleet.prep.targets import TARGETS
    from rnnfleet.train.evaluate import TEST_SERIES_POINTS

    torch.set_num_threads(1)
    write_synthetic_csv(tmp_path / "A_1m.csv", 4000, 3)
    seq_len = SMALL_LOOP.seq_len
    arrays, _ = prepare_dataset(tmp_path / "A_1m.csv", seq_len, horizon=1, val_fraction=0.2, test_fraction=0.15)
    result = train_and_evaluate(arrays, SMALL_MODEL, replace(SMALL_LOOP, epochs=1), torch.device("cpu"))
    series = score_test_period(arrays, result.evaluated, seq_len, cost_bps=1.0, block_bars=10, bootstrap=50)[
        "test_series"
    ]
    numbers = result.evaluated.test_numbers
    assert len(numbers) > TEST_SERIES_POINTS and len(series["window"]) == TEST_SERIES_POINTS
    assert series["window"][0] == numbers[0] and series["window"][-1] == numbers[-1]
    assert set(series["window"]) <= set(numbers.tolist())
    target = TARGETS[arrays.target]
    picked = np.searchsorted(numbers, series["window"])
    expected_actual = target.to_units(
        arrays.targets[numbers[picked] + seq_len - 1].astype(np.float64), arrays.target_mean, arrays.target_std
    )
    expected_forecast = target.to_units(
        result.evaluated.test_outputs[picked].astype(np.float64), arrays.target_mean, arrays.target_std
    )
    np.testing.assert_allclose(series["actual"], expected_actual)
    np.testing.assert_allclose(series["forecast"], expected_forecast)
    assert series["units"] == "log_return"


# --- through the real workflow ------------------------------------------------------------


def test_an_array_file_without_a_test_period_says_to_delete_it(tmp_path):
    from rnnfleet.prep.arrays_file import load_arrays, save_arrays

    arrays, _ = prepare_dataset(write_synthetic_csv(tmp_path / "A_1m.csv", 400, 1), 16, 1, 0.2)
    save_arrays(arrays, tmp_path / "new.npz")
    with np.load(tmp_path / "new.npz") as stored:
        older = {key: stored[key] for key in stored.files if key not in ("val_end", "test_start")}
    np.savez(tmp_path / "old.npz", **older)
    assert load_arrays(tmp_path / "new.npz").split == arrays.split
    with pytest.raises(DataError, match=r"old\.npz: an array file of an older rnnfleet \(no test period\); delete it"):
        load_arrays(tmp_path / "old.npz")


def test_a_model_file_of_format_2_is_refused_saying_to_re_train(tmp_path):
    from rnnfleet.train.modelfile import ModelFileError, load_checkpoint

    torch.save({"format": "rnnfleet", "format_version": 2, "state_dict": {}}, tmp_path / "old.pt")
    with pytest.raises(
        ModelFileError, match="version 2, this rnnfleet reads version 3; it was trained before the test"
    ):
        load_checkpoint(tmp_path / "old.pt")


# --- the report's figure --------------------------------------------------------------------


def test_the_forest_chart_draws_an_estimate_outside_its_interval_and_falls_back_to_validation(tmp_path):
    from rnnfleet.report.charts import draw_skill_overview
    from rnnfleet.report.rows import best_first

    rows = [
        {"dataset": "A", "val_skill": "0.1", "test_skill": "0.05", "test_skill_low": "0.0500000001",
         "test_skill_high": "0.05", "test_verdict": test_period.BEATS},
        {"dataset": "B", "val_skill": "0.3", "test_skill": "-0.01", "test_skill_low": "-0.02",
         "test_skill_high": "0.01", "test_verdict": test_period.NOT_DISTINGUISHABLE},
        {"dataset": "C", "val_skill": "", "test_skill": "", "status": "failed"},
    ]  # fmt: skip
    assert [row["dataset"] for row in best_first(rows)] == ["A", "B", "C"]  # by test skill, not validation
    draw_skill_overview(rows, tmp_path / "skill.png")
    validation_only = [{"dataset": "A", "val_skill": "0.1"}, {"dataset": "B", "val_skill": "0.3"}]
    assert [row["dataset"] for row in best_first(validation_only)] == ["B", "A"]
    draw_skill_overview(validation_only, tmp_path / "validation.png")
    assert (tmp_path / "skill.png").stat().st_size > 1000 and (tmp_path / "validation.png").stat().st_size > 1000
