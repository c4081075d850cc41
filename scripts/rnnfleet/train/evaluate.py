"""The evaluation after the training loop, and a trained model's scores on its test period.

What it promises: evaluate() takes what the loop made (rnnfleet.train.loop.Trained) and the
windows it trained on and computes, once, with the best weights: the naive baseline, the
validation measures, the forecast intervals' calibration, the outputs on the test windows
(which nothing before it reads) and, given the scoring settings, the test period's scores;
train_and_evaluate() is the two steps in order. The model file stores the calibration
(rnnfleet.train.modelfile.calibration_record), forecasts read it back.

score_test_period() turns an Evaluated into the metrics entries of the test period: the
point forecast's loss and skill against the naive baseline with a block-bootstrap interval,
verdict and Diebold-Mariano test; the target's own extra measures; how the calibrated
intervals held (rnnfleet.scores.intervals); with quantile heads the pinball loss against the
baseline's quantiles (the training part's empirical ones); and the points of the report's
forecast-vs-actual chart. A model of several horizons
is scored at each one alone (the first horizon's entries are the unsuffixed ones, every
horizon's are in `horizons`), with the same code as a single forecast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
import torch

from rnnfleet.heads import Heads, pinball_losses
from rnnfleet.prep.arrays import PreparedArrays
from rnnfleet.prep.targets import TARGETS, Target
from rnnfleet.scores import intervals, multiple_testing, test_period
from rnnfleet.train.loop import (
    LoopSettings,
    Parts,
    StartState,
    Trained,
    loss_of,
    on_device,
    point_of,
    train,
    window_outputs,
)

# The report's forecast-vs-actual panel: enough points to see the fit, few enough to keep
# the metrics file and the model file small.
TEST_SERIES_POINTS = 400


@dataclass(frozen=True)
class Scoring:
    """The evaluate settings of the test period's scores (score_test_period), read once."""

    cost_bps: float
    block_bars: int
    bootstrap: int
    seed: int  # the bootstraps' (train.seed)

    @classmethod
    def of(cls, evaluate: dict, seed: int) -> Scoring:
        return cls(float(evaluate["cost_bps"]), int(evaluate["block_bars"]), int(evaluate["bootstrap"]), int(seed))


@dataclass(frozen=True)
class Evaluated:
    """The evaluation of a trained model (rnnfleet.train.loop.Trained), made once after it."""

    heads: Heads  # what the outputs are (rnnfleet.heads)
    # The baseline as a model output (rnnfleet.prep.targets.Target.naive_output); with heads, one
    # per horizon and quantile (horizons, quantiles or 1): quantiles of the training targets.
    naive_output: float | np.ndarray
    # The first horizon's point forecast (the median with quantiles) on the validation
    # windows, in the target's own loss: the measure of the test period's test_loss; and the
    # baseline's on the same windows. For one point forecast the loop's val_objective.
    val_loss: float
    naive_val_loss: float
    naive_val_objective: float  # the baseline's training loss on the validation windows (NaN without them)
    val_accuracy: float | None  # classification targets only
    naive_val_accuracy: float | None
    # The test windows (rnnfleet.prep.gaps.WindowNumbers.test) and the best model's outputs on
    # them (heads.shaped).
    test_numbers: np.ndarray
    test_outputs: np.ndarray
    # The best model's sorted absolute errors on the validation windows, in the scaled
    # target's units: its forecast intervals' calibration (rnnfleet.scores.intervals). Empty for
    # classification targets and fits without a validation part. With heads, one row per
    # horizon (horizons, n); with quantiles, the conformity scores of each quantile pair
    # (horizons, pairs, n) (rnnfleet.scores.intervals.pair_scores).
    calibration: np.ndarray
    test_scores: dict = field(default_factory=dict)  # score_test_period's ({}: no test part, or not scored)

    @property
    def skill(self) -> float:
        return 1.0 - self.val_loss / self.naive_val_loss if self.naive_val_loss > 0 else float("nan")


class Fit(NamedTuple):
    """One training and its evaluation: what each fit of a train job is made of."""

    trained: Trained
    evaluated: Evaluated


