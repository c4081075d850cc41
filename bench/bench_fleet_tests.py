"""How often the per-dataset tests call a skill-less model better than its baseline.

The fleet's correction (rnnfleet.scores.multiple_testing) adjusts each dataset's Diebold-Mariano p-value; the
correction keeps its promise only if those p-values are not too small under the null. This
simulates loss differentials with mean zero and the dependence of minute data: returns
GARCH(1,1) with Student t(4) shocks, and a persistent AR(1) forecast against its mirror
image (same expected loss), then prints the share of series each test calls a winner at
each level next to that level (a ratio of 1: the test is right-sized), and the same for
the block-bootstrap interval's verdict (nominal 2.5%).

    .venv/bin/python bench/bench_fleet_tests.py [--series 400] [--windows 3000] [--lag 60]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from rnnfleet.scores import test_period  # noqa: E402


def garch_returns(rng: np.random.Generator, windows: int) -> np.ndarray:
    shocks = rng.standard_t(4, windows) / math.sqrt(2.0)
    returns, variance = np.empty(windows), 1.0
    for t in range(windows):
        returns[t] = math.sqrt(variance) * shocks[t]
        variance = 0.05 + 0.1 * returns[t] ** 2 + 0.85 * variance
    return returns


def persistent_forecast(rng: np.random.Generator, windows: int) -> np.ndarray:
    noise, forecast = rng.standard_normal(windows), np.zeros(windows)
    for t in range(1, windows):
        forecast[t] = 0.95 * forecast[t - 1] + 0.05 * noise[t]
    return 0.3 * forecast


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=400)
    parser.add_argument("--windows", type=int, default=3000)
    parser.add_argument("--lag", type=int, default=60, help="the DM lag and bootstrap block (evaluate.block_bars)")
    parser.add_argument("--resamples", type=int, default=300)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(1)
    one_sided, bootstrap_wins = [], 0
    for series in range(args.series):
        actual, forecast = garch_returns(rng, args.windows), persistent_forecast(rng, args.windows)
        model, baseline = (forecast - actual) ** 2, (-forecast - actual) ** 2  # equal expected loss
        statistic, p_value = test_period.diebold_mariano(model, baseline, args.lag)
        one_sided.append(p_value / 2 if statistic < 0 else 1 - p_value / 2)
        low, _ = test_period.bootstrap_skill_interval(model, baseline, args.lag, args.resamples, series)
        bootstrap_wins += low > 0
    one_sided = np.asarray(one_sided)
    print(f"{args.series} series of {args.windows} windows, lag {args.lag}: share called better than the baseline")
    for level in (0.025, 0.05, 0.10):
        share = float(np.mean(one_sided < level))
        print(f"  Diebold-Mariano, one-sided at {level:.3f}: {share:.4f} (ratio to the level {share / level:.2f})")
    share = bootstrap_wins / args.series
    print(f"  block-bootstrap 95% interval above 0:   {share:.4f} (ratio to 0.025 {share / 0.025:.2f})")


if __name__ == "__main__":
    main()
