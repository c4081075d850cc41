"""ONNX files of trained models: one file holds the whole forecast, for platforms that run
ONNX Runtime (MetaTrader 5, C#, C++; docs/export.md).

Promises:
- the graph takes the last seq_len + 1 bars as a platform has them: double (float64)
  [batch, seq_len + 1, 5], the columns INPUT_COLUMNS, oldest bar first, a fixed sequence
  length and a dynamic batch; it computes the model's built-in features (and a user's own
  feature written in tensor operations) in double, as rnnfleet predict does (a float32 price
  of 60,000 moves a one-minute feature by a tenth of its spread), applies the model file's
  normalisation, runs the network in float32 (initial states inside the graph) and returns,
  per horizon, the forecast in the target's units (a direction target: the probability of an
  up move), the quantiles of a quantile model, the calibrated intervals' bounds, and for
  log_return the forecast closes (OUTPUTS): the closes double, the others float32; opset OPSET;
- the file's metadata_props say what it is (metadata(); `rnnfleet export --describe`);
- what cannot be put in a graph (time features: the input has no times; a feature made of
  pandas or numpy; a builder whose model does not trace) is an ExportRefused of one line
  naming it, and no file is written;
- before a file is written, ONNX Runtime runs it on windows of bars, fed as a platform feeds
  them (the bars' own float64 values), and its outputs are compared with rnnfleet predict's
  forecasts (rnnfleet.forecast.predict.forecast_frame) on the same bars; a difference beyond TOLERANCE
  writes nothing, removes an earlier file at that path (it belongs to an older model) and
  says so.

onnx and onnxruntime are optional (requirements-onnx.txt): imported here only, when used.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import os
import re
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from rnnfleet.errors import UserError, one_line
from rnnfleet.forecast.predict import (
    checkpoint_heads,
    forecast_frame,
    head_columns,
    interval_columns,
    is_model_file,
    place_in_project,
    training_read,
)
from rnnfleet.heads import Heads
from rnnfleet.plugins import describe, is_file_reference, resolve
from rnnfleet.prep.feature_graphs import GRAPH_FEATURES
from rnnfleet.prep.normalise import Normalisation
from rnnfleet.prep.targets import TARGETS
from rnnfleet.scores.intervals import COVERAGE, half_width, nearest_coverage
from rnnfleet.train.models import DEFAULT_BUILDER

INPUT_NAME = "bars"
INPUT_COLUMNS = ("open", "high", "low", "close", "volume")
OPSET = 17  # MetaTrader 5's bundled ONNX Runtime runs opsets up to 17 at least (docs/export.md)
BAR_INTERVAL = "1min"  # rnnfleet trains on 1-minute bars (rnnfleet.bars.joining)
CHECK_WINDOWS = 64  # windows of the model's own bars run through ONNX Runtime before a file is written
# The largest difference allowed between ONNX Runtime and PyTorch, in units of each
# quantity's own scale (the target's training std; for prices close x that std; for a
# probability 1): another library's float32 kernels and sums differ by ~1e-6 of that scale;
# a wrong feature, normalisation or head differs by far more.
TOLERANCE = 1e-5
FLOAT32_ROUNDING = 2.0**-22  # four steps of a float32 value, relative to it
REQUIREMENTS = "requirements-onnx.txt"
# The forecasts table's columns that describe the window, not its forecast.
NOT_FORECASTS = ("time", "close", "horizon", "target")


class ExportRefused(UserError):
    """A model that cannot be one ONNX file (one line naming what and why); nothing written."""


def missing_packages() -> list[str]:
    """The export's packages that are not installed (onnx, onnxruntime)."""
    import importlib.util

    return [name for name in ("onnx", "onnxruntime") if importlib.util.find_spec(name) is None]


def require_packages() -> None:
    missing = missing_packages()
    if missing:
        raise UserError(
            f"rnnfleet export needs {' and '.join(missing)}, which are not installed: "
            f"pip install -r {REQUIREMENTS}   (or pip install -e '.[onnx]')"
        )


NEEDS_TIMES = ("time_of_day", "day_of_week")


