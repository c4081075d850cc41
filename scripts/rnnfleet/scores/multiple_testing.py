"""Verdicts over the whole fleet: plain functions on the datasets' scores (no torch).

Each dataset's test period is tested against its baseline alone (rnnfleet.scores.test_period). Over
hundreds of datasets some of those tests succeed by luck, and the lucky ones top a ranking
by skill. Two corrections:

- The false discovery rate over the datasets' Diebold-Mariano tests: Benjamini-Hochberg
  (valid for independent or positively dependent tests) or Benjamini-Yekutieli (any
  dependence, more conservative). The two-sided p-values are adjusted (q-values) and a
  dataset whose q-value is at most the chosen rate is called better or worse than its
  baseline by the sign of its statistic: the directional use of the procedure, which keeps
  the expected share of wrong calls among all calls at most that rate.
- The Sharpe ratio of trading the forecast's sign, deflated for the number of datasets
  tried (Bailey and Lopez de Prado, 2014): the probability that the true Sharpe ratio is
  above the highest one expected among that many datasets with no skill at all.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

METHODS = ("bh", "by")
BEATS_AFTER, NOT_DISTINGUISHABLE_AFTER, WORSE_AFTER = (
    "beats the baseline after the fleet correction",
    "not distinguishable after the fleet correction",
    "worse than the baseline after the fleet correction",
)
EULER_GAMMA = 0.5772156649015329
NORMAL = NormalDist()


def adjusted_p_values(p_values: list[float], method: str) -> list[float]:
    """Benjamini-Hochberg ("bh") or Benjamini-Yekutieli ("by") adjusted p-values, in the
    order given: q_(i) = min over j >= i of min(1, c * m / j * p_(j)) over the p-values
    sorted ascending, c = 1 (bh) or 1 + 1/2 + ... + 1/m (by). A NaN stays NaN and is not
    counted in m. Rejecting every q <= alpha is the procedure at level alpha."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, not {method!r}")
    values = np.asarray(p_values, np.float64)
    tested = np.flatnonzero(~np.isnan(values))
    adjusted = np.full(len(values), math.nan)
    m = len(tested)
    if not m:
        return adjusted.tolist()
    dependence = float(np.sum(1.0 / np.arange(1, m + 1))) if method == "by" else 1.0
    order = tested[np.argsort(values[tested], kind="stable")]
    scaled = values[order] * dependence * m / np.arange(1, m + 1)
    adjusted[order] = np.minimum(1.0, np.minimum.accumulate(scaled[::-1])[::-1])
    return adjusted.tolist()


def fleet_verdict(q_value: float, statistic: float, fdr: float) -> str:
    """Better or worse than the baseline (by the sign of the Diebold-Mariano statistic,
    negative: lower loss) when the q-value is at most fdr; "" without a test."""
    if math.isnan(q_value) or math.isnan(statistic):
        return ""
    if q_value <= fdr and statistic < 0:
        return BEATS_AFTER
    if q_value <= fdr and statistic > 0:
        return WORSE_AFTER
    return NOT_DISTINGUISHABLE_AFTER


def expected_max_sharpe(trials: int, sharpe_variance: float) -> float:
    """The highest Sharpe ratio expected among `trials` independent strategies of no skill
    whose estimated Sharpe ratios vary with `sharpe_variance` (the False Strategy theorem:
    sqrt(V) * ((1 - g) * Z(1 - 1/N) + g * Z(1 - 1/(N e))), g Euler's constant, Z the
    normal quantile). 0 for fewer than two trials."""
    if trials < 2 or not sharpe_variance > 0:
        return 0.0
    quantile = (1 - EULER_GAMMA) * NORMAL.inv_cdf(1 - 1 / trials) + EULER_GAMMA * NORMAL.inv_cdf(
        1 - 1 / (trials * math.e)
    )
    return math.sqrt(sharpe_variance) * quantile


