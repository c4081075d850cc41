"""Forecasts from a saved model file and a CSV of recent bars.

Command line (`rnnfleet predict`, installed by `pip install -e .`; or, without installing,
`PYTHONPATH=scripts python -m rnnfleet.predict`):

    rnnfleet predict --model models/EURUSD_1m.pt --csv recent.csv --out forecasts.csv [--last 100] [--trust my/model.py ...]

The bars file may be in any layout rnnfleet.formats reads (sniffed, or `--preset`); files
with a header are read with the column names the model file recorded.
Each output row is the forecast made at one bar of the model's target (rnnfleet.targets)
from that bar to `horizon` bars later, in the target's own units (for the close log return
also the close it implies). The last row forecasts beyond the data.

A model file runs no code but what the user trusts: a plug-in file it names (its builder or
a feature) is imported only when given with --trust, or when it lies inside the working
folder with the content it was trained with (rnnfleet.plugins.model_file_sources).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Iterable, Mapping

import numpy as np
import torch

from rnnfleet.checkpoint import atomic_write, load_checkpoint
from rnnfleet.data import MAX_BAD_FRACTION_KEY, DataError, bar_features, bars_label, normalise, read_clean_bars
from rnnfleet.errors import UserError
from rnnfleet.formats import FORMAT_PRESETS
from rnnfleet.model import rebuild_model, vetted_plugins
from rnnfleet.plugins import NO_SOURCES
from rnnfleet.targets import TARGETS
from rnnfleet.training import EVAL_BATCH, outputs_of, window_view

FORECAST_COLUMNS = ("timestamp", "close", "horizon", "forecast_log_return", "forecast_close")


def forecast_columns(target_name: str) -> tuple[str, ...]:
    """The forecasts CSV's columns for a model of this target."""
    if target_name == "log_return":
        return FORECAST_COLUMNS
    return ("timestamp", "close", "horizon", TARGETS[target_name].forecast_column)


@torch.no_grad()
def predict_scaled(model: torch.nn.Module, features: np.ndarray, seq_len: int) -> np.ndarray:
    """The model's raw output (the scaled target, or a logit) for every window of normalised
    features, in window order."""
    device = next(model.parameters()).device
    windows = window_view(torch.from_numpy(features).to(device), seq_len)
    outputs = [outputs_of(model, windows[start : start + EVAL_BATCH]) for start in range(0, len(windows), EVAL_BATCH)]
    return torch.cat(outputs).cpu().numpy()


def forecast_frame(
    model: torch.nn.Module,
    checkpoint: dict,
    bars,
    last: int | None = None,
    name: str = "bars",
    plugin_sources: Mapping[str, bytes] = NO_SOURCES,
):
    """A DataFrame of forecast_columns(target), one row per bar that ends a full window
    (only the last `last` of them when given), from bars as read_clean_bars returns them.
    A user's feature file runs only from plugin_sources (rnnfleet.model.vetted_plugins)."""
    import pandas as pd

    recorded = checkpoint["features"]
    seq_len, horizon, warmup = int(recorded["seq_len"]), int(recorded["horizon"]), int(recorded["warmup"])
    target = TARGETS[recorded["target"]]
    normalisation = checkpoint["normalisation"]
    needed_rows = seq_len + warmup  # one window of features after the features' warm-up
    if len(bars) < needed_rows:
        raise DataError(
            f"{name}: {len(bars)} bars, a forecast needs at least {needed_rows} "
            f"(seq_len {seq_len} + {warmup} bar(s) of feature warm-up)"
        )
    if last is not None:
        bars = bars.iloc[-(last + needed_rows - 1) :]
    matrix = bar_features(bars, recorded["definition"], name, plugin_sources)
    features = normalise(
        matrix.values[matrix.warmup :],
        np.asarray(normalisation["feature_mean"], dtype=np.float32),
        np.asarray(normalisation["feature_std"], dtype=np.float32),
    )
    forecasts = target.to_units(
        predict_scaled(model, features, seq_len).astype(np.float64),
        float(normalisation["target_mean"]),
        float(normalisation["target_std"]),
    )
    # Window w ends at feature row w + seq_len - 1, which describes bar warmup + w + seq_len - 1.
    window_end_bars = bars.iloc[matrix.warmup + seq_len - 1 :]
    close = window_end_bars["close"].to_numpy(dtype=np.float64)
    columns = {
        "timestamp": window_end_bars["timestamp"].to_numpy(),
        "close": close,
        "horizon": horizon,
        target.forecast_column: forecasts,
    }
    if target.name == "log_return":
        columns["forecast_close"] = close * np.exp(forecasts)
    return pd.DataFrame(columns, columns=list(forecast_columns(target.name)))