@dataclass(frozen=True)
class ExportPlan:
    """What the graph of one model file computes, read from the file's record."""

    dataset: str
    target: str
    heads: Heads
    seq_len: int
    features: tuple[Callable, ...]
    feature_references: tuple[str, ...]
    feature_mean: np.ndarray  # (F,) float32
    feature_std: np.ndarray
    offsets: np.ndarray  # (horizons,) float64: the target's de-scaling
    scales: np.ndarray
    coverages: tuple[float, ...]  # of the intervals, widest first (none: no bounds)
    pairs: tuple[tuple[int, int], ...]  # quantile heads: each interval's (lower, upper) quantile index
    margins: np.ndarray  # (horizons, intervals): half widths (point heads) or conformal margins (quantile pairs)

    @property
    def window_bars(self) -> int:
        return self.seq_len + 1

    @property
    def output_names(self) -> tuple[str, ...]:
        names = ["forecast"]
        names += ["quantiles"] if self.heads.quantiles else []
        names += ["lower", "upper"] if self.coverages else []
        if self.target == "log_return":
            names += ["forecast_close"] + (["forecast_close_lower", "forecast_close_upper"] if self.coverages else [])
        return tuple(names)


# What each output holds, in the file's metadata (output_<name>).
OUTPUTS = {
    "forecast": "[batch, horizons]: the point forecast in the target's units (direction: probability of an up move)",
    "quantiles": "[batch, horizons, quantiles]: each quantile in the target's units, ascending",
    "lower": "[batch, horizons, intervals]: the calibrated intervals' lower bounds (intervals: interval_coverages)",
    "upper": "[batch, horizons, intervals]: their upper bounds",
    "forecast_close": "[batch, horizons] double: the close the forecast log return implies (last close x exp(forecast))",
    "forecast_close_lower": "[batch, horizons, intervals] double: the closes the lower bounds imply",
    "forecast_close_upper": "[batch, horizons, intervals] double: the closes the upper bounds imply",
}


def graph_feature(reference: str, sources: Mapping[str, bytes]) -> Callable:
    """The feature `reference` as tensor operations; ExportRefused naming it when it cannot be."""
    if reference in GRAPH_FEATURES:
        return GRAPH_FEATURES[reference]
    if reference in NEEDS_TIMES:
        raise ExportRefused(
            f"feature {reference!r} needs the bars' times, and the ONNX file's input is open, high, low, close, "
            "volume only: train without it to export this model"
        )
    if not is_file_reference(reference):
        raise ExportRefused(f"feature {reference!r} has no tensor form for the ONNX graph")
    return resolve(reference, {}, "features", sources)


def export_plan(checkpoint: dict, sources: Mapping[str, bytes], coverage: float = COVERAGE) -> ExportPlan:
    """The plan of a model file's graph (sources: its vetted plug-ins, rnnfleet.train.models.vetted_plugins);
    ExportRefused for a feature that cannot be computed from OHLCV in a graph."""
    recorded, normalisation = checkpoint["features"], Normalisation.from_record(checkpoint["normalisation"])
    heads, target = checkpoint_heads(checkpoint), TARGETS[recorded["target"]]
    if int(recorded["warmup"]) > 1:
        raise ExportRefused(
            f"the features {list(recorded['definition'])} need {recorded['warmup']} bars of warm-up, and the ONNX "
            "file's input holds one bar before the window"
        )
    offsets, scales = normalisation.target_scaling(len(heads.horizons))
    kept, margins = interval_margins(checkpoint, heads, target, coverage)
    pairs = heads.pairs()
    return ExportPlan(
        dataset=str(checkpoint.get("dataset", "")),
        target=target.name,
        heads=heads,
        seq_len=int(recorded["seq_len"]),
        features=tuple(graph_feature(reference, sources) for reference in recorded["definition"]),
        feature_references=tuple(recorded["definition"]),
        feature_mean=normalisation.feature_mean,
        feature_std=normalisation.feature_std,
        offsets=offsets.copy(),
        scales=scales.copy(),
        coverages=tuple(pairs[j][2] for j in kept) if heads.quantiles else (coverage,) * len(kept),
        pairs=tuple((pairs[j][0], pairs[j][1]) for j in kept) if heads.quantiles else (),
        margins=margins,
    )


