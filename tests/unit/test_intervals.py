"""Forecast intervals by split-conformal calibration (rnnfleet.scores.intervals): the finite-sample
rank by hand, the coverage it promises on exchangeable errors, and how the test period's
coverage is scored."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rnnfleet.scores import intervals


def test_the_half_width_is_the_ceil_n_plus_one_c_th_smallest_score():
    scores = intervals.calibration_scores(np.arange(1.0, 20.0), np.zeros(19))  # errors 1 .. 19
    assert scores.tolist() == list(range(1, 20))
    assert intervals.half_width(scores, 0.9) == 18.0  # ceil(20 * 0.9) = 18
    assert intervals.half_width(scores, 0.5) == 10.0  # ceil(20 * 0.5) = 10
    assert intervals.half_width(scores[:8], 0.9) == math.inf  # ceil(9 * 0.9) = 9 > 8 scores
    assert intervals.fewest_scores(0.9) == 9 and intervals.half_width(scores[:9], 0.9) == 9.0
    assert intervals.fewest_scores(0.5) == 1 and intervals.fewest_scores(0.95) == 19


def test_on_exchangeable_errors_the_interval_holds_at_least_its_coverage():
    """Split conformal's promise: with n calibration errors, the chance that a new error lies
    within the interval is between c and c + 1 / (n + 1)."""
    rng = np.random.default_rng(0)
    held = []
    for _ in range(400):
        scores = intervals.calibration_scores(rng.standard_t(3, 30), np.zeros(30))
        width = intervals.half_width(scores, 0.9)
        held.append(np.mean(np.abs(rng.standard_t(3, 500)) <= width))
    assert 0.9 <= np.mean(held) <= 0.9 + 1 / 31 + 0.005


def test_coverage_scores_count_the_windows_the_interval_held():
    actual = np.array([0.0, 1.0, 2.0, 3.0, 10.0] * 20)
    lower, upper = np.full(100, -0.5), np.full(100, 2.5)
    scores = intervals.coverage_scores(lower, upper, actual, block=5, resamples=200, seed=0)
    assert scores["test_coverage"] == pytest.approx(0.6) and scores["test_interval_width"] == pytest.approx(3.0)
    assert scores["test_coverage_low"] <= 0.6 <= scores["test_coverage_high"]
