"""PreparedArrays: one dataset's feature rows and targets, split and normalised, as a fit
reads them. Imports nothing that reads bar files: the train path loads this, not the readers."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rnnfleet.prep.features import DEFAULT_FEATURES
from rnnfleet.prep.gaps import SplitPoints
from rnnfleet.prep.targets import DEFAULT_TARGET


@dataclass(frozen=True)
class PreparedArrays:
    """One dataset, ready to train on.

    features[t] describes bar t (of the bars after the features' warm-up); targets[t] is the
    target (rnnfleet.prep.targets) from bar t to bar t + horizon, as (value - target_mean) / target_std.
    A window ending at bar t predicts targets[t]. With several horizons (train.horizons),
    targets[t, k] is the target over horizons[k] bars, target_mean and target_std hold one
    value per horizon, and `horizon` is the longest (it sizes the embargoes and the gaps).
    Windows ending in [seq_len - 1, train_end) train, in [val_start, val_end) validate (early
    stopping only), in [test_start, rows) test, except those that span a gap
    (rnnfleet.prep.gaps.window_numbers); normalisation statistics come from the training part.
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
    # Bar b of the file is followed by a gap (longer than preprocess.max_gap): see rnnfleet.prep.gaps.
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
    # arrays from every bar (rnnfleet.prep.incremental.AppendBase: the files, their bars' counts,
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
