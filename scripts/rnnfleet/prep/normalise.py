"""Normalisation: the training part's statistics (Normalisation: fitted, applied, inverted,
recorded in and read from a model file), and features and targets normalised with them, one
way for array files, updates, walk-forward folds, the fleet's start, forecasts and exports."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from rnnfleet.prep.arrays import PreparedArrays
from rnnfleet.prep.targets import TARGETS


@dataclass(frozen=True)
class Normalisation:
    """A training part's statistics: the features' (float32, as the model file stores them)
    and the target's (a number, or one per horizon, float64)."""

    feature_mean: np.ndarray
    feature_std: np.ndarray
    target_mean: float | np.ndarray
    target_std: float | np.ndarray

    @classmethod
    def fit(cls, train_features: np.ndarray, train_targets: np.ndarray, target: str) -> Normalisation:
        """The statistics of a training part's rows (fit_normalisation)."""
        return cls(*fit_normalisation(train_features, train_targets, target))

    @classmethod
    def of_arrays(cls, arrays: PreparedArrays) -> Normalisation:
        return cls(arrays.feature_mean, arrays.feature_std, arrays.target_mean, arrays.target_std)

    @classmethod
    def from_record(cls, record: Mapping) -> Normalisation:
        """From a model file's `normalisation` entry (record)."""
        return cls(
            np.asarray(record["feature_mean"], np.float32),
            np.asarray(record["feature_std"], np.float32),
            target_statistic(record["target_mean"]),
            target_statistic(record["target_std"]),
        )

    def record(self) -> dict:
        """The model file's `normalisation` entry: lists of numbers (the target's: one per horizon with several)."""
        return {
            "feature_mean": np.asarray(self.feature_mean).tolist(),
            "feature_std": np.asarray(self.feature_std).tolist(),
            "target_mean": np.asarray(self.target_mean).tolist(),
            "target_std": np.asarray(self.target_std).tolist(),
        }

    @property
    def statistics(self) -> tuple:
        """(feature_mean, feature_std, target_mean, target_std), as normalised_with takes them."""
        return self.feature_mean, self.feature_std, self.target_mean, self.target_std

    def features(self, raw_features: np.ndarray) -> np.ndarray:
        """Feature rows as the model sees them (normalise)."""
        return normalise(raw_features, self.feature_mean, self.feature_std)

    def target_scaling(self, horizons: int) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, scales), float64, one per horizon: a model's scaled output y is
        y * scale + offset in the target's units."""
        offsets = np.broadcast_to(np.asarray(self.target_mean, np.float64), horizons)
        return offsets, np.broadcast_to(np.asarray(self.target_std, np.float64), horizons)


def normalise(features: np.ndarray, feature_mean: np.ndarray, feature_std: np.ndarray) -> np.ndarray:
    """(features - mean) / std as contiguous float32, from the float32 statistics that the
    model file stores, so that prediction reproduces the training inputs bit for bit."""
    centred = features - feature_mean.astype(np.float64)
    # Divided straight into the float32 result: one float64 temporary, not two.
    return np.divide(centred, feature_std.astype(np.float64), out=np.empty(features.shape, np.float32))


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
