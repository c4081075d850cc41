"""Gaps in a series of bars: no training or validation window spans one.

Promise: a gap is a step between two consecutive bars longer than `preprocess.max_gap`.
The array file stores where the gaps are (`gap_bars`: bar b when the step from bar b to
bar b + 1 is a gap); `window_numbers` turns that into the windows training may use, so a
window never joins bars from two sides of a gap, neither in its inputs nor in its target.

Indexing (as in rnnfleet.data): with a features' warm-up of w bars (1 for the default
features: each bar's return from the previous close), feature row t describes bar t + w and
may look back to bar t; its target runs from bar t + w to bar t + w + horizon. The window
ending at feature row t therefore touches bars t - seq_len + 1 .. t + w + horizon.
"""

from __future__ import annotations

import numpy as np

from rnnfleet.errors import DataError

GAPS_OFF = "off"


def max_gap_nanoseconds(max_gap: str | None) -> int | None:
    """preprocess.max_gap ('15min', '2h', 'off') in nanoseconds; None when off."""
    if max_gap in (None, GAPS_OFF):
        return None
    import pandas as pd

    return int(pd.Timedelta(max_gap).value)


def find_gaps(timestamps_ns: np.ndarray, max_gap: str | None) -> np.ndarray:
    """Bars after which a gap follows (int64), from sorted epoch nanoseconds."""
    limit = max_gap_nanoseconds(max_gap)
    if limit is None or len(timestamps_ns) < 2:
        return np.zeros(0, dtype=np.int64)
    return np.nonzero(np.diff(timestamps_ns) > limit)[0].astype(np.int64)


def usable_window_ends(rows: int, gap_bars: np.ndarray, seq_len: int, horizon: int, warmup: int = 1) -> np.ndarray:
    """(rows,) bool: True where a window ending at that feature row spans no gap."""
    ends = np.arange(rows)
    first_bar, last_step = ends - seq_len + 1, ends + warmup - 1 + horizon  # steps first_bar .. last_step
    gap_step = np.zeros(rows + warmup + horizon, dtype=np.int64)
    gap_step[gap_bars] = 1
    gaps_before = np.concatenate([[0], np.cumsum(gap_step)])  # gaps among steps < k
    inside = gaps_before[last_step + 1] - gaps_before[np.maximum(first_bar, 0)]
    return (first_bar >= 0) & (inside == 0)


def window_numbers(
    rows: int, train_end: int, val_start: int, gap_bars: np.ndarray, seq_len: int, horizon: int, warmup: int = 1
):
    """(training, validation) window numbers as int64 arrays; window w ends at feature row
    w + seq_len - 1. Training windows end before train_end, validation ones from val_start."""
    usable = usable_window_ends(rows, gap_bars, seq_len, horizon, warmup)
    ends = np.nonzero(usable)[0]
    train_ends, val_ends = ends[ends < train_end], ends[ends >= val_start]
    return train_ends - (seq_len - 1), val_ends - (seq_len - 1)


def describe_gaps(timestamps_ns: np.ndarray, gap_bars: np.ndarray, max_gap: str, windows_lost: int) -> str:
    """One note for the log: how many gaps, the longest, and the windows lost to them."""
    import pandas as pd

    steps = timestamps_ns[gap_bars + 1] - timestamps_ns[gap_bars]
    longest = int(np.argmax(steps))
    start = pd.Timestamp(int(timestamps_ns[gap_bars[longest]]), unit="ns", tz="UTC")
    return (
        f"{len(gap_bars)} gap(s) longer than preprocess.max_gap={max_gap} split the series (longest "
        f"{pd.Timedelta(int(steps[longest]))} after {start:%Y-%m-%d %H:%M} UTC); "
        f"{windows_lost} window(s) spanning them are not used"
    )


def check_gap_windows(arrays, gap_bars: np.ndarray, timestamps_ns: np.ndarray, seq_len: int, max_gap: str, name: str):
    """The log note on the gaps of `arrays` (PreparedArrays); DataError naming the setting
    when no training or no validation window is left between them."""
    args = (arrays.rows, arrays.train_end, arrays.val_start)
    train, val = window_numbers(*args, gap_bars, seq_len, arrays.horizon, arrays.warmup)
    all_train, all_val = window_numbers(*args, np.zeros(0, dtype=np.int64), seq_len, arrays.horizon, arrays.warmup)
    if not len(train) or not len(val):
        raise DataError(
            f"{name}: {len(gap_bars)} gap(s) longer than preprocess.max_gap={max_gap} leave no piece long enough "
            f"for one {'training' if not len(train) else 'validation'} window (train.seq_len={seq_len}, "
            f"train.horizon={arrays.horizon}); raise preprocess.max_gap, lower train.seq_len, or give it more bars"
        )
    lost = len(all_train) + len(all_val) - len(train) - len(val)
    return describe_gaps(timestamps_ns, gap_bars, max_gap, lost)
