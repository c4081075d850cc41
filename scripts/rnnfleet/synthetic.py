"""Deterministic synthetic 1-minute OHLCV bars with learnable structure (demo, tests, benchmarks)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def synthetic_bars(rows: int, seed: int, start_price: float = 100.0):
    """A DataFrame of `rows` 1-minute bars whose close returns follow an AR(2) process with
    volatility clustering, so an RNN can beat the zero-return forecast."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    shocks = rng.standard_normal(rows)
    volatility = np.empty(rows)
    returns = np.zeros(rows)
    volatility[0] = 1e-3
    for t in range(rows):
        if t:
            volatility[t] = np.sqrt(2e-8 + 0.1 * returns[t - 1] ** 2 + 0.85 * volatility[t - 1] ** 2)
        ar_part = (0.45 * returns[t - 1] - 0.2 * returns[t - 2]) if t >= 2 else 0.0
        returns[t] = ar_part + volatility[t] * shocks[t]
    close = start_price * np.exp(np.cumsum(returns))
    open_ = np.concatenate([[start_price], close[:-1]]) * np.exp(rng.normal(0, 1e-4, rows))
    spread = np.abs(rng.normal(0, 5e-4, rows))
    high = np.maximum(open_, close) * np.exp(spread)
    low = np.minimum(open_, close) * np.exp(-spread)
    volume = np.round(1000 * (1 + 200 * np.abs(returns)) * rng.lognormal(0, 0.3, rows), 2)
    timestamps = pd.date_range("2024-01-01", periods=rows, freq="min")
    return pd.DataFrame(
        {
            "timestamp": timestamps.strftime("%Y-%m-%d %H:%M:%S"),
            "open": open_,
            "high": high,
            "low": low,
            "close": close,
            "volume": volume,
        }
    )


def ar_garch_returns(
    rows: int, seed: int, phi: float = 0.3, omega: float = 2e-8, alpha: float = 0.1, beta: float = 0.85
) -> tuple[np.ndarray, np.ndarray]:
    """(returns, volatility): 1-minute log returns r[t] = phi * r[t-1] + sigma[t] * z[t], z
    standard normal, sigma[t]^2 = omega + alpha * (r[t-1] - phi * r[t-2])^2 + beta * sigma[t-1]^2
    (GARCH(1,1) noise). Given the past, r[t] is normal with mean phi * r[t-1] and sd sigma[t],
    so its true quantiles are known; phi = 0: a random walk with volatility clustering."""
    rng = np.random.default_rng(seed)
    shocks = rng.standard_normal(rows)
    returns, volatility = np.zeros(rows), np.empty(rows)
    volatility[0] = np.sqrt(omega / max(1.0 - alpha - beta, 1e-6))
    for t in range(rows):
        if t:
            noise = returns[t - 1] - (phi * returns[t - 2] if t >= 2 else 0.0)
            volatility[t] = np.sqrt(omega + alpha * noise**2 + beta * volatility[t - 1] ** 2)
        returns[t] = (phi * returns[t - 1] if t else 0.0) + volatility[t] * shocks[t]
    return returns, volatility


def write_bars_of_returns(
    path: str | os.PathLike,
    returns: np.ndarray,
    rng: np.random.Generator,
    start: str = "2024-01-01",
    spread: float = 3e-4,
    decimals: int = 6,
) -> None:
    """A CSV of 1-minute bars from `start` whose closes follow these log returns, from 100; high and
    low a random spread (scale `spread`) around open and close, volume independent of the prices
    (both from rng); prices with `decimals` decimals."""
    import pandas as pd

    path = Path(path)
    close = 100 * np.exp(np.cumsum(returns))
    open_ = np.concatenate([[100.0], close[:-1]])
    spreads = np.abs(rng.normal(0, spread, len(returns)))
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(
        {
            "timestamp": pd.date_range(start, periods=len(returns), freq="min").strftime("%Y-%m-%d %H:%M:%S"),
            "open": open_,
            "high": np.maximum(open_, close) * np.exp(spreads),
            "low": np.minimum(open_, close) * np.exp(-spreads),
            "close": close,
            "volume": np.round(rng.lognormal(7, 0.3, len(returns)), 2),
        }
    ).to_csv(path, index=False, float_format=f"%.{decimals}f")


def write_synthetic_csv(path: str | os.PathLike, rows: int, seed: int) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    synthetic_bars(rows, seed).to_csv(path, index=False, float_format="%.6f")
    return path


DEMO_DATASETS = {"EURUSD_1m": 11, "BTCUSDT_1m": 12, "SPY_1m": 13, "GOLD_1m": 14}


def write_demo_data(folder: str | os.PathLike, rows: int = 4000) -> list[Path]:
    """The built-in demo: four 1-minute datasets and one 5-minute decoy that is ignored."""
    written = [write_synthetic_csv(Path(folder) / f"{name}.csv", rows, seed) for name, seed in DEMO_DATASETS.items()]
    written.append(write_synthetic_csv(Path(folder) / "EURUSD_5m.csv", rows // 5, 99))
    return written
