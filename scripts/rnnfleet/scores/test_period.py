"""Scores of forecasts on a test period: plain functions on arrays (no torch).

Losses are per test window; a skill compares the model's summed loss with a baseline's on
the same windows (1 - model / baseline: above 0 the model is better). Consecutive minute
windows are not independent (overlapping targets, volatility clustering), so the interval
of a skill comes from a circular block bootstrap, and the Diebold-Mariano test uses a
long-run (Newey-West) variance; both take their block length / lag from the caller.
"""

from __future__ import annotations

import math

import numpy as np

CONFIDENCE = 0.95
BEATS, NOT_DISTINGUISHABLE, WORSE = (
    "beats the baseline",
    "not distinguishable from the baseline",
    "worse than the baseline",
)
# Resamples drawn at once in the bootstrap: bounds its memory on long test periods.
RESAMPLES_PER_CHUNK = 100
# A resample joins at least this many blocks: with fewer, resamples barely differ from the
# test period itself and the interval would be far too narrow.
MIN_BLOCKS = 10


def window_losses(outputs: np.ndarray, targets: np.ndarray, classification: bool) -> np.ndarray:
    """Per-window loss as training measures it: squared error, or (classification) the
    binary cross-entropy of logits `outputs` against 0/1 targets. float64."""
    outputs, targets = np.asarray(outputs, np.float64), np.asarray(targets, np.float64)
    if classification:
        return np.maximum(outputs, 0) - outputs * targets + np.log1p(np.exp(-np.abs(outputs)))
    return (outputs - targets) ** 2


def skill(model_losses: np.ndarray, baseline_losses: np.ndarray) -> float:
    """1 - sum(model) / sum(baseline); NaN when the baseline's loss is 0."""
    baseline = float(np.sum(baseline_losses))
    return 1.0 - float(np.sum(model_losses)) / baseline if baseline > 0 else math.nan


def block_sums(values: np.ndarray, block: int) -> np.ndarray:
    """Sum of every circular block of `block` consecutive values, one per start."""
    wrapped = np.concatenate([values, values[: block - 1]])
    cumulative = np.concatenate([[0.0], np.cumsum(wrapped)])
    return cumulative[block : block + len(values)] - cumulative[: len(values)]


def bootstrap_block(block_bars: int, windows: int) -> int:
    """The block length for `windows` test windows: block_bars, shortened on a short test
    period so that a resample joins at least MIN_BLOCKS blocks; at least 1."""
    return max(1, min(block_bars, windows // MIN_BLOCKS))


def bootstrap_skill_interval(
    model_losses: np.ndarray, baseline_losses: np.ndarray, block: int, resamples: int, seed: int
) -> tuple[float, float]:
    """The CONFIDENCE interval of skill() by a circular block bootstrap: each resample joins
    ceil(n / block) blocks of `block` consecutive windows with random starts (the series
    wrapped around); percentiles of the resampled skills. The same arguments give the
    same interval."""
    model_losses = np.asarray(model_losses, np.float64)
    baseline_losses = np.asarray(baseline_losses, np.float64)
    n = len(model_losses)
    block = max(1, min(block, n))
    model_blocks, baseline_blocks = block_sums(model_losses, block), block_sums(baseline_losses, block)
    blocks_per_resample = math.ceil(n / block)
    rng = np.random.default_rng(seed)
    skills = []
    for start in range(0, resamples, RESAMPLES_PER_CHUNK):
        starts = rng.integers(0, n, size=(min(RESAMPLES_PER_CHUNK, resamples - start), blocks_per_resample))
        baseline = baseline_blocks[starts].sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            skills.append(np.where(baseline > 0, 1.0 - model_blocks[starts].sum(axis=1) / baseline, np.nan))
    tail = (1.0 - CONFIDENCE) / 2
    low, high = np.nanquantile(np.concatenate(skills), [tail, 1.0 - tail])
    return float(low), float(high)


def long_run_variance(values: np.ndarray, lag: int) -> float:
    """Newey-West (Bartlett kernel) variance of the mean's numerator: gamma_0 + 2 * sum over
    k = 1..lag of (1 - k / (lag + 1)) * gamma_k, autocovariances divided by n."""
    centred = np.asarray(values, np.float64) - np.mean(values)
    n = len(centred)
    variance = float(centred @ centred) / n
    for k in range(1, min(lag, n - 1) + 1):
        variance += 2.0 * (1.0 - k / (lag + 1)) * float(centred[k:] @ centred[:-k]) / n
    return variance


def diebold_mariano(model_losses: np.ndarray, baseline_losses: np.ndarray, lag: int) -> tuple[float, float]:
    """(statistic, two-sided p-value) of the Diebold-Mariano test of equal expected loss:
    d = model - baseline per window, statistic mean(d) / sqrt(long_run_variance(d, lag) / n),
    p from the normal distribution. Negative: the model's loss is lower. (NaN, NaN) when d
    has no variance."""
    differences = np.asarray(model_losses, np.float64) - np.asarray(baseline_losses, np.float64)
    variance = long_run_variance(differences, lag)
    if not variance > 0:
        return math.nan, math.nan
    statistic = float(np.mean(differences)) / math.sqrt(variance / len(differences))
    return statistic, math.erfc(abs(statistic) / math.sqrt(2.0))


def hit_rate(forecasts: np.ndarray, actual: np.ndarray) -> float:
    """Share of windows whose forecast has the sign of the actual value, among windows
    where the actual value is not 0 (a flat bar is neither a hit nor a miss)."""
    moved = np.asarray(actual) != 0
    if not moved.any():
        return math.nan
    return float(np.mean(np.sign(forecasts[moved]) == np.sign(actual[moved])))


def sign_trade_returns(forecasts: np.ndarray, actual_returns: np.ndarray, cost_bps: float) -> np.ndarray:
    """Net return of each trade, in basis points, of trading each forecast's sign: one
    trade per window with a non-zero forecast, long or short one unit over the target's
    horizon, earning sign * the actual log return less cost_bps."""
    positions = np.sign(forecasts)
    traded = positions != 0
    return positions[traded] * np.asarray(actual_returns, np.float64)[traded] * 1e4 - cost_bps


def sign_trading_bps(forecasts: np.ndarray, actual_returns: np.ndarray, cost_bps: float) -> float:
    """Mean of sign_trade_returns; NaN when nothing trades."""
    net = sign_trade_returns(forecasts, actual_returns, cost_bps)
    return float(np.mean(net)) if len(net) else math.nan


def verdict(low: float, high: float) -> str:
    """What an interval of a skill says: above 0, below 0, or containing 0."""
    if low > 0:
        return BEATS
    if high < 0:
        return WORSE
    return NOT_DISTINGUISHABLE
