"""Raw CSV -> validated features, targets, chronological split, normalisation; array file I/O.

The array file (`.npz`) holds the feature matrix once (rows x features, float32,
already normalised with training-part statistics) and the aligned targets. Training
windows are cut from it later as views, so its size stays O(rows).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rnnfleet.errors import DataError
from rnnfleet.faults import pause_point

FEATURE_NAMES = (
    "log_open_over_prev_close",
    "log_high_over_prev_close",
    "log_low_over_prev_close",
    "log_close_over_prev_close",
    "log1p_volume",
)
TARGET_NAME = "log_close_return"
PRICE_KEYS = ("open", "high", "low", "close")
DEFAULT_COLUMNS = {
    "timestamp": "timestamp",
    "open": "open",
    "high": "high",
    "low": "low",
    "close": "close",
    "volume": "volume",
}


@dataclass(frozen=True)
class PreparedArrays:
    """One dataset, ready to train on.

    features[t] describes bar t; targets[t] is the log return of the close from bar t to
    bar t + horizon, divided by target_std. A window ending at bar t predicts targets[t].
    Windows ending in [seq_len - 1, train_end) train; windows ending in [val_start, rows) validate.
    """

    features: np.ndarray  # (rows, n_features) float32, normalised
    targets: np.ndarray  # (rows,) float32, scaled by target_std
    feature_mean: np.ndarray  # (n_features,) float32
    feature_std: np.ndarray  # (n_features,) float32
    target_std: float
    train_end: int
    val_start: int
    last_close: float
    horizon: int

    @property
    def rows(self) -> int:
        return int(self.features.shape[0])


def read_bars(csv_path: str | os.PathLike, columns: dict[str, str] | None = None):
    """Read a CSV of bars into a DataFrame with canonical column names, sorted by time,
    exact duplicate timestamps dropped. Raises DataError naming the file and the problem."""
    import pandas as pd  # imported here so that training jobs never pay for pandas

    columns = {**DEFAULT_COLUMNS, **(columns or {})}
    name = str(csv_path)
    wanted = set(columns.values())
    try:
        if os.path.getsize(csv_path) == 0:
            raise DataError(f"{name}: the file is empty")
        # The one read of the file: only the six columns, parsed straight to numbers.
        frame = pd.read_csv(csv_path, usecols=lambda col: col in wanted, encoding="utf-8")
    except OSError as error:
        raise DataError(f"{name}: cannot be read ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise DataError(f"{name}: not UTF-8 text{first_undecodable_line(csv_path)}; save it as UTF-8") from None
    except pd.errors.EmptyDataError:
        raise DataError(f"{name}: the file is empty") from None
    except pd.errors.ParserError as error:
        raise DataError(f"{name}: not a readable CSV ({error})") from None
    missing = [col for col in columns.values() if col not in frame.columns]
    if missing:
        header = ", ".join(map(str, pd.read_csv(csv_path, nrows=0, encoding="utf-8").columns))
        raise DataError(
            f"{name}: missing required column(s) {', '.join(missing)}; its header is {header[:200]!r} "
            f"(set `columns:` in the config if the file names them differently)"
        )
    frame = frame.rename(columns={csv_name: key for key, csv_name in columns.items()})
    if frame.empty:
        raise DataError(f"{name}: has a header but no data rows")
    for key in (*PRICE_KEYS, "volume"):
        if not pd.api.types.is_numeric_dtype(frame[key]):
            values = pd.to_numeric(frame[key], errors="coerce")
            bad_row = int(values.isna().to_numpy().nonzero()[0][0])
            raise DataError(
                f"{name}: column '{columns[key]}' is not numeric "
                f"(data row {bad_row + 1} holds {frame[key].iloc[bad_row]!r})"
            )
    return _sorted_unique_by_time(frame, name, columns["timestamp"])


def first_undecodable_line(csv_path: str | os.PathLike) -> str:
    """' (line N holds ...)' for the first line that is not UTF-8, or '' for a compressed
    file. Reads the file again, line by line: only on this error path."""
    if Path(csv_path).suffix in (".gz", ".bz2", ".xz", ".zst", ".zip"):
        return ""
    with open(csv_path, "rb") as handle:
        for number, line in enumerate(handle, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as error:
                return f" (line {number} holds {line[max(0, error.start - 12) : error.end + 12]!r})"
    return ""


def _sorted_unique_by_time(frame, name: str, timestamp_column: str):
    import pandas as pd

    parsed = pd.to_datetime(frame["timestamp"], errors="coerce", utc=True)
    if parsed.isna().any():
        numeric = pd.to_numeric(frame["timestamp"], errors="coerce")
        if numeric.isna().any():
            bad_row = int(parsed.isna().to_numpy().nonzero()[0][0])
            raise DataError(
                f"{name}: column '{timestamp_column}' has a value that is not a time "
                f"(data row {bad_row + 1} holds {frame['timestamp'].iloc[bad_row]!r})"
            )
        parsed = numeric
    frame["timestamp"] = parsed  # replaces the text column in place: no copy of the prices
    notes = []
    if not frame["timestamp"].is_monotonic_increasing:
        frame = frame.sort_values("timestamp", kind="stable")
        notes.append("rows were not in time order and were sorted")
    duplicated = frame["timestamp"].duplicated(keep="last")
    if duplicated.any():
        frame = frame[~duplicated]
        notes.append(f"{int(duplicated.sum())} duplicate timestamp(s) dropped, keeping the last")
    frame.attrs["notes"] = notes
    return frame.reset_index(drop=True)


def drop_non_finite(frame, name: str, max_fraction: float):
    """Drop rows with NaN/inf in prices or volume, up to max_fraction of the rows."""
    values = frame[[*PRICE_KEYS, "volume"]].to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values).all(axis=1)
    n_bad = int(bad.sum())
    if n_bad == 0:
        return frame
    if n_bad > max_fraction * len(frame):
        raise DataError(
            f"{name}: {n_bad} of {len(frame)} rows hold NaN or infinite values, more than the "
            f"allowed fraction {max_fraction} (preprocess.max_bad_fraction)"
        )
    frame = frame[~bad].reset_index(drop=True)
    frame.attrs.setdefault("notes", []).append(f"{n_bad} row(s) with NaN or infinite values dropped")
    return frame


def bar_features(prices: np.ndarray, volume: np.ndarray, name: str = "dataset") -> np.ndarray:
    """The features of every bar that has a previous close: (rows-1, 5) float64, row i
    describing bar i+1. The one feature definition, used by preprocessing and prediction.

    prices: (rows, 4) open, high, low, close; volume: (rows,).
    """
    if (prices <= 0).any():
        row = int(np.nonzero((prices <= 0).any(axis=1))[0][0])
        raise DataError(f"{name}: zero or negative price in data row {row + 1} (log returns need prices > 0)")
    if (volume < 0).any():
        row = int(np.nonzero(volume < 0)[0][0])
        raise DataError(f"{name}: negative volume in data row {row + 1}")
    log_prices = np.log(prices)
    features = np.empty((len(prices) - 1, len(FEATURE_NAMES)), dtype=np.float64)
    features[:, :4] = log_prices[1:] - log_prices[:-1, 3, None]
    features[:, 4] = np.log1p(volume[1:])
    return features


def compute_features(
    prices: np.ndarray, volume: np.ndarray, horizon: int, name: str = "dataset"
) -> tuple[np.ndarray, np.ndarray, float]:
    """Features per bar and the target (close log return over `horizon` bars).

    prices: (rows, 4) open, high, low, close. Returns features (rows-1-horizon, 5),
    targets (rows-1-horizon,) and the close of the last bar (for forecasts in price units).
    The first bar has no previous close and the last `horizon` bars have no target.
    """
    features = bar_features(prices, volume, name)
    log_close = np.log(prices[:, 3])
    targets = log_close[1 + horizon :] - log_close[1:-horizon]
    return features[: len(targets)], targets, float(prices[-1, 3])


def normalise(features: np.ndarray, feature_mean: np.ndarray, feature_std: np.ndarray) -> np.ndarray:
    """(features - mean) / std as contiguous float32, from the float32 statistics that the
    model file stores, so that prediction reproduces the training inputs bit for bit."""
    centred = features - feature_mean.astype(np.float64)
    # Divided straight into the float32 result: one float64 temporary, not two.
    return np.divide(centred, feature_std.astype(np.float64), out=np.empty(features.shape, np.float32))


def split_and_normalise(
    features: np.ndarray,
    targets: np.ndarray,
    seq_len: int,
    horizon: int,
    val_fraction: float,
    last_close: float,
    name: str = "dataset",
) -> PreparedArrays:
    """Chronological split; statistics from the training part only; float32, contiguous."""
    rows = len(targets)
    val_start = int(round(rows * (1.0 - val_fraction)))
    # Training targets look `horizon` bars ahead; stop them before the validation part.
    train_end = val_start - horizon
    n_train = train_end - (seq_len - 1)
    n_val = rows - val_start
    if n_train < 1 or n_val < 1:
        needed = int(np.ceil((seq_len + horizon) / (1.0 - val_fraction))) + 2 + horizon
        raise DataError(
            f"{name}: too few rows for one training window plus validation: {rows + 1 + horizon} usable rows, "
            f"train.seq_len={seq_len} with train.horizon={horizon} and preprocess.val_fraction={val_fraction} "
            f"need about {needed} (lower train.seq_len or give this dataset more rows)"
        )
    train_features = features[:val_start]
    feature_mean = train_features.mean(axis=0).astype(np.float32)
    feature_std = train_features.std(axis=0).astype(np.float32)
    feature_std[feature_std == 0] = 1.0
    target_std = float(targets[:train_end].std()) or 1.0
    return PreparedArrays(
        features=normalise(features, feature_mean, feature_std),
        targets=np.ascontiguousarray(targets / target_std, dtype=np.float32),
        feature_mean=feature_mean,
        feature_std=feature_std,
        target_std=target_std,
        train_end=train_end,
        val_start=val_start,
        last_close=last_close,
        horizon=horizon,
    )


def read_clean_bars(csv_path: str | os.PathLike, columns: dict[str, str] | None, max_bad_fraction: float):
    """read_bars, then drop_non_finite: the bars that preprocessing and prediction both start from."""
    return drop_non_finite(read_bars(csv_path, columns), str(csv_path), max_bad_fraction)


def prices_and_volume(frame) -> tuple[np.ndarray, np.ndarray]:
    """(rows, 4) open, high, low, close and (rows,) volume, float64, from read_bars' frame
    (views of one copy of the numbers)."""
    bars = frame[[*PRICE_KEYS, "volume"]].to_numpy(dtype=np.float64)
    return bars[:, :4], bars[:, 4]


def prepare_dataset(
    csv_path: str | os.PathLike,
    seq_len: int,
    horizon: int,
    val_fraction: float,
    columns: dict[str, str] | None = None,
    max_bad_fraction: float = 0.01,
) -> tuple[PreparedArrays, list[str]]:
    """CSV -> PreparedArrays, plus notes on what was cleaned (for the log)."""
    name = str(csv_path)
    frame = read_clean_bars(csv_path, columns, max_bad_fraction)
    notes = list(frame.attrs.get("notes", []))
    prices, volume = prices_and_volume(frame)
    del frame  # from here on only the numbers are held (a large file is in memory once)
    if len(prices) < 2 + horizon:
        raise DataError(f"{name}: too few rows for one training window plus validation: only {len(prices)} usable rows")
    features, targets, last_close = compute_features(prices, volume, horizon, name)
    return split_and_normalise(features, targets, seq_len, horizon, val_fraction, last_close, name), notes


def save_arrays(arrays: PreparedArrays, path: str | os.PathLike) -> None:
    """Write the arrays as an uncompressed .npz (no pickled objects), atomically."""
    from rnnfleet.checkpoint import atomic_write

    with atomic_write(path) as handle:
        np.savez(
            handle,
            features=arrays.features,
            targets=arrays.targets,
            feature_mean=arrays.feature_mean,
            feature_std=arrays.feature_std,
            target_std=np.float64(arrays.target_std),
            train_end=np.int64(arrays.train_end),
            val_start=np.int64(arrays.val_start),
            last_close=np.float64(arrays.last_close),
            horizon=np.int64(arrays.horizon),
        )


def load_arrays(path: str | os.PathLike) -> PreparedArrays:
    """Read arrays written by save_arrays, never unpickling anything."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            return PreparedArrays(
                features=stored["features"],
                targets=stored["targets"],
                feature_mean=stored["feature_mean"],
                feature_std=stored["feature_std"],
                target_std=float(stored["target_std"]),
                train_end=int(stored["train_end"]),
                val_start=int(stored["val_start"]),
                last_close=float(stored["last_close"]),
                horizon=int(stored["horizon"]),
            )
    except (OSError, ValueError, KeyError) as error:
        import zipfile

        archive = isinstance(error, OSError) or zipfile.is_zipfile(path)
        reason = str(error).splitlines()[0] if archive else "not an .npz archive"
        raise DataError(f"{path}: not a valid rnnfleet array file ({reason}); delete it and re-run") from None


def preprocess_one(
    csv_path: str,
    arrays_path: str,
    seq_len: int,
    horizon: int,
    val_fraction: float,
    columns: dict[str, str] | None = None,
    max_bad_fraction: float = 0.01,
) -> PreparedArrays:
    """The preprocess job: CSV in, array file out; notes and a one-line summary to stderr."""
    import sys

    arrays, notes = prepare_dataset(csv_path, seq_len, horizon, val_fraction, columns, max_bad_fraction)
    for note in notes:
        print(f"{csv_path}: note: {note}", file=sys.stderr)
    pause_point("preprocess")
    Path(arrays_path).parent.mkdir(parents=True, exist_ok=True)
    save_arrays(arrays, arrays_path)
    print(
        f"{csv_path}: {arrays.rows} rows -> {arrays_path} "
        f"(train windows end before row {arrays.train_end}, validation from row {arrays.val_start})",
        file=sys.stderr,
    )
    return arrays