def probabilistic_sharpe(sharpe: float, benchmark: float, returns: float, skew: float, kurtosis: float) -> float:
    """The probability that the true Sharpe ratio exceeds `benchmark`, given one estimated
    on `returns` returns of that skew and (non-excess) kurtosis, all per return:
    Z((SR - SR*) * sqrt(T - 1) / sqrt(1 - skew * SR + (kurtosis - 1) / 4 * SR^2)). NaN where
    it is undefined."""
    spread = 1 - skew * sharpe + (kurtosis - 1) / 4 * sharpe**2
    if not returns >= 2 or not spread > 0 or math.isnan(sharpe) or math.isnan(benchmark):
        return math.nan
    return NORMAL.cdf((sharpe - benchmark) * math.sqrt(returns - 1) / math.sqrt(spread))


def sharpe_moments(net_returns: np.ndarray) -> dict:
    """Sharpe ratio (mean / standard deviation), count, skew and non-excess kurtosis of a
    series of per-trade returns; NaN entries where there are fewer than two or no spread."""
    values = np.asarray(net_returns, np.float64)
    spread = float(np.std(values, ddof=1)) if len(values) > 1 else math.nan
    if not spread > 0:
        return {"sharpe": math.nan, "trades": len(values), "skew": math.nan, "kurtosis": math.nan}
    standardised = (values - values.mean()) / np.std(values)
    return {
        "sharpe": float(values.mean()) / spread,
        "trades": len(values),
        "skew": float(np.mean(standardised**3)),
        "kurtosis": float(np.mean(standardised**4)),
    }


def luck_variance(trade_counts: list[float]) -> float:
    """The variance of a Sharpe ratio estimated on T trades of a strategy with none, 1 / (T - 1),
    averaged over the datasets. (Bailey and Lopez de Prado take the spread of the trials'
    estimates instead; a fleet's datasets are different instruments, some with real skill,
    whose spread would count that skill as luck.)"""
    variances = [1 / (count - 1) for count in trade_counts if count > 1]
    return float(np.mean(variances)) if variances else 0.0


def as_number(value) -> float:
    """A table cell as a float; NaN where it is empty or not a number (a failed dataset)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def fleet_columns(rows: list[dict], method: str, fdr: float) -> list[dict]:
    """The rows with the fleet's columns filled in, over the rows whose status is ok and
    that have a Diebold-Mariano p-value (a partial run's failed datasets are not counted):
    fleet_qvalue, fleet_verdict, fleet_tests (how many tests the correction was over) and
    fleet_correction (its method and rate, e.g. "bh fdr=0.1");
    test_sharpe_deflated_prob and fleet_sharpe_by_luck (the Sharpe ratio the best of the
    fleet's datasets would reach with no skill: luck_variance) over the rows with a Sharpe
    ratio."""
    tested = [row.get("status", "ok") == "ok" and not math.isnan(as_number(row.get("test_dm_pvalue"))) for row in rows]
    q_values = adjusted_p_values(
        [as_number(row.get("test_dm_pvalue")) if ok else math.nan for row, ok in zip(rows, tested, strict=True)], method
    )
    sharpes = [as_number(row.get("test_sharpe")) if ok else math.nan for row, ok in zip(rows, tested, strict=True)]
    trade_counts = [
        as_number(row.get("test_sharpe_trades"))
        for row, sharpe in zip(rows, sharpes, strict=True)
        if not math.isnan(sharpe)
    ]
    by_luck = expected_max_sharpe(len(trade_counts), luck_variance(trade_counts))
    filled = []
    for row, q_value, sharpe in zip(rows, q_values, sharpes, strict=True):
        fleet = {
            "fleet_qvalue": "",
            "fleet_verdict": "",
            "fleet_tests": sum(tested),
            "fleet_correction": f"{method} fdr={fdr:g}",
        }
        if not math.isnan(q_value):
            fleet.update(
                fleet_qvalue=q_value, fleet_verdict=fleet_verdict(q_value, as_number(row.get("test_dm_stat")), fdr)
            )
        if not math.isnan(sharpe):
            fleet["fleet_sharpe_by_luck"] = by_luck
            fleet["test_sharpe_deflated_prob"] = probabilistic_sharpe(
                sharpe,
                by_luck,
                as_number(row.get("test_sharpe_trades")),
                as_number(row.get("test_trade_skew")),
                as_number(row.get("test_trade_kurtosis")),
            )
        filled.append({**row, **fleet})
    return filled
