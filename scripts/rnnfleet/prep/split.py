"""The chronological split of a dataset's feature rows into training, validation and test
parts, embargoes between them, and how many rows a split needs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rnnfleet.errors import UserError
from rnnfleet.prep.gaps import SplitPoints

DEFAULT_TEST_FRACTION = 0.15  # as the schema's preprocess.test_fraction


# As the schema's preprocess.val_max_bars and test_max_bars: one week of minute bars each.
# Below it a part is its fraction of the history; above it, it stops growing (bench/README.md,
# the morning run: what a longer part buys in the test interval's width against what it costs
# every update, which scores the whole validation part at each epoch and the test part once).
DEFAULT_MAX_PART_BARS = 10_080


def embargo_rows(seq_len: int, horizon: int, warmup: int) -> int:
    """Feature rows from the last window end of one part to the first of the next. A window
    ending at feature row t touches bars t - seq_len + 1 .. t + warmup + horizon
    (rnnfleet.prep.gaps), so windows of two parts this far apart share no bar."""
    return seq_len + horizon + warmup


@dataclass(frozen=True)
class SplitSettings:
    """How a dataset's feature rows split into training, validation and test parts: the
    window (seq_len, and the longest horizon and the features' warm-up, which set the
    embargo) and the parts' sizes. The test part is the last test_fraction (none at 0),
    validation the val_fraction before it, training the rest, an embargo (embargo_rows)
    before validation and before the test part. val_bars and test_bars (preprocess.val_bars,
    test_bars), where given, size those parts in rows instead of fractions: parts that do not
    grow with the history. val_max_bars and test_max_bars (None: no cap) cap the parts the
    fractions size: below the caps the split is the fractions' exactly, above them each part
    holds exactly its cap's windows."""

    seq_len: int
    horizon: int
    val_fraction: float
    test_fraction: float = DEFAULT_TEST_FRACTION
    warmup: int = 1
    val_bars: int | None = None
    test_bars: int | None = None
    val_max_bars: int | None = None
    test_max_bars: int | None = None

    @classmethod
    def of(cls, settings: dict, seq_len: int, horizon: int, warmup: int) -> SplitSettings:
        """The split of preprocess settings (rnnfleet.settings.preprocess_settings), the caps at
        their defaults where left out."""
        return cls(
            seq_len,
            horizon,
            settings["val_fraction"],
            settings["test_fraction"],
            warmup,
            settings.get("val_bars"),
            settings.get("test_bars"),
            settings.get("val_max_bars", DEFAULT_MAX_PART_BARS),
            settings.get("test_max_bars", DEFAULT_MAX_PART_BARS),
        )

    @property
    def embargo(self) -> int:
        return embargo_rows(self.seq_len, self.horizon, self.warmup)

    @property
    def testing(self) -> bool:
        """Whether there is a test part."""
        return bool(self.test_bars) or self.test_fraction > 0

    def points(self, rows: int) -> SplitPoints:
        """The three chronological parts of `rows` feature rows."""
        if self.val_fraction + self.test_fraction >= 1 and not (self.val_bars and self.test_bars):
            raise UserError(
                f"preprocess.val_fraction ({self.val_fraction}) + preprocess.test_fraction ({self.test_fraction}) "
                "must be below 1: nothing is left to train on"
            )
        embargo, testing = self.embargo, self.testing
        if self.test_bars:
            test_rows = int(self.test_bars)
        else:
            fraction_rows = rows - int(round(rows * (1.0 - self.test_fraction))) if self.test_fraction > 0 else 0
            test_rows = capped(fraction_rows, self.test_max_bars)
        test_start = rows - test_rows
        val_end = test_start - embargo if testing else rows
        if self.val_bars:
            val_rows = int(self.val_bars)
        elif self.test_bars:
            val_rows = capped(int(round(rows * self.val_fraction)), self.val_max_bars)
        else:
            fraction_val_end = int(round(rows * (1.0 - self.test_fraction))) - embargo if testing else rows
            fraction_val_start = int(round(rows * (1.0 - self.test_fraction - self.val_fraction)))
            val_rows = capped(fraction_val_end - fraction_val_start, self.val_max_bars)
        val_start = val_end - val_rows
        return SplitPoints(val_start - embargo, val_start, val_end, test_start)

    def long_enough(self, rows: int) -> bool:
        """Whether `rows` feature rows give each part (the test part only when there is one) a window."""
        n_train, n_val, n_test = part_sizes(rows, self.points(rows), self.seq_len)
        return n_train >= 1 and n_val >= 1 and (n_test >= 1 or not self.testing)

    def rows_needed(self) -> int:
        """The fewest feature rows that give each part a window."""
        if self.val_bars or self.test_bars:
            rows = self.seq_len + (self.val_bars or 0) + (self.test_bars or 0)  # fewer rows cannot hold the parts
        elif self.val_max_bars or self.test_max_bars:
            rows = self.seq_len  # a cap below a fraction's share can make fewer rows enough
        else:
            rows = int(np.ceil((self.seq_len + self.embargo) / (1.0 - self.val_fraction - self.test_fraction)))
        while not self.long_enough(rows):
            rows += 1
        return rows


def capped(part_rows: int, cap: int | None) -> int:
    """A part's rows, at most cap (None: no cap)."""
    return part_rows if cap is None else min(part_rows, int(cap))


def part_sizes(rows: int, split: SplitPoints, seq_len: int) -> tuple[int, int, int]:
    """Windows (gaps aside) of the training, validation and test parts."""
    return split.train_end - (seq_len - 1), split.val_end - split.val_start, rows - split.test_start