def interval_margins(checkpoint: dict, heads: Heads, target, coverage: float) -> tuple[list[int], np.ndarray]:
    """(the intervals kept: indices into heads.pairs(), or [0] for point heads; their margins
    (horizons, intervals)), as rnnfleet.scores.intervals.horizon_bands computes them from the model
    file's calibration scores: point heads one interval at `coverage`, quantile heads one per
    quantile pair; an interval with too few scores at some horizon is left out."""
    scores = checkpoint.get("calibration", {}).get("scores")
    horizons = len(heads.horizons)
    if target.classification or scores is None or not len(scores):
        return [], np.zeros((horizons, 0), np.float32)
    scores = np.asarray(scores, np.float32)
    if heads.quantiles:
        pairs = heads.pairs()
        scores = scores.reshape(horizons, len(pairs), -1)
        wanted = [pair_coverage for _, _, pair_coverage in pairs]
        margins = np.array([[half_width(scores[k, j], c) for j, c in enumerate(wanted)] for k in range(horizons)])
    else:
        wanted = [coverage]
        margins = np.array([[half_width(row, coverage)] for row in scores.reshape(horizons, -1)])
    kept = [j for j in range(len(wanted)) if np.isfinite(margins[:, j]).all()]
    return kept, margins[:, kept].astype(np.float32).reshape(horizons, len(kept))


class ForecastGraph(nn.Module):
    """bars (batch, seq_len + 1, 5) float64 -> the outputs of ExportPlan.output_names (the
    forecast closes float64, the others float32)."""

    def __init__(self, network: nn.Module, plan: ExportPlan):
        super().__init__()
        self.network, self.plan = network, plan
        as_buffer = {
            "feature_mean": plan.feature_mean,
            "feature_std": plan.feature_std,
            "offsets": plan.offsets,
            "scales": plan.scales,
            "margins": plan.margins,
        }
        for name, values in as_buffer.items():
            self.register_buffer(name, torch.tensor(np.asarray(values, np.float32)))

    # Target.to_units and Target.within_range in tensor operations (theirs call numpy, which a
    # trace cannot follow).
    def to_units(self, outputs: torch.Tensor) -> torch.Tensor:
        """Outputs (batch, horizons, ...) in the target's units (rnnfleet.prep.targets.Target.to_units)."""
        if TARGETS[self.plan.target].classification:
            return torch.sigmoid(outputs)
        shape = (1, -1) + (1,) * (outputs.dim() - 2)
        return outputs * self.scales.reshape(shape) + self.offsets.reshape(shape)

    def within_range(self, values: torch.Tensor) -> torch.Tensor:
        return torch.clamp(values, min=0.0) if TARGETS[self.plan.target].measures == "size" else values

    def forward(self, bars: torch.Tensor) -> tuple[torch.Tensor, ...]:
        plan, heads = self.plan, self.plan.heads
        columns = {name: bars[:, :, i] for i, name in enumerate(INPUT_COLUMNS)}
        parts = []
        for feature in plan.features:
            values = feature(columns)
            parts.append(values.unsqueeze(-1) if values.dim() == 2 else values)
        features = torch.cat(parts, dim=-1)[:, -plan.seq_len :]
        # As rnnfleet.prep.normalise.normalise: in float64 from the stored float32 statistics, then float32.
        windows = ((features - self.feature_mean.double()) / self.feature_std.double()).float()
        raw = self.network(windows).float()
        outputs = raw.reshape(-1, len(heads.horizons), max(1, len(heads.quantiles)))
        if heads.quantiles:
            outputs = torch.sort(outputs, dim=-1).values
        point = outputs[:, :, heads.point]
        results = {"forecast": self.to_units(point)}
        if heads.quantiles:
            results["quantiles"] = self.to_units(outputs)
        if plan.coverages:
            if heads.quantiles:
                low = outputs[:, :, [low for low, _ in plan.pairs]]
                high = outputs[:, :, [high for _, high in plan.pairs]]
            else:
                low = high = point.unsqueeze(-1)
            results["lower"] = self.within_range(self.to_units(low - self.margins))
            results["upper"] = self.to_units(high + self.margins)
        if plan.target == "log_return":
            close = bars[:, -1, 3:4]
            # Prices stay double: a float32 close of 60,000 has steps of 0.004.
            results["forecast_close"] = close * torch.exp(results["forecast"].double())
            if plan.coverages:
                for bound in ("lower", "upper"):
                    results[f"forecast_close_{bound}"] = close.unsqueeze(-1) * torch.exp(results[bound].double())
        return tuple(results[name] for name in plan.output_names)


