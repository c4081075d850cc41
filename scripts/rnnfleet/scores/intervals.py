"""Forecast intervals by split-conformal calibration: plain functions on arrays (no torch).

A model's absolute errors on its validation windows (which it was not fitted on; they chose
only its epoch) are its calibration scores. The interval of a forecast at coverage c is the
forecast plus or minus the ceil((n + 1) c)-th smallest of the n scores: under exchangeable
errors it holds the actual value with probability at least c (the finite-sample correction).
Minute errors are not exchangeable (volatility clusters), so whether the intervals held is
measured on the test period, with a block-bootstrap interval for the share that held (and
the binomial one, which assumes independent windows).

A model with quantile heads (rnnfleet.heads) has its central intervals conformalised instead
(conformalised quantile regression): a pair of quantiles q, 1 - q bounds an interval of
coverage c = 1 - 2q; its scores are max(lower - actual, actual - upper) on the validation
windows, and the interval is [lower - m, upper + m] with m the ceil((n + 1) c)-th smallest
score (negative where the raw quantiles were too wide).
"""

from __future__ import annotations

import math

import numpy as np

from rnnfleet.heads import Heads
from rnnfleet.prep.targets import Target
from rnnfleet.scores.test_period import bootstrap_skill_interval

# The coverage the metrics, the table and the forecasts report; a forecast may ask another
# of the scores the model file keeps (rnnfleet predict --coverage).
COVERAGE = 0.9


