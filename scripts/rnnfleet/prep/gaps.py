"""Gaps in a series of bars, and the windows of each part of the split: no window spans a gap.

Promise: a gap is a step between two consecutive bars longer than `preprocess.max_gap`.
The array file stores where the gaps are (`gap_bars`: bar b when the step from bar b to
bar b + 1 is a gap); `window_numbers` turns that into the windows training may use, so a
window never joins bars from two sides of a gap, neither in its inputs nor in its target.

Indexing (as in rnnfleet.prep.prepare): with a features' warm-up of w bars (1 for the default
features: each bar's return from the previous close), feature row t describes bar t + w and
may look back to bar t; its target runs from bar t + w to bar t + w + horizon. The window
ending at feature row t therefore touches bars t - seq_len + 1 .. t + w + horizon.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from rnnfleet.errors import DataError

GAPS_OFF = "off"


def max_gap_nanoseconds(max_gap: str | None) -> int | None:
    """preprocess.max_gap ('15min', '2h', 'off') in nanoseconds; None when off."""
    if max_gap in (None, GAPS_OFF):
        return None
    import pandas as pd

    return int(pd.Timedelta(max_gap).value)


def duration_text(nanoseconds: int) -> str:
    """'00:01:00', '2 days 00:01:00': a duration as people read it."""
    import pandas as pd

    return str(pd.Timedelta(nanoseconds)).removeprefix("0 days ")


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


class SplitPoints(NamedTuple):
    """Where the three chronological parts of a dataset's feature rows are: windows ending
    in [seq_len - 1, train_end) train, in [val_start, val_end) validate (early stopping
    only), in [test_start, rows) test (never seen while training or choosing the epoch).
    Between two parts lies an embargo (rnnfleet.prep.split.embargo_rows), so no bar is touched by
    windows (inputs or targets) of two parts. test_start == rows: no test part."""

    train_end: int
    val_start: int
    val_end: int
    test_start: int


class WindowNumbers(NamedTuple):
    """Window numbers (int64) of each part; window w ends at feature row w + seq_len - 1."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray


def window_numbers(
    rows: int, split: SplitPoints, gap_bars: np.ndarray, seq_len: int, horizon: int, warmup: int = 1
) -> WindowNumbers:
    """The windows of each part (SplitPoints) that span no gap."""
    usable = usable_window_ends(rows, gap_bars, seq_len, horizon, warmup)
    ends = np.nonzero(usable)[0]
    train_ends = ends[ends < split.train_end]
    val_ends = ends[(ends >= split.val_start) & (ends < split.val_end)]
    test_ends = ends[ends >= split.test_start]
    return WindowNumbers(*(part - (seq_len - 1) for part in (train_ends, val_ends, test_ends)))


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
    when no training, validation or (with a test part) test window is left between them."""
    args = (arrays.rows, arrays.split)
    windows = window_numbers(*args, gap_bars, seq_len, arrays.horizon, arrays.warmup)
    all_windows = window_numbers(*args, np.zeros(0, dtype=np.int64), seq_len, arrays.horizon, arrays.warmup)
    for part, kept, every in zip(("training", "validation", "test"), windows, all_windows, strict=True):
        if len(every) and not len(kept):
            raise DataError(
                f"{name}: {len(gap_bars)} gap(s) longer than preprocess.max_gap={max_gap} leave no piece long enough "
                f"for one {part} window (train.seq_len={seq_len}, train.horizon={arrays.horizon}); "
                "raise preprocess.max_gap, lower train.seq_len, or give it more bars"
            )
    lost = sum(len(every) - len(kept) for kept, every in zip(windows, all_windows, strict=True))
    return describe_gaps(timestamps_ns, gap_bars, max_gap, lost)