def check_features_trace(plan: ExportPlan) -> None:
    """ExportRefused naming a user's feature that is not made of tensor operations: one
    that fails on bars of tensors or returns anything but a tensor of one row per bar."""
    batch, rows = 2, plan.window_bars
    columns = {name: torch.ones(batch, rows, dtype=torch.float64) for name in INPUT_COLUMNS}
    for reference, feature in zip(plan.feature_references, plan.features, strict=True):
        if reference in GRAPH_FEATURES:
            continue
        try:
            values = feature(columns)
        except Exception as error:
            raise ExportRefused(
                f"{describe(reference)}: cannot be put in the ONNX graph: on bars of tensors it fails "
                f"({type(error).__name__}: {one_line(error)}); a feature of tensor operations on bars['close'] etc. exports"
            ) from None
        if not isinstance(values, torch.Tensor) or tuple(values.shape[:2]) != (batch, rows) or values.dim() > 3:
            what = type(values).__name__ if not isinstance(values, torch.Tensor) else f"shape {tuple(values.shape)}"
            raise ExportRefused(
                f"{describe(reference)}: cannot be put in the ONNX graph: on bars of tensors it returns {what}, "
                f"not a tensor of one value or row per bar ({batch}, {rows}[, k])"
            )


def onnx_bytes(graph: ForecastGraph, builder: str) -> bytes:
    """The graph as an ONNX model (TorchScript exporter, opset OPSET, dynamic batch);
    ExportRefused naming the builder when its model does not trace."""
    example = torch.ones(2, graph.plan.window_bars, len(INPUT_COLUMNS), dtype=torch.float64)
    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.onnx.export(
                graph,
                (example,),
                buffer,
                dynamo=False,
                opset_version=OPSET,
                input_names=[INPUT_NAME],
                output_names=list(graph.plan.output_names),
                dynamic_axes={INPUT_NAME: {0: "batch"}, **{name: {0: "batch"} for name in graph.plan.output_names}},
                do_constant_folding=True,
            )
    except Exception as error:
        raise ExportRefused(
            f"{describe(builder)}: its model does not trace to an ONNX graph ({type(error).__name__}: "
            f"{one_line(error)[:300]})"
        ) from None
    # A value the model's own code read into Python (a branch on data, .item(), .numpy()) is
    # frozen into the graph: the file would compute something else. torch's own modules warn
    # of checks on their weights, which are constants anyway.
    torch_folder = str(Path(torch.__file__).parent)
    frozen = [
        warning
        for warning in caught
        if issubclass(warning.category, torch.jit.TracerWarning) and not warning.filename.startswith(torch_folder)
    ]
    if frozen:
        where = f"{os.path.basename(frozen[0].filename)} line {frozen[0].lineno}"
        raise ExportRefused(
            f"{describe(builder)}: its model does not trace to an ONNX graph: at {where} "
            f"{one_line(frozen[0].message).split('. ')[0]}, which the graph would freeze to this example's value"
        )
    return buffer.getvalue()


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def metadata(checkpoint: dict, plan: ExportPlan, model_path: str | os.PathLike, comparison) -> dict[str, str]:
    """The file's metadata_props: what it is and what it needs from the platform."""
    from rnnfleet.train.updating import rnnfleet_version

    zone = training_read(checkpoint).get("timezone") or "unknown (the model file predates that record)"
    return {
        "dataset": plan.dataset,
        "bar_interval": BAR_INTERVAL,
        "timezone": zone,
        "input_name": INPUT_NAME,
        "input_columns": ",".join(INPUT_COLUMNS),
        "input_shape": f"[batch, {plan.window_bars}, {len(INPUT_COLUMNS)}]",
        "input_type": "double",
        "seq_len": str(plan.seq_len),
        "window_bars": str(plan.window_bars),
        "target": plan.target,
        "horizons": ",".join(map(str, plan.heads.horizons)),
        "quantiles": ",".join(f"{q:g}" for q in plan.heads.quantiles),
        "interval_coverages": ",".join(f"{c:g}" for c in plan.coverages),
        "outputs": ",".join(plan.output_names),
        **{f"output_{name}": OUTPUTS[name] for name in plan.output_names},
        "features": ",".join(plan.feature_references),
        "rnnfleet_version": rnnfleet_version(),
        "model_file": os.path.basename(model_path),
        "model_sha256": file_sha256(model_path),
        "opset": str(OPSET),
        "checked": comparison.text() + " (ONNX Runtime against rnnfleet predict on the model's own bars)",
    }


