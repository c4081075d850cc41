"""What a model predicts `horizon` bars ahead, its loss, its naive baseline and its units.

Each target is a `Target` in TARGETS (the config key `target` names one). It promises:
- values(log_close, horizon): the target of every bar that has `horizon` bars after it;
- how it is scaled for training (regression: (value - offset) / scale from training rows;
  classification: 0/1 as is) and how model outputs go back to its own units;
- its loss (MSE, or binary cross-entropy on logits for classification) and its naive
  baseline: the constant forecast that the skill column compares the model with.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def log_return(log_close: np.ndarray, horizon: int) -> np.ndarray:
    return log_close[horizon:] - log_close[:-horizon]


def abs_log_return(log_close: np.ndarray, horizon: int) -> np.ndarray:
    return np.abs(log_return(log_close, horizon))


def realised_volatility(log_close: np.ndarray, horizon: int) -> np.ndarray:
    """sqrt of the sum of the squared 1-bar log returns over the next `horizon` bars."""
    squared = np.concatenate([[0.0], np.cumsum(np.diff(log_close) ** 2)])
    return np.sqrt(np.maximum(squared[horizon:] - squared[:-horizon], 0.0))


def direction(log_close: np.ndarray, horizon: int) -> np.ndarray:
    """1 where the close is higher `horizon` bars later, else 0."""
    return (log_return(log_close, horizon) > 0).astype(np.float64)


@dataclass(frozen=True)
class Target:
    name: str
    values: Callable[[np.ndarray, int], np.ndarray]
    classification: bool
    centred: bool  # regression: subtract the training mean before scaling
    baseline: str  # the naive forecast, in words (metrics, summary table, report)
    forecast_column: str  # the forecasts CSV column, in the target's own units
    # Which extra test scores it gets (rnnfleet.train.evaluate.score_test_period): "return" hit
    # rate and sign trading, "size" skill against persistence, "class" accuracy.
    measures: str = "return"

    @property
    def loss_name(self) -> str:
        return "log loss" if self.classification else "MSE (scaled)"

    def scaling(self, train_values: np.ndarray) -> tuple[float, float]:
        """(offset, scale) such that (value - offset) / scale is what the model learns."""
        if self.classification:
            return 0.0, 1.0
        offset = float(train_values.mean()) if self.centred else 0.0
        return offset, float((train_values - offset).std()) or 1.0

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        import torch.nn.functional as F  # here: preprocessing uses targets without torch

        if self.classification:
            return F.binary_cross_entropy_with_logits(outputs, targets, reduction=reduction)
        return F.mse_loss(outputs, targets, reduction=reduction)

    def naive_output(self, train_targets: torch.Tensor) -> float:
        """The baseline as a model output: regression 0 (scaled: a zero return, or the
        training mean when centred); classification the logit of the training share of 1s."""
        if not self.classification:
            return 0.0
        share = min(max(float(train_targets.mean()), 1e-6), 1 - 1e-6)
        return math.log(share / (1 - share))

    def within_range(self, values: np.ndarray) -> np.ndarray:
        """Values in the target's units, raised to the least it can take (an absolute return
        or a volatility is never below 0): an interval's lower bound."""
        return np.maximum(values, 0.0) if self.measures == "size" else values

    def to_units(self, outputs: np.ndarray, offset: float, scale: float) -> np.ndarray:
        """Model outputs -> the target's own units (classification: probability of a 1)."""
        if self.classification:
            return 1.0 / (1.0 + np.exp(-outputs))
        return outputs * scale + offset


TARGETS: dict[str, Target] = {
    target.name: target
    for target in (
        Target(
            "log_return",
            log_return,
            classification=False,
            centred=False,
            baseline="zero return",
            forecast_column="forecast_log_return",
        ),
        Target(
            "abs_log_return",
            abs_log_return,
            classification=False,
            centred=True,
            baseline="training mean",
            forecast_column="forecast_abs_log_return",
            measures="size",
        ),
        Target(
            "realised_volatility",
            realised_volatility,
            classification=False,
            centred=True,
            baseline="training mean",
            forecast_column="forecast_realised_volatility",
            measures="size",
        ),
        Target(
            "direction",
            direction,
            classification=True,
            centred=False,
            baseline="training share of up moves",
            forecast_column="forecast_up_probability",
            measures="class",
        ),
    )
}
DEFAULT_TARGET = "log_return"
