"""What a model outputs per window: one forecast, or one per horizon and quantile.

Promises:
- Heads.of(horizons, quantiles) describes the outputs of `train.horizons` (one per horizon,
  the first the one the verdict, ranking and the unsuffixed columns are about) and
  `train.quantiles` (sorted, the median always among them: it is the point forecast);
  a model has Heads.count outputs, which arrive as (batch, horizons, quantiles or 1) and,
  for a single point forecast, as (batch,) exactly as before heads existed;
- ordered() keeps each horizon's quantiles ascending (no crossing quantiles anywhere: in
  training, in scores and in forecasts), by sorting them, which never raises the pinball loss;
- pinball() is the quantile (pinball) loss, so that its minimiser is the asked quantile;
- head_column_order() puts the forecast tables' columns of heads in one order (horizons
  numerically); head_column() names an earlier rnnfleet's such column as it is named now;
- pairs() are the quantiles that bound a central interval (q and 1 - q): those intervals
  are calibrated (rnnfleet.scores.intervals) and scored on the test period.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rnnfleet.errors import UserError
from rnnfleet.prep.targets import TARGETS

if TYPE_CHECKING:
    import torch

MEDIAN = 0.5


@dataclass(frozen=True)
class Heads:
    horizons: tuple[int, ...]
    quantiles: tuple[float, ...] = ()  # () : point forecasts

    @classmethod
    def of(cls, horizons, quantiles=()) -> Heads:
        """Heads of these settings; quantiles sorted, with the median added when missing."""
        quantiles = tuple(sorted({float(q) for q in quantiles} | {MEDIAN})) if quantiles else ()
        return cls(tuple(int(h) for h in horizons), quantiles)

    @property
    def single(self) -> bool:
        """One point forecast at one horizon: outputs (batch,), as every model before heads."""
        return len(self.horizons) == 1 and not self.quantiles

    @property
    def count(self) -> int:
        return len(self.horizons) * max(1, len(self.quantiles))

    @property
    def point(self) -> int:
        """The index (along the last axis) of the point forecast: the median, or the only output."""
        return self.quantiles.index(MEDIAN) if self.quantiles else 0

    def shaped(self, outputs: torch.Tensor) -> torch.Tensor:
        """A model's (batch, count) or (batch,) outputs as (batch,) for a single forecast,
        else (batch, horizons, quantiles or 1), quantiles ordered."""
        if self.single:
            return outputs.reshape(-1)
        shaped = outputs.reshape(-1, len(self.horizons), max(1, len(self.quantiles)))
        return ordered(shaped) if self.quantiles else shaped

    def pairs(self) -> list[tuple[int, int, float]]:
        """(index of q, index of 1 - q, the interval's coverage 1 - 2q) for each q below the median
        whose partner was asked for too (within float rounding: 1 - 0.07 is not 0.93), widest first."""
        partner = {
            low: high
            for low, q in enumerate(self.quantiles)
            for high, other in enumerate(self.quantiles)
            if q < MEDIAN and abs(other - (1.0 - q)) < 1e-12
        }
        return [(low, high, round(1.0 - 2.0 * self.quantiles[low], 12)) for low, high in partner.items()]

    def pair_quantiles(self) -> list[list[float]]:
        return [[self.quantiles[low], self.quantiles[high]] for low, high, _ in self.pairs()]


def heads_of_settings(train: dict, target) -> Heads:
    """The heads a training with these `train:` settings has, for this target
    (rnnfleet.prep.targets.Target): train.horizons (or train.horizon) and train.quantiles.
    UserError naming the key for quantiles of a classification target."""
    horizons = list(train.get("horizons") or []) or [int(train["horizon"])]
    quantiles = list(train.get("quantiles") or [])
    if quantiles and target.classification:
        raise UserError(
            f"config key 'train.quantiles' = {quantiles}: target {target.name} is a classification (a probability "
            "of an up move); quantiles need a regression target (log_return, abs_log_return, realised_volatility)"
        )
    return Heads.of(horizons, quantiles)


def ordered(outputs: torch.Tensor) -> torch.Tensor:
    """outputs (..., quantiles) sorted along the last axis (differentiable)."""
    import torch

    return torch.sort(outputs, dim=-1).values


def pinball(outputs: torch.Tensor, targets: torch.Tensor, quantiles: torch.Tensor, reduction: str = "mean"):
    """The pinball loss of quantile forecasts outputs (batch, horizons, Q) of targets
    (batch, horizons) at quantiles (Q,): q * (y - f) where y >= f, (1 - q) * (f - y) below;
    "mean" over every element, "sum" of them all."""
    import torch

    errors = targets.unsqueeze(-1) - outputs
    losses = torch.maximum(quantiles * errors, (quantiles - 1.0) * errors)
    return losses.sum() if reduction == "sum" else losses.mean()


def pinball_losses(outputs: np.ndarray, actual: np.ndarray, quantiles: np.ndarray) -> np.ndarray:
    """Per window, the pinball loss averaged over quantiles: outputs (n, Q), actual (n,). float64."""
    errors = np.asarray(actual, np.float64)[:, None] - np.asarray(outputs, np.float64)
    q = np.asarray(quantiles, np.float64)
    return np.maximum(q * errors, (q - 1.0) * errors).mean(axis=1)


def head_column(name: str) -> str:
    """A column of a model of heads under its name now: forecast_log_return_h5_q5 (an
    earlier rnnfleet's, named after the target's forecast column) is forecast_h5_q5."""
    for target in TARGETS.values():
        if name.startswith(f"{target.forecast_column}_h"):
            return "forecast" + name.removeprefix(target.forecast_column)
    return name


def head_column_order(name: str) -> tuple:
    """Where a head column goes: by horizon (numerically: h1, h5, h15, h60), then the point
    forecast, its close, the quantiles ascending, the intervals widest first (low, high)."""
    match = re.fullmatch(r"forecast(_close)?_h(\d+)(?:_q([\d.]+)|_(low|high)_([\d.]+))?", name)
    if not match:
        return (math.inf, name)
    close, horizon, quantile, side, percent = match.groups()
    if quantile is not None:
        return (int(horizon), 2, float(quantile), 0)
    if side is not None:
        return (int(horizon), 3, -float(percent), side == "high")
    return (int(horizon), 1 if close else 0, 0.0, 0)


def with_outputs(model_hparams: dict, heads: Heads) -> dict:
    """The model's settings asking the builder for one output per head (rnnfleet.train.models);
    unchanged for a single forecast."""
    return model_hparams if heads.single else {**model_hparams, "outputs": heads.count}