def input_windows(bars, windows: int, window_bars: int) -> np.ndarray:
    """(windows, window_bars, 5) float64: the windows ending at each of the last `windows` bars
    (no volume column: zeros)."""
    values = np.zeros((len(bars), len(INPUT_COLUMNS)), np.float64)
    for i, column in enumerate(INPUT_COLUMNS):
        if column in bars.columns:
            values[:, i] = bars[column].to_numpy(np.float64)
    ends = range(len(bars) - windows, len(bars))
    return np.stack([values[end - window_bars + 1 : end + 1] for end in ends])


def predict_columns(outputs: Mapping[str, np.ndarray], plan: ExportPlan, close: np.ndarray) -> dict[str, np.ndarray]:
    """The ONNX outputs under the forecasts table's column names, named by rnnfleet predict's own
    functions (forecast_frame's columns, interval_columns, head_columns), float64; close: each
    window's last close. The closes are the file's own outputs, never derived here."""
    heads, log_return = plan.heads, plan.target == "log_return"
    per_horizon = [
        {
            "horizon": horizon,
            "forecast": outputs["forecast"][:, k],
            "quantiles": {q: outputs["quantiles"][:, k, i] for i, q in enumerate(heads.quantiles)},
            "bands": [(c, outputs["lower"][:, k, j], outputs["upper"][:, k, j]) for j, c in enumerate(plan.coverages)],
        }
        for k, horizon in enumerate(heads.horizons)
    ]
    file_closes = {}  # {predict's column: the file's output}
    columns = {"forecast": per_horizon[0]["forecast"]}
    if log_return:
        columns["forecast_close"] = outputs["forecast_close"][:, 0]
    if plan.coverages:
        j = plan.coverages.index(nearest_coverage(list(plan.coverages), lambda coverage: coverage))
        columns |= interval_columns(plan.target, *per_horizon[0]["bands"][j], close)
        columns["coverage"] = np.full(len(close), plan.coverages[j])
        if log_return:
            file_closes |= {
                "forecast_close_low": outputs["forecast_close_lower"][:, 0, j],
                "forecast_close_high": outputs["forecast_close_upper"][:, 0, j],
            }
    if not heads.single:
        columns |= head_columns(plan.target, per_horizon, close)
        if log_return:
            file_closes |= {
                f"forecast_close_h{h}": outputs["forecast_close"][:, k] for k, h in enumerate(heads.horizons)
            }
    # A name predict does not use stays apart (and the comparison says so): never a silent match.
    columns |= {
        name if name in columns else f"{name} (not in rnnfleet predict's table)": v for name, v in file_closes.items()
    }
    return {name: np.asarray(values, np.float64) for name, values in columns.items()}


def column_scale(name: str, plan: ExportPlan, close: np.ndarray) -> np.ndarray:
    """The scale a difference in column `name` is measured in (see TOLERANCE)."""
    if TARGETS[plan.target].classification:
        return np.ones_like(close)
    horizon = re.search(r"_h(\d+)", name)
    k = plan.heads.horizons.index(int(horizon[1])) if horizon else 0
    scale = float(plan.scales[k])
    return close * scale if name.startswith("forecast_close") else np.full_like(close, scale)


@dataclass(frozen=True)
class Comparison:
    """ONNX Runtime's outputs against rnnfleet predict's forecasts on the same bars."""

    target_difference: float  # the largest, in the target's training std (a probability: as is)
    price_difference: float  # the largest of the forecast closes, relative to the close (0: none)
    worst: float  # the largest difference over what is allowed (TOLERANCE, FLOAT32_ROUNDING): above 1 fails
    worst_column: str

    def text(self) -> str:
        prices = f", forecast closes {self.price_difference:.2g} relative" if self.price_difference else ""
        return f"largest difference {self.target_difference:.2g} of the target's scale{prices}"


