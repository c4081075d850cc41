"""Several horizons and quantiles (rnnfleet.heads, rnnfleet.scores.intervals, rnnfleet.train.evaluate): the
pinball loss, non-crossing quantiles and conformalised quantile intervals against
hand-computed cases, the binomial interval of a coverage, the targets of several horizons,
and the settings that keep a project without heads exactly as it was."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import TINY_ROWS, schema_defaults

from rnnfleet.errors import UserError
from rnnfleet.forecast.predict import forecast_at_last_bar
from rnnfleet.heads import Heads, heads_of_settings, pinball, pinball_losses
from rnnfleet.prep.prepare import prepare_dataset
from rnnfleet.prep.targets import TARGETS
from rnnfleet.scores import intervals
from rnnfleet.settings import preprocess_settings, train_hyper_parameters
from rnnfleet.synthetic import write_synthetic_csv
from rnnfleet.train.evaluate import train_and_evaluate
from rnnfleet.train.fit import Settings, fit_dataset
from rnnfleet.train.loop import LoopSettings, usable_windows, window_outputs, window_view


def test_the_pinball_loss_by_hand():
    # q = 0.1, 0.5, 0.9; target 1.0; forecast 0.0 (below): q * 1; forecast 2.0 (above): (1 - q) * 1.
    quantiles = torch.tensor([0.1, 0.5, 0.9])
    below = pinball(torch.zeros(1, 1, 3), torch.ones(1, 1), quantiles, reduction="sum")
    above = pinball(torch.full((1, 1, 3), 2.0), torch.ones(1, 1), quantiles, reduction="sum")
    assert below.item() == pytest.approx(0.1 + 0.5 + 0.9)
    assert above.item() == pytest.approx(0.9 + 0.5 + 0.1)
    assert pinball(torch.zeros(1, 1, 3), torch.ones(1, 1), quantiles).item() == pytest.approx(1.5 / 3)
    numbers = pinball_losses(
        np.array([[0.0, 0.0, 0.0], [2.0, 2.0, 2.0]]), np.array([1.0, 1.0]), np.array([0.1, 0.5, 0.9])
    )
    np.testing.assert_allclose(numbers, [0.5, 0.5])


def test_the_pinball_loss_is_least_at_the_asked_quantile():
    values = torch.from_numpy(np.random.default_rng(0).standard_normal(20_000)).float()
    candidates = torch.linspace(-3, 3, 601)
    for q in (0.05, 0.5, 0.9):
        losses = [pinball(c.expand(len(values), 1, 1), values[:, None], torch.tensor([q])).item() for c in candidates]
        best = candidates[int(np.argmin(losses))].item()
        assert best == pytest.approx(float(np.quantile(values.numpy(), q)), abs=0.02)


def test_quantile_outputs_never_cross_and_the_median_is_always_a_head():
    heads = Heads.of([1, 5], [0.95, 0.05])
    assert heads.quantiles == (0.05, 0.5, 0.95) and heads.point == 1 and heads.count == 6
    assert heads.pairs() == [(0, 2, 0.9)] and heads.pair_quantiles() == [[0.05, 0.95]]
    crossed = torch.tensor([[3.0, 1.0, 2.0, -1.0, 0.0, -2.0]])  # horizon 1: 3, 1, 2; horizon 5: -1, 0, -2
    shaped = heads.shaped(crossed)
    assert shaped.tolist() == [[[1.0, 2.0, 3.0], [-2.0, -1.0, 0.0]]]
    assert Heads.of([1]).single and Heads.of([1]).shaped(torch.ones(4, 1)).shape == (4,)
    assert Heads.of([1, 5]).shaped(torch.ones(4, 2)).shape == (4, 2, 1)
    assert Heads.of([1], [0.1, 0.5]).pairs() == []  # 0.9 not asked: no central interval
    assert Heads.of([1], [0.07, 0.93]).pairs() == [(0, 2, 0.86)]  # 1 - 0.07 != 0.93 in floats


def test_quantiles_of_a_classification_target_are_refused_naming_the_key():
    with pytest.raises(UserError, match=r"config key 'train.quantiles' = \[0.1, 0.9\]: target direction"):
        heads_of_settings({"horizon": 1, "quantiles": [0.1, 0.9]}, TARGETS["direction"])


def test_conformalised_quantile_scores_and_margin_by_hand():
    lower, upper = np.zeros(9), np.full(9, 2.0)
    actual = np.array([-3.0, -1.0, 0.5, 1.0, 1.5, 2.5, 4.0, 1.0, 1.0])
    scores = intervals.pair_scores(lower, upper, actual)
    # max(lower - y, y - upper): 3, 1, -0.5, -1, -0.5, 0.5, 2, -1, -1, sorted
    assert scores.tolist() == [-1.0, -1.0, -1.0, -0.5, -0.5, 0.5, 1.0, 2.0, 3.0]
    assert intervals.half_width(scores, 0.8) == 2.0  # ceil(10 * 0.8) = 8th smallest
    assert intervals.half_width(scores, 0.5) == -0.5  # 5th smallest: the raw quantiles were too wide
    heads = Heads.of([1], [0.1, 0.5, 0.9])
    outputs = np.column_stack([np.zeros(2), np.ones(2), np.full(2, 2.0)])
    (coverage, low, high), *_ = intervals.horizon_bands(
        outputs[:, 1], outputs, scores[None, :], heads, TARGETS["log_return"], 0.0, 1.0
    )
    assert coverage == pytest.approx(0.8) and low.tolist() == [-2.0, -2.0] and high.tolist() == [4.0, 4.0]


def test_on_exchangeable_data_conformalised_quantiles_hold_at_least_their_coverage():
    """CQR's promise: with n calibration windows a new window is inside with probability
    between c and c + 1 / (n + 1), whatever the raw quantiles (here too narrow)."""
    rng = np.random.default_rng(1)
    held = []
    for _ in range(400):
        calibration, new = rng.standard_t(4, 40), rng.standard_t(4, 500)
        scores = intervals.pair_scores(np.full(40, -0.5), np.full(40, 0.5), calibration)
        margin = intervals.half_width(scores, 0.9)
        held.append(np.mean((new >= -0.5 - margin) & (new <= 0.5 + margin)))
    assert 0.9 <= np.mean(held) <= 0.9 + 1 / 41 + 0.005


def test_the_binomial_interval_of_a_coverage_is_wilsons():
    low, high = intervals.wilson_interval(90, 100)
    assert low == pytest.approx(0.8256, abs=1e-4) and high == pytest.approx(0.9448, abs=1e-4)
    assert intervals.wilson_interval(100, 100)[1] == 1.0 and math.isnan(intervals.wilson_interval(0, 0)[0])


def test_several_horizons_give_each_horizon_the_targets_one_horizon_gives(tmp_path):
    csv_path = write_synthetic_csv(tmp_path / "A_1m.csv", TINY_ROWS * 2, 3)
    several, _ = prepare_dataset(csv_path, seq_len=16, horizon=[1, 5, 15], val_fraction=0.2)
    assert several.horizons == (1, 5, 15) and several.horizon == 15 and several.targets.shape == (several.rows, 3)
    longest, _ = prepare_dataset(csv_path, seq_len=16, horizon=15, val_fraction=0.2)
    assert several.split == longest.split  # embargoes and parts sized for the longest
    for k, horizon in enumerate((1, 5, 15)):
        alone, _ = prepare_dataset(csv_path, seq_len=16, horizon=horizon, val_fraction=0.2)
        raw = several.targets[:, k] * np.float64(several.target_std[k]) + several.target_mean[k]
        alone_raw = alone.targets * np.float64(alone.target_std) + alone.target_mean
        np.testing.assert_allclose(raw, alone_raw[: several.rows], rtol=1e-5, atol=1e-7)


def test_a_model_of_heads_trains_and_its_test_outputs_have_ordered_quantiles(tmp_path):
    csv_path = write_synthetic_csv(tmp_path / "A_1m.csv", TINY_ROWS * 3, 4)
    arrays, _ = prepare_dataset(csv_path, seq_len=16, horizon=[1, 5], val_fraction=0.2)
    model = {"cell": "gru", "hidden_size": 8, "num_layers": 1, "dropout": 0.0}
    settings = LoopSettings(
        seq_len=16, batch_size=64, lr=0.01, epochs=2, patience=2, seed=0, amp="off", quantiles=(0.1, 0.9)
    )
    result = train_and_evaluate(arrays, model, settings, torch.device("cpu"))
    assert result.evaluated.test_outputs.shape == (len(result.evaluated.test_numbers), 2, 3)
    assert np.all(np.diff(result.evaluated.test_outputs, axis=-1) >= 0)
    assert result.evaluated.calibration.shape == (2, 1, len(usable_windows(arrays, 16).val))  # per horizon, per pair
    assert result.evaluated.naive_output.shape == (2, 3) and np.all(
        np.diff(result.evaluated.naive_output, axis=-1) >= 0
    )


@pytest.mark.parametrize("quantiles", [[], [0.1, 0.9]])
def test_the_calibration_is_the_best_epochs_as_a_pass_of_its_own_after_training_gives_it(tmp_path, quantiles):
    """The intervals are calibrated on the outputs the best epoch's validation pass kept (not
    those of the last epoch, and without a pass of their own): the same scores as the kept
    model's outputs computed afresh."""
    csv_path = write_synthetic_csv(tmp_path / "A_1m.csv", TINY_ROWS * 3, 4)
    arrays, _ = prepare_dataset(csv_path, seq_len=16, horizon=[1, 5], val_fraction=0.2)
    model = {"cell": "gru", "hidden_size": 8, "num_layers": 1, "dropout": 0.0}
    settings = LoopSettings(
        seq_len=16, batch_size=32, lr=0.05, epochs=6, patience=6, seed=0, amp="off", quantiles=tuple(quantiles)
    )
    result = train_and_evaluate(arrays, model, settings, torch.device("cpu"))
    assert result.trained.best_epoch < result.trained.epochs_run  # the kept model is not the last epoch's
    val_numbers = torch.from_numpy(usable_windows(arrays, 16).val)
    afresh = window_outputs(
        result.trained.model,
        window_view(torch.from_numpy(arrays.features), 16),
        None,
        val_numbers,
        result.evaluated.heads,
    )
    val_targets = arrays.targets[16 - 1 :][usable_windows(arrays, 16).val]
    np.testing.assert_array_equal(
        result.evaluated.calibration, intervals.head_calibration(afresh, val_targets, result.evaluated.heads)
    )
    # val_loss and skill: the first horizon's point forecast (the median) in the target's own
    # loss, as test_loss; the training loss early stopping compared keeps a name of its own.
    point, naive = (
        afresh[:, 0, result.evaluated.heads.point],
        result.evaluated.naive_output[0, result.evaluated.heads.point],
    )
    actual = val_targets[:, 0].astype(np.float64)
    assert result.evaluated.val_loss == pytest.approx(np.mean((point - actual) ** 2), rel=1e-6)
    assert result.evaluated.naive_val_loss == pytest.approx(np.mean((naive - actual) ** 2), rel=1e-6)
    key = "pinball" if quantiles else "mean_loss"
    assert (
        result.trained.val_objective
        == min(entry[f"val_{key}"] for entry in result.trained.history)
        != result.evaluated.val_loss
    )


