"""Forecast intervals by split-conformal calibration: plain functions on arrays (no torch).

A model's absolute errors on its validation windows (which it was not fitted on; they chose
only its epoch) are its calibration scores. The interval of a forecast at coverage c is the
forecast plus or minus the ceil((n + 1) c)-th smallest of the n scores: under exchangeable
errors it holds the actual value with probability at least c (the finite-sample correction).
Minute errors are not exchangeable (volatility clusters), so whether the intervals held is
measured on the test period, with a block-bootstrap interval for the share that held.
"""

from __future__ import annotations

import math

import numpy as np

from rnnfleet.evaluation import bootstrap_skill_interval
from rnnfleet.targets import Target

# The coverage the metrics, the table and the forecasts report; a forecast may ask another
# of the scores the model file keeps (rnnfleet predict --coverage).
COVERAGE = 0.9


def calibration_scores(outputs: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """The sorted absolute errors (outputs - targets, in the scaled target's units), float32."""
    errors = np.abs(np.asarray(outputs, np.float64) - np.asarray(targets, np.float64))
    return np.sort(errors).astype(np.float32)


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
    cluster with volatility) and the mean width."""
    misses = ((actual < lower) | (actual > upper)).astype(np.float64)
    # The share that held is the "skill" of the misses against a loss of 1 in every window.
    low, high = bootstrap_skill_interval(misses, np.ones_like(misses), block, resamples, seed)
    return {
        "test_coverage": 1.0 - float(misses.mean()),
        "test_coverage_low": low,
        "test_coverage_high": high,
        "test_interval_width": float(np.mean(upper - lower)),
    }