def train_and_evaluate(
    arrays: PreparedArrays,
    model_hparams: dict,
    settings: LoopSettings,
    device,
    start: StartState | None = None,
    scoring: Scoring | None = None,
) -> Fit:
    """The loop (rnnfleet.train.loop.train), then its evaluation, on the same windows on the device."""
    parts = on_device(arrays, settings, device)
    trained = train(parts, model_hparams, settings, start)
    return Fit(trained, evaluate(trained, parts, arrays, scoring))


def evaluate(trained: Trained, parts: Parts, arrays: PreparedArrays, scoring: Scoring | None = None) -> Evaluated:
    """With the best weights, once training and the epoch choice are over: the naive
    baseline (from every training window's target, an update's too), the validation
    measures (from the best epoch's pass in the loop), the interval calibration (from that
    pass's outputs), the outputs on the test windows (which nothing before this step
    reads) and, with `scoring`, the test period's scores."""
    heads, target, validating = parts.heads, parts.target, parts.validating
    device, best_pass = parts.targets.device, trained.best_pass
    val_targets = parts.targets[parts.val]
    naive_value = naive_outputs(heads, target, parts.targets[parts.train])
    naive_output = naive_batch(naive_value, heads, val_targets)
    naive_objective = naive_val_objective(parts)
    val_accuracy = naive_val_accuracy = None
    if target.classification and validating:
        val_accuracy = best_pass.hit_share
        naive_points = point_of(naive_output, heads)
        naive_hits = (naive_points > 0) == (val_targets.reshape(naive_points.shape) > 0.5)
        naive_val_accuracy = naive_hits.float().mean().item()
    test_outputs = window_outputs(
        trained.model, parts.windows, parts.amp_dtype, torch.from_numpy(parts.test).to(device), heads
    )
    val_loss, naive_val_loss = trained.val_objective, naive_objective
    if validating and not heads.single:
        val_loss, naive_val_loss = first_point_losses(
            best_pass.outputs, naive_value, val_targets.cpu().numpy(), heads, target
        )
    calibration = np.zeros(0, dtype=np.float32)
    if validating and not target.classification:
        calibration = intervals.head_calibration(best_pass.outputs, val_targets.cpu().numpy(), heads)
    evaluated = Evaluated(
        heads=heads,
        naive_output=naive_value,
        val_loss=val_loss,
        naive_val_loss=naive_val_loss,
        naive_val_objective=naive_objective,
        val_accuracy=val_accuracy,
        naive_val_accuracy=naive_val_accuracy,
        test_numbers=parts.test,
        test_outputs=test_outputs,
        calibration=calibration,
    )
    if scoring is None:
        return evaluated
    scores = score_test_period(
        arrays, evaluated, parts.seq_len, scoring.cost_bps, scoring.block_bars, scoring.bootstrap, scoring.seed
    )
    return replace(evaluated, test_scores=scores)


def naive_val_objective(parts: Parts) -> float:
    """The naive baseline's (naive_outputs of every training window's target) training loss
    on the validation windows, as the loop measures a model's there; NaN without them."""
    if not parts.validating:
        return math.nan
    val_targets = parts.targets[parts.val]
    naive_output = naive_batch(
        naive_outputs(parts.heads, parts.target, parts.targets[parts.train]), parts.heads, val_targets
    )
    return loss_of(parts.heads, parts.target, val_targets.device)(naive_output, val_targets).item()


def naive_outputs(heads: Heads, target: Target, train_targets: torch.Tensor) -> float | np.ndarray:
    """The naive baseline as outputs, from the training windows' targets: one number for a
    single forecast (Target.naive_output); else (horizons, quantiles or 1): each horizon's
    Target.naive_output, or with quantiles the training targets' empirical quantiles."""
    if heads.single:
        return target.naive_output(train_targets)
    columns = train_targets.reshape(len(train_targets), -1).double()
    if heads.quantiles:
        quantiles = torch.tensor(heads.quantiles, dtype=torch.float64, device=columns.device)
        return torch.quantile(columns, quantiles, dim=0).T.cpu().numpy()
    return np.array([[target.naive_output(column)] for column in columns.T])