def test_without_heads_the_params_and_arrays_are_those_of_before_heads_existed():
    config = {
        "train": {"horizon": 5, "horizons": [], "quantiles": [], "seq_len": 16, "threads": 2},
        "columns": {},
        "format": {},
        "preprocess": {"max_bad_fraction": 0, "max_gap": "off", "val_fraction": 0.2, "test_fraction": 0.1},
        "features": ["ohlc_returns"],
        "target": "log_return",
        "quality": {},
    }
    assert train_hyper_parameters(config) == {"horizon": 5, "seq_len": 16}
    assert preprocess_settings(config)["horizon"] == 5
    config["train"] |= {"horizons": [15], "quantiles": [0.5]}
    assert preprocess_settings(config)["horizon"] == 15  # one horizon in the list: the arrays of train.horizon 15
    assert train_hyper_parameters(config)["quantiles"] == [0.5]
    config["train"]["horizons"] = [1, 15]
    assert preprocess_settings(config)["horizon"] == [1, 15]


def test_walk_forward_folds_and_a_refit_score_and_calibrate_every_horizon(tmp_path):
    csv_path = write_synthetic_csv(tmp_path / "A_1m.csv", TINY_ROWS * 3, 5)
    arrays, _ = prepare_dataset(csv_path, seq_len=16, horizon=[1, 5], val_fraction=0.2, test_fraction=0.2)
    train = {**schema_defaults("train"), "seq_len": 16, "batch_size": 64, "epochs": 1, "amp": "off"}
    settings = Settings(
        {"cell": "gru", "hidden_size": 8, "num_layers": 1, "dropout": 0.0},
        {**train, "horizons": [1, 5], "quantiles": [0.1, 0.9]},
        {**schema_defaults("evaluate"), "folds": 2, "production": "refit", "bootstrap": 200},
        schema_defaults("update"),
    )
    fitted = fit_dataset("A_1m", arrays, (None, "no previous model"), settings, torch.device("cpu"), {})
    assert fitted.folds == 2 and fitted.refitted
    assert [entry["horizon"] for entry in fitted.metrics["horizons"]] == [1, 5]
    for fold in fitted.metrics["folds"]:  # each fold scored at every horizon, the first unsuffixed
        assert [entry["horizon"] for entry in fold["horizons"]] == [1, 5]
        assert fold["test_skill"] == fold["horizons"][0]["test_skill"]
    # The refit has no validation part of its own: the calibration is the scored model's.
    assert tuple(fitted.checkpoint["calibration"]["scores"].shape) == (2, 1, fitted.metrics["val_windows"])
    assert fitted.checkpoint["model_config"]["outputs"] == 6
    assert "forecast_heads" not in fitted.metrics  # the forecast at the last bar is the train job's, after the fit
    heads = forecast_at_last_bar(fitted.model, fitted.checkpoint, arrays)["forecast_heads"]
    for horizon in (1, 5):
        assert heads[f"forecast_h{horizon}_q10"] <= heads[f"forecast_h{horizon}"]
        assert heads[f"forecast_h{horizon}"] <= heads[f"forecast_h{horizon}_q90"]
        assert heads[f"forecast_h{horizon}_low_80"] < heads[f"forecast_h{horizon}_high_80"]