def compared(onnx_columns: Mapping[str, np.ndarray], reference, plan: ExportPlan) -> Comparison:
    """How far the ONNX outputs (predict_columns) lie from rnnfleet predict's forecasts (a
    DataFrame of the same rows). A difference is allowed up to TOLERANCE of the column's scale
    plus FLOAT32_ROUNDING of its value (a float32 output's own rounding: a price of 100 has
    steps of 8e-6); a column that one of them lacks, or a NaN, is worst = inf."""
    close = reference["close"].to_numpy(np.float64)
    expected = [name for name in reference.columns if name not in NOT_FORECASTS]
    missing = sorted(set(expected) ^ set(onnx_columns))
    if missing:
        return Comparison(math.inf, math.inf, math.inf, f"{missing[0]} (in only one of them)")
    target_difference = price_difference = worst = 0.0
    worst_column = ""
    for name in expected:
        wanted = reference[name].to_numpy(np.float64)
        difference = np.abs(onnx_columns[name] - wanted)
        scale = column_scale(name, plan, close)
        over = np.max(difference / (TOLERANCE * scale + FLOAT32_ROUNDING * np.abs(wanted)), initial=0.0)
        if name.startswith("forecast_close"):
            price_difference = max(price_difference, float(np.max(difference / close, initial=0.0)))
        else:
            target_difference = max(target_difference, float(np.max(difference / scale, initial=0.0)))
        if not over <= worst:  # NaN counts as the worst
            worst, worst_column = float(over), name
    return Comparison(target_difference, price_difference, worst, worst_column)


def checked(model_bytes: bytes, bars, windows: int, network, checkpoint: dict, plan: ExportPlan, sources) -> Comparison:
    """The file run by ONNX Runtime on the last `windows` windows of bars, at once and the last
    one alone (a batch of 1), against rnnfleet predict's forecasts of the same bars; the worse."""
    reference = forecast_frame(network, checkpoint, bars, windows, plan.dataset or "bars", sources)
    inputs = input_windows(bars, windows, plan.window_bars)
    close = inputs[:, -1, 3].astype(np.float64)
    together = compared(predict_columns(run_onnx(model_bytes, inputs), plan, close), reference, plan)
    alone = predict_columns(run_onnx(model_bytes, inputs[-1:]), plan, close[-1:])
    alone = compared(alone, reference.iloc[-1:], plan)
    return max(together, alone, key=lambda comparison: comparison.worst)


