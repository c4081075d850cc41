"""Raw bar file(s) -> validated features, targets, chronological split, normalisation; array file I/O.

Which features and which target: rnnfleet.features and rnnfleet.targets.

The array file (`.npz`, format ARRAYS_FORMAT) holds the feature matrix once (rows x
features) and the aligned targets as they were computed (float64, before normalisation),
with the split and the training part's statistics; load_arrays normalises them once
(normalised_with, the one normaliser of fits, updates and folds). Raw values let a morning's
preprocess job append the rows of new bars to the previous arrays (rnnfleet.appending)
instead of making them from every bar: normalised rows would change with every new
training part. Training windows are cut from the arrays later as views, so their size
stays O(rows).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from rnnfleet.bars.formats import FORMAT_DEFAULTS, PRICE_KEYS, read_bars
from rnnfleet.bars.joining import check_one_minute_bars, join_bars, time_range, verify_checksum
from rnnfleet.bars.quality import bar_counts, check_quality, measures_text
from rnnfleet.errors import DataError, UserError
from rnnfleet.features import BUILTIN_FEATURES, DEFAULT_FEATURES, VOLUME_FEATURES, compute_feature_matrix
from rnnfleet.gaps import SplitPoints, check_gap_windows, find_gaps
from rnnfleet.plugins import imported_sha256
from rnnfleet.targets import DEFAULT_TARGET, TARGETS

DEFAULT_TEST_FRACTION = 0.15  # as the schema's preprocess.test_fraction
# As the schema's preprocess.val_max_bars and test_max_bars: one week of minute bars each.
# Below it a part is its fraction of the history; above it, it stops growing (bench/README.md,
# the morning run: what a longer part buys in the test interval's width against what it costs
# every update, which scores the whole validation part at each epoch and the test part once).
DEFAULT_MAX_PART_BARS = 10_080
# The array file's layout: 2 since the file holds the raw features and targets (1 held them
# normalised). A file of another format is never read (load_arrays); the preprocess rule has
# it as a param, so such a file is made again once.
ARRAYS_FORMAT = 2


@dataclass(frozen=True)
class PreparedArrays:
    """One dataset, ready to train on.

    features[t] describes bar t (of the bars after the features' warm-up); targets[t] is the
    target (rnnfleet.targets) from bar t to bar t + horizon, as (value - target_mean) / target_std.
    A window ending at bar t predicts targets[t]. With several horizons (train.horizons),
    targets[t, k] is the target over horizons[k] bars, target_mean and target_std hold one
    value per horizon, and `horizon` is the longest (it sizes the embargoes and the gaps).
    Windows ending in [seq_len - 1, train_end) train, in [val_start, val_end) validate (early
    stopping only), in [test_start, rows) test, except those that span a gap
    (rnnfleet.gaps.window_numbers); normalisation statistics come from the training part.
    """

    features: np.ndarray  # (rows, n_features) float32, normalised
    targets: np.ndarray  # (rows,) float32, scaled; (rows, horizons) with several horizons
    feature_mean: np.ndarray  # (n_features,) float32
    feature_std: np.ndarray  # (n_features,) float32
    target_std: float | np.ndarray  # (horizons,) float64 with several horizons
    train_end: int
    val_start: int
    last_close: float
    horizon: int
    target: str = DEFAULT_TARGET
    target_mean: float | np.ndarray = 0.0
    # The horizons of train.horizons when there are several; () for the single `horizon`.
    horizons: tuple[int, ...] = ()
    feature_definition: tuple[str, ...] = DEFAULT_FEATURES  # the config's `features:` references
    # {user feature file as written: sha256 of the bytes that computed the features}, for the model file.
    feature_sha256: dict[str, str] = field(default_factory=dict)
    feature_names: tuple[str, ...] = ()  # one per column
    # Of the default features, those the dataset's file(s) could not give (no volume column).
    features_left_out: tuple[str, ...] = ()
    warmup: int = 1  # leading bars without features
    # Bar b of the file is followed by a gap (longer than preprocess.max_gap): see rnnfleet.gaps.
    gap_bars: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    val_end: int = -1  # -1: the end of the rows (no test part)
    test_start: int = -1
    # The bars' data-quality row (rnnfleet.bars.quality.check_quality): measures and the flags warned of.
    quality: dict = field(default_factory=dict)
    # How the bars were read, for the model file (forecasts read new bars the same way): the
    # `format:` settings (all keys; {} from an array file of an older rnnfleet), the zone the
    # times were read in (rnnfleet.bars.formats: e.g. "Asia/Tokyo", "UTC (assumed)") and the read line.
    read_format: dict = field(default_factory=dict)
    timezone: str = ""
    read_as: str = ""
    # One digest per feature row of its values before normalisation (row_digests), and a hash
    # of the preprocess settings: what tells an update that the earlier bars are unchanged
    # (rnnfleet.train.updating). Empty in array files written before updates existed.
    row_digests: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    settings_sha256: str = ""
    # The time of each feature row's bar, int64 nanoseconds since the epoch, UTC (for the test
    # period's chart). Empty in array files written before they were kept.
    row_times: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # The features (before normalisation, float64) of the last seq_len bars, up to the file's
    # last bar (which has no target yet), and that bar's time: the window the fleet's
    # forecast is made from (rnnfleet.forecast.predict.forecast_at_last_bar). Empty / -1 in array
    # files written before they were kept.
    latest_features: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    latest_time: int = -1
    # features and targets before normalisation (float64): what the array file holds.
    raw_features: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    raw_targets: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # What the next preprocess job needs to append new bars' rows instead of making the
    # arrays from every bar (rnnfleet.appending.AppendBase: the files, their bars' counts,
    # the last bars); {} where it cannot.
    append_base: dict = field(default_factory=dict)
    tail_times: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    tail_values: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))

    @property
    def rows(self) -> int:
        return int(self.features.shape[0])

    @property
    def all_horizons(self) -> tuple[int, ...]:
        return self.horizons or (self.horizon,)

    @property
    def split(self) -> SplitPoints:
        rows = self.rows
        val_end = rows if self.val_end < 0 else self.val_end
        test_start = rows if self.test_start < 0 else self.test_start
        return SplitPoints(self.train_end, self.val_start, val_end, test_start)


# How messages name the limit on rows with NaN/inf: the config key, or a tool's own option.
MAX_BAD_FRACTION_KEY = "config key preprocess.max_bad_fraction"


def drop_non_finite(frame, name: str, max_fraction: float, max_fraction_setting: str = MAX_BAD_FRACTION_KEY):
    """Drop rows with NaN/inf in prices or volume (where there is one), up to max_fraction of
    the rows (the setting named max_fraction_setting in the error)."""
    values = frame[bar_columns(frame)].to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values).all(axis=1)
    n_bad = int(bad.sum())
    if n_bad == 0:
        return frame
    # A value that is not a number (a damaged row) was read as NaN (formats.check_numeric).
    not_numeric = frame.attrs.get("not_numeric") or []
    what = "NaN, infinite or non-numeric values" if not_numeric else "NaN or infinite values"
    examples = "; ".join(f"{place} holds {value!r} in column {column}" for place, column, value in not_numeric)
    where = f" ({examples}{' ...' if n_bad > len(not_numeric) else ''})" if not_numeric else ""
    if n_bad > max_fraction * len(frame):
        raise DataError(
            f"{name}: {n_bad} of {len(frame)} rows hold {what}{where}, more than the "
            f"allowed fraction {max_fraction} ({max_fraction_setting})"
        )
    frame = frame[~bad].reset_index(drop=True)
    frame.attrs.setdefault("notes", []).append(f"{n_bad} row(s) with {what} dropped{where}")
    return frame


def check_prices(prices: np.ndarray, volume: np.ndarray, name: str = "dataset") -> None:
    """Prices > 0 (log returns need them) and volume >= 0, else DataError naming the row.

    prices: (rows, 4) open, high, low, close; volume: (rows,).
    """
    if (prices <= 0).any():
        row = int(np.nonzero((prices <= 0).any(axis=1))[0][0])
        raise DataError(f"{name}: zero or negative price in data row {row + 1} (log returns need prices > 0)")
    if (volume < 0).any():
        row = int(np.nonzero(volume < 0)[0][0])
        raise DataError(f"{name}: negative volume in data row {row + 1}")


def bar_columns(frame) -> list[str]:
    """The number columns of a bars table: the prices, and volume where the file had one."""
    return [*PRICE_KEYS, *(["volume"] if "volume" in frame.columns else [])]


def features_for_bars(bars, features, name: str = "dataset") -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the features to compute, those left out) for a bars table: all of `features` where
    it has volume; without volume, the default features leave out those needing it, while a
    list the user chose that names one is a DataError naming the feature and the file."""
    features = tuple(features)
    needing_volume = tuple(feature for feature in features if feature in VOLUME_FEATURES)
    if "volume" in bars.columns or not needing_volume:
        return features, ()
    if features == DEFAULT_FEATURES:
        return tuple(feature for feature in features if feature not in VOLUME_FEATURES), needing_volume
    raise DataError(
        f"{name}: has no volume column, which feature {needing_volume[0]!r} (config key features) needs; "
        "remove it from features: or give this dataset a file with volume"
    )


def bar_features(bars, feature_definition=DEFAULT_FEATURES, name: str = "dataset", sources=None):
    """The features of every bar of read_clean_bars' frame (rnnfleet.features.FeatureMatrix),
    prices checked first. The one feature path, used by preprocessing and prediction (with
    sources: a model file's vetted plug-ins, see rnnfleet.plugins.resolve)."""
    check_prices(*prices_and_volume(bars), name)
    return compute_feature_matrix(bars, feature_definition, name, sources)


def horizons_setting(horizon: int | Sequence[int]) -> tuple[int, ...]:
    """The horizons of the preprocess setting `horizon`: () for one (an int), else the list's."""
    return () if isinstance(horizon, (int, np.integer)) else tuple(int(h) for h in horizon)


def longest_horizon(horizon: int | Sequence[int]) -> int:
    return max(horizons_setting(horizon) or (int(horizon),))


def compute_features(
    bars,
    horizon: int | Sequence[int],
    feature_definition=DEFAULT_FEATURES,
    target: str = DEFAULT_TARGET,
    name: str = "dataset",
):
    """Features and target of every bar that has both: bars from the features' warm-up to
    the (longest) horizon before the end. Returns (features (n, F) float64, targets (n,),
    or (n, horizons) for a list of horizons, the FeatureMatrix of all bars, close of the last bar)."""
    matrix = bar_features(bars, feature_definition, name)
    log_close = np.log(bars["close"].to_numpy(dtype=np.float64))
    rows = max(len(log_close) - longest_horizon(horizon) - matrix.warmup, 0)
    values = [
        TARGETS[target].values(log_close, h)[matrix.warmup : matrix.warmup + rows]
        for h in horizons_setting(horizon) or (int(horizon),)
    ]
    targets = np.column_stack(values) if horizons_setting(horizon) else values[0]
    features = matrix.values[matrix.warmup : matrix.warmup + rows]
    return features, targets, matrix, float(bars["close"].iloc[-1])


_MIX_1, _MIX_2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_SEED = np.uint64(0x9E3779B97F4A7C15)


def _mix(words: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, element-wise (uint64 arithmetic wraps)."""
    words = (words ^ (words >> np.uint64(30))) * _MIX_1
    words = (words ^ (words >> np.uint64(27))) * _MIX_2
    return words ^ (words >> np.uint64(31))


def row_digests(features: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """(rows,) uint64: a digest of each feature row's exact float64 features and target
    (before normalisation). The same values give the same digest on every platform."""
    values = np.column_stack([np.asarray(features, np.float64), np.asarray(targets, np.float64)])
    words = np.ascontiguousarray(values).view(np.uint64)
    digests = np.full(len(words), _SEED, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for column in words.T:
            digests = _mix(digests ^ column)
    return digests


def normalise(features: np.ndarray, feature_mean: np.ndarray, feature_std: np.ndarray) -> np.ndarray:
    """(features - mean) / std as contiguous float32, from the float32 statistics that the
    model file stores, so that prediction reproduces the training inputs bit for bit."""
    centred = features - feature_mean.astype(np.float64)
    # Divided straight into the float32 result: one float64 temporary, not two.
    return np.divide(centred, feature_std.astype(np.float64), out=np.empty(features.shape, np.float32))


def embargo_rows(seq_len: int, horizon: int, warmup: int) -> int:
    """Feature rows from the last window end of one part to the first of the next. A window
    ending at feature row t touches bars t - seq_len + 1 .. t + warmup + horizon
    (rnnfleet.gaps), so windows of two parts this far apart share no bar."""
    return seq_len + horizon + warmup


def split_points(
    rows: int,
    seq_len: int,
    horizon: int,
    val_fraction: float,
    test_fraction: float,
    warmup: int = 1,
    val_bars: int | None = None,
    test_bars: int | None = None,
    val_max_bars: int | None = None,
    test_max_bars: int | None = None,
) -> SplitPoints:
    """The three chronological parts of `rows` feature rows: the test part is the last
    test_fraction (none at 0), validation the val_fraction before it, training the rest;
    an embargo (embargo_rows) before validation and before the test part. val_bars and
    test_bars (preprocess.val_bars, test_bars), where given, size those parts in rows
    instead of fractions: parts that do not grow with the history. val_max_bars and
    test_max_bars (None: no cap) cap the parts the fractions size: below the caps the split
    is the fractions' exactly, above them each part holds exactly its cap's windows."""
    if val_fraction + test_fraction >= 1 and not (val_bars and test_bars):
        raise UserError(
            f"preprocess.val_fraction ({val_fraction}) + preprocess.test_fraction ({test_fraction}) "
            "must be below 1: nothing is left to train on"
        )
    embargo = embargo_rows(seq_len, horizon, warmup)
    testing = bool(test_bars) or test_fraction > 0
    if test_bars:
        test_rows = int(test_bars)
    else:
        test_rows = capped(rows - int(round(rows * (1.0 - test_fraction))) if test_fraction > 0 else 0, test_max_bars)
    test_start = rows - test_rows
    val_end = test_start - embargo if testing else rows
    if val_bars:
        val_rows = int(val_bars)
    elif test_bars:
        val_rows = capped(int(round(rows * val_fraction)), val_max_bars)
    else:
        fraction_val_end = int(round(rows * (1.0 - test_fraction))) - embargo if testing else rows
        val_rows = capped(fraction_val_end - int(round(rows * (1.0 - test_fraction - val_fraction))), val_max_bars)
    val_start = val_end - val_rows
    return SplitPoints(val_start - embargo, val_start, val_end, test_start)


def capped(part_rows: int, cap: int | None) -> int:
    """A part's rows, at most cap (None: no cap)."""
    return part_rows if cap is None else min(part_rows, int(cap))


def split_settings(settings: dict) -> tuple:
    """The split's arguments after `warmup` (val_bars .. test_max_bars) from preprocess
    settings (rnnfleet.settings.preprocess_settings), each left out at its default."""
    return (
        settings.get("val_bars"),
        settings.get("test_bars"),
        settings.get("val_max_bars", DEFAULT_MAX_PART_BARS),
        settings.get("test_max_bars", DEFAULT_MAX_PART_BARS),
    )


def part_sizes(rows: int, split: SplitPoints, seq_len: int) -> tuple[int, int, int]:
    """Windows (gaps aside) of the training, validation and test parts."""
    return split.train_end - (seq_len - 1), split.val_end - split.val_start, rows - split.test_start


def long_enough(
    rows: int,
    seq_len: int,
    horizon: int,
    val_fraction: float,
    test_fraction: float,
    warmup: int,
    val_bars: int | None = None,
    test_bars: int | None = None,
    val_max_bars: int | None = None,
    test_max_bars: int | None = None,
) -> bool:
    """Whether `rows` feature rows give each part (the test part only when there is one) a window."""
    split = split_points(
        rows, seq_len, horizon, val_fraction, test_fraction, warmup, val_bars, test_bars, val_max_bars, test_max_bars
    )
    n_train, n_val, n_test = part_sizes(rows, split, seq_len)
    return n_train >= 1 and n_val >= 1 and (n_test >= 1 or (test_fraction == 0 and not test_bars))


def rows_needed(
    seq_len: int,
    horizon: int,
    val_fraction: float,
    test_fraction: float,
    warmup: int,
    val_bars: int | None = None,
    test_bars: int | None = None,
    val_max_bars: int | None = None,
    test_max_bars: int | None = None,
) -> int:
    """The fewest feature rows that give each part a window."""
    parts = (val_fraction, test_fraction, warmup, val_bars, test_bars, val_max_bars, test_max_bars)
    if val_bars or test_bars:
        rows = seq_len + (val_bars or 0) + (test_bars or 0)  # fewer rows cannot hold the parts
    elif val_max_bars or test_max_bars:
        rows = seq_len  # a cap below a fraction's share can make fewer rows enough
    else:
        rows = int(np.ceil((seq_len + embargo_rows(seq_len, horizon, warmup)) / (1.0 - val_fraction - test_fraction)))
    while not long_enough(rows, seq_len, horizon, *parts):
        rows += 1
    return rows


def denormalised(arrays: PreparedArrays, rows: slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
    """The feature rows and targets of `arrays` as they were before normalisation (float64):
    the raw values themselves where the arrays hold them (every array file since format 2)."""
    if len(arrays.raw_targets) == arrays.rows:
        return arrays.raw_features[rows], arrays.raw_targets[rows]
    raw_features = arrays.features[rows] * arrays.feature_std.astype(np.float64) + arrays.feature_mean.astype(
        np.float64
    )
    raw_targets = arrays.targets[rows] * np.asarray(arrays.target_std, np.float64) + arrays.target_mean
    return raw_features, raw_targets


def normalised_with(
    arrays: PreparedArrays,
    raw_features: np.ndarray,
    raw_targets: np.ndarray,
    statistics: tuple[np.ndarray, np.ndarray, float | np.ndarray, float | np.ndarray],
    **changes,
) -> PreparedArrays:
    """`arrays` holding raw_features and raw_targets normalised with statistics (feature
    mean and std, target mean and std), with `changes` to its other fields: the one place
    features and targets are normalised (array files, updates, folds)."""
    feature_mean, feature_std, target_mean, target_std = statistics
    features, targets = normalised_rows(raw_features, raw_targets, statistics)
    return replace(
        arrays,
        features=features,
        targets=targets,
        raw_features=raw_features,
        raw_targets=raw_targets,
        feature_mean=feature_mean,
        feature_std=feature_std,
        target_mean=target_mean,
        target_std=target_std,
        **changes,
    )


def normalised_rows(
    raw_features: np.ndarray, raw_targets: np.ndarray, statistics: tuple
) -> tuple[np.ndarray, np.ndarray]:
    """(features, targets) normalised with statistics (feature mean and std, target mean and
    std) as contiguous float32: what the models see, computed one way for every caller."""
    feature_mean, feature_std, target_mean, target_std = statistics
    targets = np.ascontiguousarray((raw_targets - target_mean) / target_std, dtype=np.float32)
    return normalise(raw_features, feature_mean, feature_std), targets


def fit_normalisation(train_features: np.ndarray, train_targets: np.ndarray, target: str) -> tuple:
    """(feature_mean, feature_std (float32; 1 where a feature is constant), target_mean,
    target_std) of a training part's rows; for targets of several horizons (2-D) the
    target's statistics are float64 arrays, one per horizon."""
    feature_mean = train_features.mean(axis=0).astype(np.float32)
    feature_std = train_features.std(axis=0).astype(np.float32)
    feature_std[feature_std == 0] = 1.0
    if train_targets.ndim == 1:
        target_mean, target_std = TARGETS[target].scaling(train_targets)
    else:
        target_mean, target_std = np.array([TARGETS[target].scaling(column) for column in train_targets.T]).T
    return feature_mean, feature_std, target_mean, target_std


def target_statistic(value) -> float | np.ndarray:
    """A target_mean or target_std as stored (a number, or a list / array of one per horizon)."""
    values = np.asarray(value, dtype=np.float64)
    return float(values) if values.ndim == 0 else values


def split_and_normalise(
    features: np.ndarray,
    targets: np.ndarray,
    seq_len: int,
    horizon: int | Sequence[int],
    val_fraction: float,
    last_close: float,
    name: str = "dataset",
    target: str = DEFAULT_TARGET,
    test_fraction: float = DEFAULT_TEST_FRACTION,
    warmup: int = 1,
    val_bars: int | None = None,
    test_bars: int | None = None,
    val_max_bars: int | None = DEFAULT_MAX_PART_BARS,
    test_max_bars: int | None = DEFAULT_MAX_PART_BARS,
) -> PreparedArrays:
    """Chronological split (split_points); statistics from the training part only; float32,
    contiguous. horizon: one, or a list (train.horizons; the parts lie apart by the longest)."""
    horizons, horizon = horizons_setting(horizon), longest_horizon(horizon)
    rows = len(targets)
    parts = (val_fraction, test_fraction, warmup, val_bars, test_bars, val_max_bars, test_max_bars)
    split = split_points(rows, seq_len, horizon, *parts)
    if not long_enough(rows, seq_len, horizon, *parts):
        extra = warmup + horizon  # bars without features or without a target
        needed = rows_needed(seq_len, horizon, *parts) + extra
        described = "plus validation and test" if test_fraction > 0 or test_bars else "plus validation"
        val_key = f"preprocess.val_bars={val_bars}" if val_bars else f"preprocess.val_fraction={val_fraction}"
        test_key = f"preprocess.test_bars={test_bars}" if test_bars else f"preprocess.test_fraction={test_fraction}"
        raise DataError(
            f"{name}: too few rows for one training window {described}: {rows + extra} usable rows, "
            f"train.seq_len={seq_len} with train.horizon={horizon}, {val_key} and "
            f"{test_key} need at least {needed} (the parts lie "
            f"{embargo_rows(seq_len, horizon, warmup)} bars apart); lower train.seq_len or "
            f"{test_key.partition('=')[0]}, or give this dataset more rows"
        )
    statistics = fit_normalisation(features[: split.train_end], targets[: split.train_end], target)
    unnormalised = PreparedArrays(
        features=features,
        targets=targets,
        feature_mean=statistics[0],
        feature_std=statistics[1],
        target_std=statistics[3],
        train_end=split.train_end,
        val_start=split.val_start,
        val_end=split.val_end,
        test_start=split.test_start,
        last_close=last_close,
        horizon=horizon,
        horizons=horizons,
        target=target,
        warmup=warmup,
    )
    raw_features = np.ascontiguousarray(features, dtype=np.float64)
    return normalised_with(unnormalised, raw_features, np.ascontiguousarray(targets, dtype=np.float64), statistics)


def read_clean_bars(
    paths: str | os.PathLike | list[str],
    columns: dict[str, str] | None,
    max_bad_fraction: float,
    read_format: dict | None = None,
    max_bad_fraction_setting: str = MAX_BAD_FRACTION_KEY,
    cache_path: str | os.PathLike | None = None,
    dataset: str = "",
):
    """The bars that preprocessing, inspection and prediction all start from: of each file
    (its .CHECKSUM verified where it has one) read_bars, then drop_non_finite; several files
    joined in time order (rnnfleet.bars.joining.join_bars). attrs["sources"]: one line per file,
    how it was read and the time range it holds; attrs["read_as"]: how the file(s) were read;
    attrs["timezone"]: the zone(s) their times were read in. cache_path: for several files,
    where the bars of each file are kept and taken from while the file is unchanged
    (rnnfleet.bars.bar_cache); attrs["reading"] then says what was read and what was taken
    (dataset: its name in those lines)."""
    from rnnfleet.bars.bar_cache import BarCache, reading_key

    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    paths = list(map(str, paths))
    cache = None
    if cache_path is not None and len(paths) > 1:
        cache = BarCache.open(cache_path, reading_key(columns, read_format, max_bad_fraction))
        cache.keep_only(paths)
    frames, sources, read_sources = read_files(
        paths, columns, max_bad_fraction, read_format, max_bad_fraction_setting, cache
    )
    if len(frames) > 1:
        read_as = "; ".join(dict.fromkeys(part.attrs["read_as"] for _, part in frames))
        timezone = "; ".join(dict.fromkeys(part.attrs["timezone"] for _, part in frames))
        frame = join_bars(frames)
        frame.attrs["read_as"] = f"{len(frames)} files joined: {read_as}"
        frame.attrs["conflicting_duplicates"] = sum(part.attrs.get("conflicting_duplicates", 0) for _, part in frames)
        frame.attrs["timezone"] = timezone
    else:
        frame = frames[0][1]
    frame.attrs["sources"] = sources
    frame.attrs["read_sources"] = read_sources
    # Of each file, for a later job that appends new files' bars (rnnfleet.appending).
    # The SHA-256 of the bars cache's records: no file is hashed for this alone.
    known = {path: record.get("sha256") for path, record in cache.entries.items()} if cache else {}
    frame.attrs["files"] = [file_facts(path, part, known.get(path)) for path, part in frames]
    if cache:
        cache.save()
        frame.attrs["reading"] = cache.summary_lines(bars_label(paths, dataset))
    return frame


def read_files(paths: list[str], columns, max_bad_fraction, read_format, max_bad_fraction_setting, cache):
    """([(path, its bars table)], a source line per file, the lines of the files read rather
    than taken from the cache): read_clean_bars' reading, before the join."""
    from rnnfleet.bars.bar_cache import file_version

    frames, sources, read_sources = [], [], []
    for path in paths:
        cached = cache.take(path) if cache else None
        if cached is None:
            version = file_version(path)
            checked = verify_checksum(path)
            frame = drop_non_finite(
                read_bars(path, columns, read_format), path, max_bad_fraction, max_bad_fraction_setting
            )
            source = f"{path}: read as {frame.attrs['read_as']}; {time_range(frame)}" + (
                f"; {checked}" if checked else ""
            )
            read_sources.append(source)
            if cache:
                cache.put(path, frame, source, version)
        else:
            frame, source = cached
        frames.append((path, frame))
        sources.append(source)
    return frames, sources, read_sources


def file_facts(path: str, frame, sha256: str | None = None) -> dict:
    """How one file was read, as a join of files records it: its read line, zone and columns;
    and its SHA-256 where it is known (the bars cache's record), None elsewhere."""
    return {
        "path": path,
        "read_as": frame.attrs["read_as"],
        "timezone": frame.attrs["timezone"],
        "volume": "volume" in frame.columns,
        "bars": len(frame),
        "sha256": sha256,
    }


def bars_label(paths: str | os.PathLike | list[str], dataset: str = "") -> str:
    """What lines about a dataset's bars name: its file, or the dataset, its files' count and folder."""
    if isinstance(paths, (str, os.PathLike)) or len(paths) == 1:
        return str(paths if isinstance(paths, (str, os.PathLike)) else paths[0])
    folder = os.path.commonpath(list(map(str, paths)))
    return f"{dataset + ' ' if dataset else ''}({len(paths)} files under {folder})"


def sources_summary(frame, label: str) -> list[str]:
    """How a dataset's bars were read, for a command's own output: a single file's source
    line; for several files, one line (label, how they were read, the joined time range, how
    many had their checksum verified) where each file's line would flood the terminal."""
    sources = frame.attrs["sources"]
    if len(sources) == 1:
        return list(sources)
    verified = sum(line.endswith("sha256 verified") for line in sources)
    checked = f"; {verified} of {len(sources)} checksums verified" if verified else ""
    return [f"{label}: read as {frame.attrs['read_as']}; {time_range(frame)}{checked}"]


def prices_and_volume(frame) -> tuple[np.ndarray, np.ndarray]:
    """(rows, 4) open, high, low, close and (rows,) volume (empty where the file has none),
    float64, from read_bars' frame (views of one copy of the numbers)."""
    bars = frame[bar_columns(frame)].to_numpy(dtype=np.float64)
    return bars[:, :4], bars[:, 4] if bars.shape[1] > 4 else np.zeros(0)


def prepare_dataset(
    csv_path: str | os.PathLike | list[str],
    seq_len: int,
    horizon: int | Sequence[int],
    val_fraction: float,
    test_fraction: float = DEFAULT_TEST_FRACTION,
    columns: dict[str, str] | None = None,
    max_bad_fraction: float = 0.01,
    features: list[str] | tuple[str, ...] = DEFAULT_FEATURES,
    target: str = DEFAULT_TARGET,
    read_format: dict | None = None,
    max_gap: str | None = None,
    dataset: str = "",
    quality: dict | None = None,
    bars_cache: str | os.PathLike | None = None,
    val_bars: int | None = None,
    test_bars: int | None = None,
    val_max_bars: int | None = DEFAULT_MAX_PART_BARS,
    test_max_bars: int | None = DEFAULT_MAX_PART_BARS,
) -> tuple[PreparedArrays, list[str]]:
    """Bars file(s) -> PreparedArrays, plus notes on what was cleaned and split (for the log);
    says on stderr how each file was read and which times it holds, and each data-quality
    warning (quality: the `quality:` thresholds; a failing flag is a DataError). dataset: its
    name, for the lines about a dataset of several files. bars_cache: where the bars of each
    of several files are kept between runs (read_clean_bars), so that only new or changed
    files are read; the arrays are the same either way. val_bars, test_bars: the validation
    and test parts' sizes in rows instead of val_fraction and test_fraction; val_max_bars,
    test_max_bars: the caps on the parts the fractions size (split_points; None: no cap)."""
    name = bars_label(csv_path, dataset)
    frame = read_clean_bars(csv_path, columns, max_bad_fraction, read_format, cache_path=bars_cache, dataset=dataset)
    for line in frame.attrs["read_sources"] + frame.attrs.get("reading", []):
        print(line, file=sys.stderr)
    notes = list(frame.attrs.get("notes", []))
    read = {
        "read_format": {**FORMAT_DEFAULTS, **(read_format or {})},
        "timezone": frame.attrs["timezone"],
        "read_as": frame.attrs["read_as"],
    }
    features, left_out = features_for_bars(frame, features, name)
    if left_out:
        notes.append(left_out_note(left_out))
    timestamps_ns = frame["timestamp"].array.asi8
    check_one_minute_bars(timestamps_ns, name)
    quality_row, warnings = check_quality(frame, max_gap, quality, name)
    for line in warnings:
        print(line, file=sys.stderr)
    if measures_text(quality_row):
        # Warnings are judged where the tables are written (warn thresholds re-train nothing).
        print(f"{name}: data quality measured: {measures_text(quality_row)}", file=sys.stderr)
    quality_row.pop("quality_flags")
    if len(frame) < 2 + longest_horizon(horizon):
        raise DataError(
            f"{name}: too few rows for one training window plus validation and test: only {len(frame)} usable rows"
        )
    feature_matrix, targets, matrix, last_close = compute_features(frame, horizon, features, target, name)
    names, warmup = matrix.names, matrix.warmup
    latest_features = np.array(matrix.values[warmup:][-seq_len:], dtype=np.float64)
    base = append_base(frame, features, target, warmup, seq_len, longest_horizon(horizon))
    del frame, matrix  # from here on only the numbers are held (a large file is in memory once)
    columns = FeatureColumns(tuple(features), names, left_out)
    split = (val_fraction, test_fraction, val_bars, test_bars, val_max_bars, test_max_bars)
    arrays, gap_note = arrays_of(
        feature_matrix, targets, timestamps_ns, warmup, seq_len, horizon, split, target, max_gap, name, columns
    )
    notes += gap_note
    arrays = replace(
        arrays, quality=quality_row, **read, latest_features=latest_features, last_close=last_close, **base
    )
    return arrays, notes


@dataclass(frozen=True)
class FeatureColumns:
    """The features an array file's columns hold: the `features:` references computed, a
    name per column, the default features left out (no volume)."""

    definition: tuple[str, ...]
    names: tuple[str, ...]
    left_out: tuple[str, ...]


def arrays_of(
    features: np.ndarray,
    targets: np.ndarray,
    timestamps_ns: np.ndarray,
    warmup: int,
    seq_len: int,
    horizon: int | Sequence[int],
    split: tuple,
    target: str,
    max_gap: str | None,
    name: str,
    columns: FeatureColumns,
) -> tuple[PreparedArrays, list[str]]:
    """The arrays of every feature row (features, targets: raw) of bars at timestamps_ns,
    split and normalised (split: val_fraction, test_fraction, val_bars, test_bars and the
    caps), with their digests, times and gaps; and the note on the gaps (none or one)."""
    val_fraction, test_fraction, *parts = split
    arrays = split_and_normalise(
        features, targets, seq_len, horizon, val_fraction, 0.0, name, target, test_fraction, warmup, *parts
    )
    arrays = replace(
        arrays,
        feature_definition=columns.definition,
        feature_sha256=imported_sha256(columns.definition),
        feature_names=columns.names,
        features_left_out=columns.left_out,
        row_digests=row_digests(features, targets),
        row_times=np.ascontiguousarray(timestamps_ns[warmup : warmup + len(targets)], dtype=np.int64),
        latest_time=int(timestamps_ns[-1]),
    )
    gap_bars = find_gaps(timestamps_ns, max_gap)
    if not len(gap_bars):
        return arrays, []
    note = check_gap_windows(arrays, gap_bars, timestamps_ns, seq_len, max_gap, name)
    return replace(arrays, gap_bars=gap_bars), [note]


APPENDABLE_TARGETS = ("log_return", "abs_log_return", "direction")
# Rows before the new ones computed again from the kept bars and compared with the stored ones.
CHECK_ROWS = 32
# The modules whose code decides an array file's numbers (an append needs the same), by
# their path in the package.
ARRAYS_CODE = (
    "data.py",
    "features.py",
    "targets.py",
    "bars/quality.py",
    "gaps.py",
    "bars/joining.py",
    "bars/formats.py",
    "appending.py",
    "bars/bar_cache.py",
)


def code_key() -> str:
    """A digest of the code that makes array files from bars (ARRAYS_CODE, numpy, pandas)."""
    import pandas as pd

    digest = hashlib.sha256(f"{ARRAYS_FORMAT} {np.__version__} {pd.__version__}".encode())
    for name in ARRAYS_CODE:
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()


def append_base(frame, features, target: str, warmup: int, seq_len: int, horizon: int) -> dict:
    """PreparedArrays' append_base, tail_times and tail_values from the bars table of a full
    make (read_clean_bars' frame): what a later job appends to (rnnfleet.appending: the
    files and how each was read, the bars' quality counts, the first bars' times, the last
    bars); {} where it could not: a user's feature or a target that looks further back."""
    if target not in APPENDABLE_TARGETS or any(feature not in BUILTIN_FEATURES for feature in features):
        return {}
    tail = horizon + seq_len + CHECK_ROWS + 2
    timestamps_ns = frame["timestamp"].array.asi8
    files = [versioned(facts) for facts in frame.attrs["files"]]
    base = {
        "code": code_key(),
        "files": files,
        "bars": len(frame),
        "counts": bar_counts(frame),
        "head_times": [int(time) for time in timestamps_ns[:warmup]],
        "columns": bar_columns(frame),
    }
    return {
        "append_base": base,
        "tail_times": np.ascontiguousarray(timestamps_ns[-tail:], dtype=np.int64),
        "tail_values": frame[bar_columns(frame)].to_numpy(dtype=np.float64)[-tail:],
    }


def versioned(facts: dict) -> dict:
    """A file's facts (file_facts) with its version (rnnfleet.bars.bar_cache.file_version): with
    its SHA-256, what tells a later job whether the file changed."""
    from rnnfleet.bars.bar_cache import file_version

    return {**facts, "version": file_version(facts["path"])}


def left_out_note(left_out: tuple[str, ...]) -> str:
    return (
        f"default feature(s) {', '.join(left_out)} left out: no volume column; trained on the features the prices give"
    )


def save_arrays(arrays: PreparedArrays, path: str | os.PathLike) -> None:
    """Write the arrays as an uncompressed .npz (no pickled objects), atomically: the raw
    features and targets (format ARRAYS_FORMAT), not the normalised ones."""
    from rnnfleet.checkpoint import atomic_write

    if len(arrays.raw_targets) != arrays.rows:
        raise ValueError("save_arrays needs the arrays' raw features and targets")
    with atomic_write(path) as handle:
        np.savez(
            handle,
            arrays_format=np.int64(ARRAYS_FORMAT),
            raw_features=arrays.raw_features,
            raw_targets=arrays.raw_targets,
            feature_mean=arrays.feature_mean,
            feature_std=arrays.feature_std,
            target_std=np.asarray(arrays.target_std, np.float64),
            train_end=np.int64(arrays.train_end),
            val_start=np.int64(arrays.val_start),
            val_end=np.int64(arrays.split.val_end),
            test_start=np.int64(arrays.split.test_start),
            last_close=np.float64(arrays.last_close),
            horizon=np.int64(arrays.horizon),
            horizons=np.array(arrays.horizons, dtype=np.int64),
            target=np.str_(arrays.target),
            target_mean=np.asarray(arrays.target_mean, np.float64),
            feature_definition=np.array(arrays.feature_definition, dtype=np.str_),
            feature_sha256=np.str_(json.dumps(arrays.feature_sha256)),
            feature_names=np.array(arrays.feature_names, dtype=np.str_),
            features_left_out=np.array(arrays.features_left_out, dtype=np.str_),
            warmup=np.int64(arrays.warmup),
            gap_bars=arrays.gap_bars,
            quality=np.str_(json.dumps(arrays.quality)),
            read_format=np.str_(json.dumps(arrays.read_format)),
            timezone=np.str_(arrays.timezone),
            read_as=np.str_(arrays.read_as),
            row_digests=arrays.row_digests,
            settings_sha256=np.str_(arrays.settings_sha256),
            row_times=arrays.row_times,
            latest_features=arrays.latest_features,
            latest_time=np.int64(arrays.latest_time),
            append_base=np.str_(json.dumps(arrays.append_base, sort_keys=True)),
            tail_times=arrays.tail_times,
            tail_values=arrays.tail_values,
        )


def arrays_format(path: str | os.PathLike) -> int:
    """The format of the array file at path (1 for files from before formats were numbered)."""
    with np.load(path, allow_pickle=False) as stored:
        return int(stored["arrays_format"]) if "arrays_format" in stored.files else 1


def load_arrays(path: str | os.PathLike, normalised: bool = True) -> PreparedArrays:
    """Read arrays written by save_arrays, never unpickling anything, and normalise their
    features and targets with their own statistics (normalised_with; not normalised:
    features and targets are the raw ones). An array file of another format is a
    DataError: its preprocess job makes it again (the rule's param)."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            if "train_end" in stored.files and "test_start" not in stored.files:
                raise DataError(f"{path}: an array file of an older rnnfleet (no test period); delete it and re-run")
            found = int(stored["arrays_format"]) if "arrays_format" in stored.files else 1
            if found != ARRAYS_FORMAT and "train_end" in stored.files:
                raise DataError(
                    f"{path}: an array file of format {found}, not {ARRAYS_FORMAT} (another rnnfleet); "
                    "its dataset's preprocess job makes it again: run the workflow"
                )
            raw_features, raw_targets = stored["raw_features"], stored["raw_targets"]
            arrays = PreparedArrays(
                features=raw_features,
                targets=raw_targets,
                feature_mean=stored["feature_mean"],
                feature_std=stored["feature_std"],
                target_std=target_statistic(stored["target_std"]),
                train_end=int(stored["train_end"]),
                val_start=int(stored["val_start"]),
                val_end=int(stored["val_end"]),
                test_start=int(stored["test_start"]),
                last_close=float(stored["last_close"]),
                horizon=int(stored["horizon"]),
                horizons=tuple(int(h) for h in stored["horizons"]) if "horizons" in stored.files else (),
                target=str(stored["target"]),
                target_mean=target_statistic(stored["target_mean"]),
                feature_definition=tuple(str(item) for item in stored["feature_definition"]),
                # Files written before the hashes were recorded have none.
                feature_sha256=json.loads(str(stored["feature_sha256"])) if "feature_sha256" in stored.files else {},
                feature_names=tuple(str(item) for item in stored["feature_names"]),
                features_left_out=tuple(str(item) for item in stored["features_left_out"])
                if "features_left_out" in stored.files
                else (),
                warmup=int(stored["warmup"]),
                gap_bars=stored["gap_bars"],
                # Files written before the quality flags have none.
                quality=json.loads(str(stored["quality"])) if "quality" in stored.files else {},
                # Files written before how they were read was recorded have none.
                **{
                    "read_format": json.loads(str(stored["read_format"])),
                    "timezone": str(stored["timezone"]),
                    "read_as": str(stored["read_as"]),
                }
                if "read_format" in stored.files
                else {},
                row_digests=stored["row_digests"] if "row_digests" in stored.files else np.zeros(0, np.uint64),
                settings_sha256=str(stored["settings_sha256"]) if "settings_sha256" in stored.files else "",
                row_times=stored["row_times"] if "row_times" in stored.files else np.zeros(0, np.int64),
                **{"latest_features": stored["latest_features"], "latest_time": int(stored["latest_time"])}
                if "latest_features" in stored.files
                else {},
                append_base=json.loads(str(stored["append_base"])),
                tail_times=stored["tail_times"],
                tail_values=stored["tail_values"],
            )
    except DataError:
        raise
    except (OSError, ValueError, KeyError) as error:
        import zipfile

        archive = isinstance(error, OSError) or zipfile.is_zipfile(path)
        reason = str(error).splitlines()[0] if archive else "not an .npz archive"
        raise DataError(f"{path}: not a valid rnnfleet array file ({reason}); delete it and re-run") from None
    if not normalised:
        return replace(arrays, raw_features=raw_features, raw_targets=raw_targets)
    statistics = (arrays.feature_mean, arrays.feature_std, arrays.target_mean, arrays.target_std)
    return normalised_with(arrays, raw_features, raw_targets, statistics)
