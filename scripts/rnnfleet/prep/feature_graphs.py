"""The built-in features (rnnfleet.prep.features) as tensor operations, for the ONNX graph
(rnnfleet.forecast.export_onnx): the same numbers from bars {column: (batch, bars)} tensors,
in double as the export feeds them. Each returns (batch, bars, k), row t from bars t - 1 and
t (row 0, which has no previous bar, is never used). tests/unit/test_feature_graphs.py holds
each twin to its feature on real bars."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch


def log1p(values: torch.Tensor) -> torch.Tensor:
    """log(1 + values), accurate in float32 for small values too (ONNX has no Log1p): log(u)
    x / (u - 1) with u = 1 + x rounded, which cancels the rounding of u."""
    shifted = 1.0 + values
    denominator = shifted - 1.0
    exact = denominator == 0
    return torch.where(exact, values, torch.log(shifted) * values / torch.where(exact, 1.0, denominator))


def log_ratio(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """log(numerator / denominator) without float32's cancellation near 1: a one-minute return
    of 1e-4 keeps its digits (numerator - denominator is exact for prices within a factor 2)."""
    return log1p((numerator - denominator) / denominator)


def previous(values: torch.Tensor) -> torch.Tensor:
    """Each bar's previous value (the first bar's own)."""
    return torch.cat([values[:, :1], values[:, :-1]], dim=1)


def ohlc_returns_graph(bars: Mapping[str, torch.Tensor]) -> torch.Tensor:
    prev_close = previous(bars["close"])
    return torch.stack([log_ratio(bars[name], prev_close) for name in ("open", "high", "low", "close")], dim=-1)


def log_volume_graph(bars: Mapping[str, torch.Tensor]) -> torch.Tensor:
    return log1p(bars["volume"]).unsqueeze(-1)


def hl_range_graph(bars: Mapping[str, torch.Tensor]) -> torch.Tensor:
    return log_ratio(bars["high"], bars["low"]).unsqueeze(-1)


def volume_change_graph(bars: Mapping[str, torch.Tensor]) -> torch.Tensor:
    volume = log1p(bars["volume"])
    return (volume - previous(volume)).unsqueeze(-1)


GRAPH_FEATURES: dict[str, Callable] = {
    "ohlc_returns": ohlc_returns_graph,
    "log_volume": log_volume_graph,
    "hl_range": hl_range_graph,
    "volume_change": volume_change_graph,
}