def calibration_scores(outputs: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """The sorted absolute errors (outputs - targets, in the scaled target's units), float32."""
    errors = np.abs(np.asarray(outputs, np.float64) - np.asarray(targets, np.float64))
    return np.sort(errors).astype(np.float32)


def pair_scores(lower: np.ndarray, upper: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """The sorted conformity scores of the intervals [lower, upper]: max(lower - target,
    target - upper), negative inside, float32."""
    lower, upper, targets = (np.asarray(values, np.float64) for values in (lower, upper, targets))
    return np.sort(np.maximum(lower - targets, targets - upper)).astype(np.float32)


def head_calibration(outputs: np.ndarray, targets: np.ndarray, heads: Heads) -> np.ndarray:
    """The calibration of a model's validation outputs (rnnfleet.heads.Heads.shaped) against
    their targets ((n,) or (n, horizons)): for a single forecast calibration_scores; for
    point heads one row of them per horizon (horizons, n); for quantile heads the pair_scores
    of each pair (Heads.pairs) per horizon (horizons, pairs, n)."""
    if heads.single:
        return calibration_scores(outputs, targets)
    targets = np.asarray(targets).reshape(len(targets), -1)
    if not heads.quantiles:
        return np.stack([calibration_scores(outputs[:, k, 0], targets[:, k]) for k in range(len(heads.horizons))])
    pairs = heads.pairs()
    return np.array(
        [
            [pair_scores(outputs[:, k, low], outputs[:, k, high], targets[:, k]) for low, high, _ in pairs]
            for k in range(len(heads.horizons))
        ],
        dtype=np.float32,
    ).reshape(len(heads.horizons), len(pairs), len(targets))


def fewest_scores(coverage: float) -> int:
    """The fewest calibration scores an interval at this coverage needs: ceil((n + 1) c) <= n."""
    return math.ceil(coverage / (1.0 - coverage) - 1e-9)


def half_width(scores: np.ndarray, coverage: float) -> float:
    """The ceil((n + 1) coverage)-th smallest score; inf when there are fewer than fewest_scores."""
    rank = math.ceil((len(scores) + 1) * coverage - 1e-9)
    return float(scores[rank - 1]) if rank <= len(scores) else math.inf


def calibrated_width(scores: np.ndarray, target: Target, coverage: float = COVERAGE) -> float | None:
    """half_width of these scores, in the scaled target's units; None for a classification
    target (no interval) or too few scores for the coverage."""
    if target.classification:
        return None
    width = half_width(np.asarray(scores, dtype=np.float32), coverage)
    return width if math.isfinite(width) else None


def horizon_bands(
    point: np.ndarray,
    quantile_outputs: np.ndarray | None,
    calibration: np.ndarray,
    heads: Heads,
    target: Target,
    offset: float,
    scale: float,
    coverage: float = COVERAGE,
) -> list[tuple[float, np.ndarray, np.ndarray]]:
    """The calibrated intervals of one horizon's forecasts, as (coverage, lower, upper) in the
    target's units, widest first: of point heads the point forecast +- the half_width of its
    scores at `coverage`; of quantile heads each pair's conformalised interval at its own
    coverage (quantile_outputs (n, quantiles), calibration (pairs, n)). A band with too few
    calibration scores for its coverage is left out."""
    if target.classification:
        return []
    if not heads.quantiles:
        width = calibrated_width(calibration, target, coverage)
        return [] if width is None else [(coverage, *bounds(point, width, target, offset, scale))]
    if np.ndim(calibration) != 2 or len(calibration) != len(heads.pairs()):
        return []  # not calibrated: a fit without validation windows
    bands = []
    for (low, high, pair_coverage), scores in zip(heads.pairs(), calibration, strict=True):
        margin = half_width(np.asarray(scores, np.float32), pair_coverage)
        if math.isfinite(margin):
            lower = target.within_range(target.to_units(quantile_outputs[:, low] - margin, offset, scale))
            bands.append((pair_coverage, lower, target.to_units(quantile_outputs[:, high] + margin, offset, scale)))
    return bands


def nearest_coverage(items: list, coverage_of):
    """Of the intervals `items`, the one whose coverage (coverage_of(item)) is nearest
    COVERAGE: the one the unsuffixed entries and columns are about."""
    return min(items, key=lambda item: abs(coverage_of(item) - COVERAGE))


def bounds(scaled: np.ndarray, width: float, target: Target, offset: float, scale: float) -> tuple:
    """(lower, upper): the interval scaled +- width in the target's units, the lower bound
    raised to the least the target can take (Target.within_range)."""
    lower = target.within_range(target.to_units(scaled - width, offset, scale))
    return lower, target.to_units(scaled + width, offset, scale)


def coverage_scores(
    lower: np.ndarray, upper: np.ndarray, actual: np.ndarray, block: int, resamples: int, seed: int
) -> dict:
    """How the intervals held on the test period: the share of windows whose actual value lies
    in [lower, upper], its 95% block-bootstrap interval (blocks of `block` windows: misses
    cluster with volatility), its 95% binomial (Wilson) interval, which assumes independent
    windows and is too narrow where misses cluster, and the mean width."""
    misses = ((actual < lower) | (actual > upper)).astype(np.float64)
    # The share that held is the "skill" of the misses against a loss of 1 in every window.
    low, high = bootstrap_skill_interval(misses, np.ones_like(misses), block, resamples, seed)
    binomial_low, binomial_high = wilson_interval(int(len(misses) - misses.sum()), len(misses))
    return {
        "test_coverage": 1.0 - float(misses.mean()),
        "test_coverage_low": low,
        "test_coverage_high": high,
        "test_coverage_binomial_low": binomial_low,
        "test_coverage_binomial_high": binomial_high,
        "test_interval_width": float(np.mean(upper - lower)),
    }


# The standard normal quantile of a two-sided 95% interval.
Z_95 = 1.959963984540054


def wilson_interval(successes: int, trials: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a binomial share successes / trials."""
    if trials <= 0:
        return math.nan, math.nan
    share, z2 = successes / trials, Z_95**2
    centre = (share + z2 / (2 * trials)) / (1 + z2 / trials)
    half = Z_95 * math.sqrt(share * (1 - share) / trials + z2 / (4 * trials**2)) / (1 + z2 / trials)
    return max(0.0, centre - half), min(1.0, centre + half)
