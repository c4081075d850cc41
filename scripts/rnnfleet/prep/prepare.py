"""Raw bar file(s) -> validated features and targets, split and normalised (prepare_dataset);
the bars read and cleaned for every later step (read_clean_bars); what a later job needs to
append new bars' rows (append_base, code_key).

The arrays themselves (rnnfleet.prep.arrays), the split (rnnfleet.prep.split), normalisation
(rnnfleet.prep.normalise) and the array file (rnnfleet.prep.arrays_file) are modules of their
own; which features and which target: rnnfleet.prep.features and rnnfleet.prep.targets. Raw
values are kept so that a morning's preprocess job can append the rows of new bars to the
previous arrays (rnnfleet.prep.incremental) instead of making them from every bar: normalised
rows would change with every new training part. Training windows are cut from the arrays
later as views, so their size stays O(rows).
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from rnnfleet.bars.formats import FORMAT_DEFAULTS, PRICE_KEYS, read_bars
from rnnfleet.bars.joining import CHECKSUM_VERIFIED, check_one_minute_bars, join_bars, time_range, verify_checksum
from rnnfleet.bars.quality import bar_counts, check_quality, measures_text
from rnnfleet.errors import DataError
from rnnfleet.plugins import imported_sha256
from rnnfleet.prep.arrays import PreparedArrays
from rnnfleet.prep.arrays_file import ARRAYS_FORMAT
from rnnfleet.prep.features import BUILTIN_FEATURES, DEFAULT_FEATURES, VOLUME_FEATURES, compute_feature_matrix
from rnnfleet.prep.gaps import check_gap_windows, find_gaps
from rnnfleet.prep.normalise import Normalisation, normalised_with
from rnnfleet.prep.split import DEFAULT_MAX_PART_BARS, DEFAULT_TEST_FRACTION, SplitSettings
from rnnfleet.prep.targets import DEFAULT_TARGET, TARGETS

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
    """The features of every bar of read_clean_bars' frame (rnnfleet.prep.features.FeatureMatrix),
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
    """Chronological split (SplitSettings.points); statistics from the training part only; float32,
    contiguous. horizon: one, or a list (train.horizons; the parts lie apart by the longest)."""
    horizons, horizon = horizons_setting(horizon), longest_horizon(horizon)
    rows = len(targets)
    parts = SplitSettings(
        seq_len, horizon, val_fraction, test_fraction, warmup, val_bars, test_bars, val_max_bars, test_max_bars
    )
    split = parts.points(rows)
    if not parts.long_enough(rows):
        extra = warmup + horizon  # bars without features or without a target
        needed = parts.rows_needed() + extra
        described = "plus validation and test" if test_fraction > 0 or test_bars else "plus validation"
        val_key = f"preprocess.val_bars={val_bars}" if val_bars else f"preprocess.val_fraction={val_fraction}"
        test_key = f"preprocess.test_bars={test_bars}" if test_bars else f"preprocess.test_fraction={test_fraction}"
        raise DataError(
            f"{name}: too few rows for one training window {described}: {rows + extra} usable rows, "
            f"train.seq_len={seq_len} with train.horizon={horizon}, {val_key} and "
            f"{test_key} need at least {needed} (the parts lie "
            f"{parts.embargo} bars apart); lower train.seq_len or "
            f"{test_key.partition('=')[0]}, or give this dataset more rows"
        )
    statistics = Normalisation.fit(features[: split.train_end], targets[: split.train_end], target).statistics
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
    # Of each file, for a later job that appends new files' bars (rnnfleet.prep.incremental).
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
    verified = sum(line.endswith(CHECKSUM_VERIFIED) for line in sources)
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
    test_max_bars: the caps on the parts the fractions size (SplitSettings; None: no cap)."""
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
    "prep/prepare.py",
    "prep/arrays.py",
    "prep/split.py",
    "prep/normalise.py",
    "prep/arrays_file.py",
    "prep/features.py",
    "prep/targets.py",
    "bars/quality.py",
    "prep/gaps.py",
    "bars/joining.py",
    "bars/formats.py",
    "prep/incremental.py",
    "bars/bar_cache.py",
)


def code_key() -> str:
    """A digest of the code that makes array files from bars (ARRAYS_CODE, numpy, pandas)."""
    import pandas as pd

    digest = hashlib.sha256(f"{ARRAYS_FORMAT} {np.__version__} {pd.__version__}".encode())
    for name in ARRAYS_CODE:
        digest.update((Path(__file__).parents[1] / name).read_bytes())
    return digest.hexdigest()


def append_base(frame, features, target: str, warmup: int, seq_len: int, horizon: int) -> dict:
    """PreparedArrays' append_base, tail_times and tail_values from the bars table of a full
    make (read_clean_bars' frame): what a later job appends to (rnnfleet.prep.incremental: the
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