def naive_batch(naive_value: float | np.ndarray, heads: Heads, like: torch.Tensor) -> torch.Tensor:
    """The naive outputs for as many windows as `like` (targets) holds, shaped as outputs_of's."""
    if heads.single:
        return torch.full_like(like, naive_value)
    value = torch.tensor(naive_value, dtype=torch.float32, device=like.device)
    return value.expand(len(like), *value.shape)


def first_point_losses(
    outputs: np.ndarray, naive_value: float | np.ndarray, targets: np.ndarray, heads: Heads, target: Target
) -> tuple[float, float]:
    """(model, baseline) mean loss of the first horizon's point forecast over windows whose
    outputs (outputs_of's) and targets these are, in the target's own loss, computed as the
    test period's (rnnfleet.scores.test_period.window_losses)."""
    point = outputs if heads.single else outputs[:, 0, heads.point]
    naive = naive_value if heads.single else np.asarray(naive_value)[0, heads.point]
    actual = targets.reshape(len(targets), -1)[:, 0]
    losses = test_period.window_losses(point, actual, target.classification)
    naive_losses = test_period.window_losses(np.full(len(actual), naive, np.float64), actual, target.classification)
    return float(losses.mean()), float(naive_losses.mean())


def score_test_period(
    arrays: PreparedArrays,
    result,
    seq_len: int,
    cost_bps: float,
    block_bars: int,
    bootstrap: int,
    seed: int = 0,
) -> dict:
    """The scores of the trained model on the test windows (rnnfleet.scores.test_period), as
    metrics entries: test loss, the naive baseline's, test skill with its block-bootstrap
    interval and verdict, the Diebold-Mariano test against the baseline; return targets
    also hit rate and sign trading net of cost_bps, |return| and volatility targets skill
    against persistence (the value over the last `horizon` bars), classification accuracy.
    With heads (rnnfleet.heads), those of the first horizon's point forecast, and
    `horizons`: the scores of every horizon (the first without its chart points, which are
    the unsuffixed test_series). {} when there is no test part."""
    if not len(result.test_numbers):
        return {}
    if result.heads.single:
        one = HorizonOutputs(
            result.test_numbers, result.test_outputs, result.naive_output, result.calibration, result.heads
        )
        return horizon_scores(arrays, one, seq_len, cost_bps, block_bars, bootstrap, seed)
    per_horizon = [
        horizon_scores(
            horizon_arrays(arrays, k), horizon_outputs(result, k), seq_len, cost_bps, block_bars, bootstrap, seed
        )
        for k in range(len(result.heads.horizons))
    ]
    every = [{"horizon": h, **scores} for h, scores in zip(result.heads.horizons, per_horizon, strict=True)]
    every[0].pop("test_series", None)
    return {**per_horizon[0], "horizons": every}


def horizon_arrays(arrays: PreparedArrays, k: int) -> PreparedArrays:
    """The arrays of a model of several horizons as those of horizon k alone: its targets,
    their scaling and its horizon (the windows are the model's, sized for the longest)."""
    if not arrays.horizons:
        return arrays
    return replace(
        arrays,
        targets=np.ascontiguousarray(arrays.targets[:, k]),
        target_mean=float(arrays.target_mean[k]),
        target_std=float(arrays.target_std[k]),
        horizon=arrays.horizons[k],
        horizons=(),
    )


@dataclass(frozen=True)
class HorizonOutputs:
    """What a trained model's evaluation (Evaluated) gives one of its horizons to
    score: the test windows, their point forecasts and the baseline's (scaled), the
    horizon's calibration (rnnfleet.scores.intervals.horizon_bands) and, with quantile heads, the
    quantile forecasts (windows, quantiles) and the baseline's quantiles (quantiles,)."""

    numbers: np.ndarray
    point: np.ndarray
    naive: float
    calibration: np.ndarray
    heads: Heads  # of this horizon alone
    quantiles: np.ndarray | None = None
    naive_quantiles: np.ndarray | None = None