def forecast_csv(
    model_path: str | os.PathLike,
    csv_path: str | os.PathLike | list[str],
    forecasts_path: str | os.PathLike,
    last: int | None = None,
    max_bad_fraction: float = 0.0,
    device: str = "cpu",
    read_format: dict | None = None,
    trusted_plugins: Iterable[str] = (),
    max_bad_fraction_setting: str = MAX_BAD_FRACTION_KEY,
):
    """Load the model file and the bars, write the forecasts CSV atomically; returns them.

    A plug-in file the model file names is imported only when it is one of trusted_plugins
    or lies inside the working folder with the content recorded at training; else
    PluginRefused (one line) and nothing is imported (rnnfleet.model.vetted_plugins). The bars are read as preprocessing reads them (read_format: the `format:` config; None
    sniffs the layout), with the column names the model file recorded. Rows with NaN or inf
    are dropped up to max_bad_fraction of the file (as preprocessing does), else refused
    with a line naming max_bad_fraction_setting (the config key, or the command's option).
    """
    checkpoint = load_checkpoint(model_path)
    plugin_sources = vetted_plugins(checkpoint, model_path, trusted_plugins)
    model = rebuild_model(checkpoint, plugin_sources, device, model_path)
    columns = checkpoint["features"].get("columns") or None
    bars = read_clean_bars(csv_path, columns, max_bad_fraction, read_format, max_bad_fraction_setting)
    csv_path = bars_label(csv_path)
    for line in bars.attrs["sources"]:
        print(line, file=sys.stderr)
    for note in bars.attrs.get("notes", []):
        print(f"{csv_path}: note: {note}", file=sys.stderr)
    forecasts = forecast_frame(model, checkpoint, bars, last, str(csv_path), plugin_sources)
    text = io.StringIO()
    forecasts.to_csv(text, index=False)  # floats written with repr: they read back exactly
    with atomic_write(forecasts_path) as handle:
        handle.write(text.getvalue().encode())
    print(
        f"{model_path} on {csv_path}: {len(forecasts)} forecast(s) -> {forecasts_path}; "
        f"last: {forecasts.columns[3]} {forecasts.iloc[-1, 3]:+.6g} at close {forecasts['close'].iloc[-1]:.6g}",
        file=sys.stderr,
    )
    return forecasts


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv: list[str] | None = None, prog: str = "python -m rnnfleet.predict") -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Forecast the model's target (e.g. the close log return and the implied close) "
        "at each bar of a CSV with a model file written by rnnfleet.",
    )
    parser.add_argument("--model", required=True, help="model file, e.g. models/EURUSD_1m.pt")
    parser.add_argument("--csv", required=True, help="recent bars (any layout rnnfleet reads), oldest first")
    parser.add_argument(
        "--preset", default="auto", choices=list(FORMAT_PRESETS), help="layout of the bars file (default: sniffed)"
    )
    parser.add_argument("--out", required=True, help="forecasts CSV to write")
    parser.add_argument("--last", type=positive_int, help="forecast only at the last N bars (default: every bar)")
    parser.add_argument(
        "--max-bad-fraction", type=float, default=0.0, help="drop rows with NaN/inf up to this fraction (default 0)"
    )
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N")
    parser.add_argument(
        "--trust",
        action="append",
        default=[],
        metavar="FILE",
        help="a plug-in file (builder or features) the model file names that you trust to run; repeatable. "
        "Without it only files inside this folder, unchanged since training, are imported",
    )
    args = parser.parse_args(argv)
    try:
        forecast_csv(
            args.model,
            args.csv,
            args.out,
            args.last,
            args.max_bad_fraction,
            args.device,
            {"preset": args.preset},
            args.trust,
            max_bad_fraction_setting="option --max-bad-fraction",
        )
    except (UserError, FileNotFoundError) as error:  # DataError, ModelFileError, a plug-in's problem
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