def run_onnx(model_bytes: bytes, windows: np.ndarray) -> dict[str, np.ndarray]:
    """The file's outputs on windows (n, seq_len + 1, 5) with ONNX Runtime (CPU)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, {INPUT_NAME: windows}), strict=True))


@dataclass(frozen=True)
class Exported:
    path: Path
    comparison: Comparison
    windows: int
    metadata: dict[str, str]


def export_model(
    model_path: str | os.PathLike,
    bars,
    out_path: str | os.PathLike,
    trusted_plugins=(),
    windows: int = CHECK_WINDOWS,
    checkpoint: dict | None = None,
) -> Exported:
    """Write the ONNX file of the model file at model_path to out_path, checked first on the
    last `windows` windows of `bars` (read_clean_bars' frame, as the model's training bars were
    read) against rnnfleet predict's forecasts. ExportRefused (one line) for what cannot be
    exported or a difference beyond TOLERANCE: then nothing is at out_path afterwards."""
    import onnx

    from rnnfleet.atomic_files import atomic_write
    from rnnfleet.train.modelfile import load_checkpoint
    from rnnfleet.train.models import rebuild_model, vetted_plugins

    out_path = Path(out_path)
    checkpoint = checkpoint if checkpoint is not None else load_checkpoint(model_path)
    sources = vetted_plugins(checkpoint, model_path, trusted_plugins)
    plan = export_plan(checkpoint, sources)
    check_features_trace(plan)
    network = rebuild_model(checkpoint, sources, "cpu", model_path)
    builder = str(checkpoint["model_config"].get("builder", DEFAULT_BUILDER))
    model_bytes = onnx_bytes(ForecastGraph(network, plan).eval(), builder)

    windows = max(1, min(windows, len(bars) - plan.window_bars + 1))
    if len(bars) < plan.window_bars:
        raise UserError(f"{model_path}: {len(bars)} bars, the check needs at least {plan.window_bars}")
    comparison = checked(model_bytes, bars, windows, network, checkpoint, plan, sources)
    if not comparison.worst <= 1.0:
        removed = ""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(out_path)
            removed = f"; the earlier {out_path} was removed"
        raise ExportRefused(
            f"{model_path}: the ONNX graph's forecasts differ from rnnfleet predict's in {comparison.worst_column}, "
            f"{comparison.worst:.3g} times what float32 rounding allows ({comparison.text()}) on {windows} window(s); "
            f"nothing written{removed}"
        )
    proto = onnx.load_from_string(model_bytes)
    proto.doc_string = f"rnnfleet forecast of {plan.dataset} (docs/export.md)"
    described = metadata(checkpoint, plan, model_path, comparison)
    onnx.helper.set_model_props(proto, described)
    with atomic_write(out_path) as handle:
        handle.write(proto.SerializeToString())
    return Exported(out_path, comparison, windows, described)


def read_metadata(path: str | os.PathLike) -> dict[str, str]:
    """An ONNX file's metadata_props; UserError in one line for a file that is not ONNX."""
    import onnx

    try:
        proto = onnx.load(str(path), load_external_data=False)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except Exception as error:
        raise UserError(f"{path}: not an ONNX file ({type(error).__name__}: {one_line(error)[:200]})") from None
    return {entry.key: entry.value for entry in proto.metadata_props}


def check_out_path(out: Path, inputs: list[str], project: str | os.PathLike = ".") -> None:
    """UserError for an output path that would replace or add to a model or data file, or is
    a folder: an export is written only to a name ending in .onnx, never onto one of the
    inputs or a model file, nor into the project folder's data_dir or its other outputs'
    folders (rnnfleet predict's --out guard: links and hard links followed); its exports
    folder (paths.exports) is not among them."""
    if out.is_dir():
        raise UserError(f"--out {out} is a folder; name the file to write, e.g. {out / 'model.onnx'}")
    if out.suffix.lower() != ".onnx":
        raise UserError(
            f"--out {out}: an ONNX file's name ends in .onnx (this one could be a model or data file); nothing written"
        )
    for given in inputs:
        if out.exists() and os.path.exists(given) and os.path.samefile(out, given):
            raise UserError(f"--out {out} is one of the inputs ({given}); name another file")
    if is_model_file(str(out)):
        raise UserError(f"--out {out} is a model file: it would be replaced; name another file")
    place = place_in_project(str(out), Path(project))
    if place:
        raise UserError(f"--out {out} {place}: the export would replace or add to its files; name a file elsewhere")


def export_one(
    model_path: str,
    bar_files: list[str],
    out: str | os.PathLike,
    max_bad_fraction: float = 0.01,
    trusted_plugins=(),
    project: str | os.PathLike = ".",
) -> bool:
    """Export one model file, checked on its bars (read as its training bars were; rows with
    NaN or inf dropped up to max_bad_fraction) to out (check_out_path, in the project folder
    `project`); one line on stderr either way. True when written."""
    from rnnfleet.forecast.predict import reading_settings
    from rnnfleet.prep.prepare import read_clean_bars
    from rnnfleet.train.modelfile import load_checkpoint

    try:
        out = Path(out)
        check_out_path(out, [model_path, *bar_files], project)
        checkpoint = load_checkpoint(model_path)
        read_format, _ = reading_settings(checkpoint, model_path, {})
        columns = checkpoint["features"].get("columns") or None
        bars = read_clean_bars(bar_files, columns, max_bad_fraction, read_format)
        exported = export_model(model_path, bars, out, trusted_plugins, checkpoint=checkpoint)
    except (UserError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return False
    print(
        f"{model_path} -> {out}: checked with ONNX Runtime on {exported.windows} window(s) of its bars against "
        f"rnnfleet predict: {exported.comparison.text()}",
        file=sys.stderr,
    )
    return True