def horizon_outputs(result, k: int) -> HorizonOutputs:
    """Horizon k's outputs of an Evaluated of heads."""
    heads = result.heads
    outputs = result.test_outputs[:, k, :]
    naive = np.asarray(result.naive_output, dtype=np.float64)
    return HorizonOutputs(
        numbers=result.test_numbers,
        point=np.ascontiguousarray(outputs[:, heads.point]),
        naive=float(naive[k, heads.point]),
        calibration=result.calibration[k] if len(result.calibration) else result.calibration,
        heads=Heads((heads.horizons[k],), heads.quantiles),
        quantiles=outputs if heads.quantiles else None,
        naive_quantiles=naive[k] if heads.quantiles else None,
    )


def horizon_scores(arrays, result: HorizonOutputs, seq_len, cost_bps, block_bars, bootstrap, seed) -> dict:
    """score_test_period of one horizon's point forecast (and quantiles, where it has them)."""
    numbers, outputs = result.numbers, result.point.astype(np.float64)
    target = TARGETS[arrays.target]
    ends = numbers + (seq_len - 1)
    actual = arrays.targets[ends].astype(np.float64)
    losses = test_period.window_losses(outputs, actual, target.classification)
    naive_losses = test_period.window_losses(np.full_like(outputs, result.naive), actual, target.classification)
    block = test_period.bootstrap_block(block_bars, len(numbers))
    low, high = test_period.bootstrap_skill_interval(losses, naive_losses, block, bootstrap, seed)
    statistic, p_value = test_period.diebold_mariano(losses, naive_losses, block)
    bands = intervals.horizon_bands(
        outputs,
        result.quantiles,
        result.calibration,
        result.heads,
        target,
        arrays.target_mean,
        arrays.target_std,
    )
    scores = {
        "test_loss": float(losses.mean()),
        "naive_test_loss": float(naive_losses.mean()),
        "test_skill": test_period.skill(losses, naive_losses),
        "test_skill_low": low,
        "test_skill_high": high,
        "test_verdict": test_period.verdict(low, high),
        "test_dm_stat": statistic,
        "test_dm_pvalue": p_value,
        "test_windows": len(numbers),
        "test_block_bars": block,
        "test_start_row": arrays.split.test_start,
        "test_series": test_series(numbers, outputs, actual, target, arrays, seq_len, bands),
        **interval_scores(result, bands, actual, target, arrays, block, bootstrap, seed),
    }
    if result.heads.quantiles:
        scores |= pinball_scores(result, actual, block, bootstrap, seed)
    if target.measures == "return":
        forecasts = target.to_units(outputs, arrays.target_mean, arrays.target_std)
        returns = target.to_units(actual, arrays.target_mean, arrays.target_std)
        scores["test_hit_rate"] = test_period.hit_rate(forecasts, returns)
        scores["test_trade_bps"] = test_period.sign_trading_bps(forecasts, returns, cost_bps)
        # Sharpe ratio of trades that do not overlap (one every `horizon` windows): the
        # fleet's deflated Sharpe ratio needs independent returns (rnnfleet.scores.multiple_testing).
        spaced = slice(None, None, arrays.horizon)
        moments = multiple_testing.sharpe_moments(
            test_period.sign_trade_returns(forecasts[spaced], returns[spaced], cost_bps)
        )
        scores.update(
            test_sharpe=moments["sharpe"],
            test_sharpe_trades=moments["trades"],
            test_trade_skew=moments["skew"],
            test_trade_kurtosis=moments["kurtosis"],
        )
    elif target.measures == "size":
        persistence = arrays.targets[ends - arrays.horizon].astype(np.float64)  # known at the window's end
        persistence_losses = test_period.window_losses(persistence, actual, classification=False)
        scores["test_persistence_skill"] = test_period.skill(losses, persistence_losses)
    else:
        scores["test_accuracy"] = float(np.mean((outputs > 0) == (actual > 0.5)))
    return scores


