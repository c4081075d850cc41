"""Per-bar features: the built-in ones and a user's own, one definition for training and forecasts.

A feature function takes the bars table (a pandas DataFrame with the columns timestamp,
open, high, low, close, volume, one row per bar, oldest first) and returns one value per
bar, or one row of values per bar: an array of shape (rows,) or (rows, k). Row t may use
bars up to t only. Its first rows may be NaN where it needs history (the warm-up, e.g. the
first bar has no previous close); every row after the warm-up must be finite.

The config's `features:` list names them (see rnnfleet.plugins); the model file records the
list, so forecasts compute the same inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from rnnfleet.errors import DataError, UserError, one_line
from rnnfleet.plugins import describe, resolve

DEFAULT_FEATURES = ("ohlc_returns", "log_volume")
VOLUME_FEATURES = ("log_volume", "volume_change")  # the built-ins that need a volume column
MINUTES_PER_DAY = 24 * 60


def ohlc_returns(bars) -> np.ndarray:
    """Open, high, low and close as log ratios to the previous close (NaN for the first bar)."""
    log_prices = np.log(bars[["open", "high", "low", "close"]].to_numpy(dtype=np.float64))
    values = np.full(log_prices.shape, np.nan)
    values[1:] = log_prices[1:] - log_prices[:-1, 3, None]
    return values


def log_volume(bars) -> np.ndarray:
    """log(1 + volume)."""
    return np.log1p(bars["volume"].to_numpy(dtype=np.float64))


def hl_range(bars) -> np.ndarray:
    """log(high / low): the bar's range."""
    return np.log(bars["high"].to_numpy(dtype=np.float64) / bars["low"].to_numpy(dtype=np.float64))


def volume_change(bars) -> np.ndarray:
    """log(1 + volume) minus the previous bar's (NaN for the first bar)."""
    values = np.full(len(bars), np.nan)
    values[1:] = np.diff(log_volume(bars))
    return values


def _timestamps(bars, feature: str):
    import pandas as pd

    timestamps = bars["timestamp"]
    if not pd.api.types.is_datetime64_any_dtype(timestamps):
        raise UserError(f"feature {feature!r} needs timestamps that are dates and times, not plain numbers")
    return timestamps.dt


def _circle(fraction: np.ndarray) -> np.ndarray:
    angle = 2 * math.pi * fraction
    return np.column_stack([np.sin(angle), np.cos(angle)])


def time_of_day(bars) -> np.ndarray:
    """The minute of the day (in the file's time) as sin and cos, so 23:59 is next to 00:00."""
    clock = _timestamps(bars, "time_of_day")
    minute = clock.hour.to_numpy(dtype=np.float64) * 60 + clock.minute.to_numpy(dtype=np.float64)
    return _circle(minute / MINUTES_PER_DAY)


def day_of_week(bars) -> np.ndarray:
    """The day of the week (Monday 0) as sin and cos."""
    return _circle(_timestamps(bars, "day_of_week").dayofweek.to_numpy(dtype=np.float64) / 7)


BUILTIN_FEATURES: dict[str, Callable] = {
    "ohlc_returns": ohlc_returns,
    "log_volume": log_volume,
    "hl_range": hl_range,
    "volume_change": volume_change,
    "time_of_day": time_of_day,
    "day_of_week": day_of_week,
}
BUILTIN_COLUMN_NAMES = {
    "ohlc_returns": (
        "log_open_over_prev_close",
        "log_high_over_prev_close",
        "log_low_over_prev_close",
        "log_close_over_prev_close",
    ),
    "log_volume": ("log1p_volume",),
    "time_of_day": ("time_of_day_sin", "time_of_day_cos"),
    "day_of_week": ("day_of_week_sin", "day_of_week_cos"),
}


@dataclass(frozen=True)
class FeatureMatrix:
    """values[t] describes bar t (rows before `warmup` hold NaN); names: one per column."""

    values: np.ndarray  # (rows, n_features) float64
    names: tuple[str, ...]
    warmup: int


def column_names(reference: str, width: int) -> tuple[str, ...]:
    known = BUILTIN_COLUMN_NAMES.get(reference)
    if known is not None and len(known) == width:
        return known
    return (reference,) if width == 1 else tuple(f"{reference}[{column}]" for column in range(width))


def feature_values(reference: str, bars, name: str, sources: Mapping[str, bytes] | None = None) -> np.ndarray:
    """The feature `reference` of every bar, as (rows, k) float64; UserError naming the
    function and the dataset when it fails or returns something else. sources: as for
    rnnfleet.plugins.resolve (a model file's vetted plug-ins)."""
    function = resolve(reference, BUILTIN_FEATURES, "features", sources)
    where = describe(reference)
    try:
        result = function(bars)
    except UserError as error:
        raise UserError(f"{name}: {where}: {error}") from None
    except KeyError as error:
        if error.args == ("volume",) and "volume" not in bars.columns:
            raise DataError(f"{name}: has no volume column, which {where} needs") from None
        raise UserError(f"{name}: {where} failed ({type(error).__name__}: {one_line(error)})") from None
    except Exception as error:
        raise UserError(f"{name}: {where} failed ({type(error).__name__}: {one_line(error)})") from None
    try:
        values = np.asarray(result, dtype=np.float64)
    except (TypeError, ValueError):
        raise UserError(f"{name}: {where} returned {type(result).__name__}, not an array of numbers") from None
    if values.ndim not in (1, 2) or len(values) != len(bars) or values.size == 0:
        raise UserError(
            f"{name}: {where} returned shape {values.shape}; expected ({len(bars)},) or ({len(bars)}, k), "
            "one value or row per bar"
        )
    return values[:, None] if values.ndim == 1 else values


def compute_feature_matrix(
    bars, references: list[str] | tuple[str, ...], name: str = "dataset", sources: Mapping[str, bytes] | None = None
) -> FeatureMatrix:
    """Every feature of `references`, side by side, and the warm-up: the leading rows where
    one of them is not yet finite. A non-finite value after the warm-up is a UserError.
    sources: as for feature_values."""
    columns = [feature_values(reference, bars, name, sources) for reference in references]
    values = np.concatenate(columns, axis=1)
    finite = np.isfinite(values).all(axis=1)
    warmup = int(np.argmax(finite)) if finite.any() else len(values)
    if not finite[warmup:].all():
        row = warmup + int(np.argmin(finite[warmup:]))
        column = int(np.argmin(np.isfinite(values[row])))
        reference = references[np.searchsorted(np.cumsum([part.shape[1] for part in columns]), column, side="right")]
        raise UserError(
            f"{name}: {describe(reference)} gives a NaN or infinite value at data row {row + 1}, after the "
            f"first {warmup} row(s) of warm-up"
        )
    names = tuple(
        column
        for reference, part in zip(references, columns, strict=True)
        for column in column_names(reference, part.shape[1])
    )
    return FeatureMatrix(values=values, names=names, warmup=warmup)