def pinball_scores(result: HorizonOutputs, actual: np.ndarray, block: int, bootstrap: int, seed: int) -> dict:
    """The quantile forecasts' mean pinball loss over the test windows (averaged over
    quantiles, in the scaled target's units), the naive baseline's (the training part's
    empirical quantiles) and the skill between them with its block-bootstrap interval."""
    quantiles = np.asarray(result.heads.quantiles)
    losses = pinball_losses(result.quantiles, actual, quantiles)
    naive = np.broadcast_to(result.naive_quantiles, (len(actual), len(quantiles)))
    naive_losses = pinball_losses(naive, actual, quantiles)
    low, high = test_period.bootstrap_skill_interval(losses, naive_losses, block, bootstrap, seed)
    return {
        "quantiles": list(result.heads.quantiles),
        "test_pinball_loss": float(losses.mean()),
        "naive_test_pinball_loss": float(naive_losses.mean()),
        "test_pinball_skill": test_period.skill(losses, naive_losses),
        "test_pinball_skill_low": low,
        "test_pinball_skill_high": high,
    }


def interval_scores(
    result: HorizonOutputs, bands, actual, target: Target, arrays, block: int, bootstrap: int, seed: int
) -> dict:
    """How the test period's calibrated intervals (intervals.horizon_bands) held: for the one
    nearest intervals.COVERAGE the unsuffixed entries (how often it held, with a
    block-bootstrap and a binomial interval, and its mean width in the target's units), and
    with quantile pairs every interval in `intervals`; without enough validation windows to
    calibrate one, a note saying how many it takes. {} for classification targets."""
    if target.classification:
        return {}
    windows = result.calibration.shape[-1]
    if not bands:
        if result.heads.quantiles and not result.heads.pairs():
            return {"interval_note": "no quantile pair q, 1 - q in train.quantiles: no central interval to calibrate"}
        coverage = max((coverage for *_, coverage in result.heads.pairs()), default=intervals.COVERAGE)
        needed = intervals.fewest_scores(coverage)
        return {
            "interval_note": f"{windows} validation window(s): an interval at {coverage:.0%} needs at least {needed}"
        }
    held = target.to_units(actual, arrays.target_mean, arrays.target_std)
    every = [
        {"coverage": coverage, **intervals.coverage_scores(lower, upper, held, block, bootstrap, seed)}
        for coverage, lower, upper in bands
    ]
    primary = intervals.nearest_coverage(every, lambda entry: entry["coverage"])
    scores = {"interval_coverage": primary["coverage"], "calibration_windows": windows}
    scores |= {key: value for key, value in primary.items() if key != "coverage"}
    return scores | ({"intervals": every} if len(every) > 1 else {})


def test_series(
    numbers: np.ndarray,
    outputs: np.ndarray,
    actual: np.ndarray,
    target: Target,
    arrays,
    seq_len: int,
    bands: list | None = None,
) -> dict:
    """At most TEST_SERIES_POINTS evenly spaced test windows: their numbers, the time of the
    bar each forecast is made at (seconds since the epoch, UTC; absent where the array file
    keeps no times), the actual target and the forecast, in the target's own units
    (classification: 0/1 and the probability of 1), and the forecasts' calibrated intervals
    (bands: intervals.horizon_bands) for the fan chart: the one nearest intervals.COVERAGE
    as low / high / coverage, and every one in `bands`."""
    picked = np.unique(np.linspace(0, len(numbers) - 1, min(len(numbers), TEST_SERIES_POINTS)).round().astype(int))
    forecasts = target.to_units(outputs[picked], arrays.target_mean, arrays.target_std)
    actuals = (
        actual[picked]
        if target.classification
        else target.to_units(actual[picked], arrays.target_mean, arrays.target_std)
    )
    times = {}
    if len(arrays.row_times):
        end_rows = numbers[picked] + seq_len - 1  # a window's forecast is made at its last bar
        times = {"time": (arrays.row_times[end_rows] // 10**9).tolist()}
    series = {
        "window": numbers[picked].tolist(),
        **times,
        "actual": np.asarray(actuals, dtype=np.float64).tolist(),
        "forecast": np.asarray(forecasts, dtype=np.float64).tolist(),
        "units": target.forecast_column.removeprefix("forecast_"),
    }
    shown = [
        {"coverage": coverage, "low": lower[picked].tolist(), "high": upper[picked].tolist()}
        for coverage, lower, upper in bands or []
    ]
    if shown:
        series |= intervals.nearest_coverage(shown, lambda band: band["coverage"])
    if len(shown) > 1:
        series["bands"] = shown
    return series
