"""Forecasts from a saved model file and a CSV of recent bars.

Command line (`rnnfleet predict`, installed by `pip install -e .`; or, without installing,
`PYTHONPATH=scripts python -m rnnfleet.cli.predict`; its options live in rnnfleet.cli.predict):

    rnnfleet predict --model models/EURUSD_1m.pt --csv recent.csv --out forecasts.csv [--last 100] [--trust my/model.py ...]
        [--timezone ZONE --preset ... --header ... --delimiter ... --positions ... --timestamp-unit ... --timestamp-format ...]

The bars are read as the model's training bars were: with the `format:` settings the model
file records (its time zone above all: a model with time features fed times read in another
zone forecasts from the wrong hour), said in one line; files with a header with the column
names it records. The format options fill in what the record leaves at auto (another layout,
say); one that contradicts the record is refused unless --override-format is given.
Each output row is the forecast made at one bar of the model's target (rnnfleet.prep.targets)
from that bar to `horizon` bars later, in the target's own units (for the close log return
also the close it implies). The last row forecasts beyond the data.

A model file runs no code but what the user trusts: a plug-in file it names (its builder or
a feature) is imported only when given with --trust, or when it lies inside the working
folder with the content it was trained with (rnnfleet.plugins.model_file_sources).
"""

from __future__ import annotations

import copy
import io
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import torch

from rnnfleet.atomic_files import atomic_write
from rnnfleet.bars.formats import (
    FORMAT_DEFAULTS,
    TIMEZONE_EPOCH,
    TIMEZONE_IN_FILE,
)
from rnnfleet.errors import UserError
from rnnfleet.heads import Heads, head_column_order
from rnnfleet.plugins import NO_SOURCES
from rnnfleet.prep.arrays import PreparedArrays
from rnnfleet.prep.normalise import Normalisation
from rnnfleet.prep.prepare import (
    MAX_BAD_FRACTION_KEY,
    DataError,
    bar_features,
    bars_label,
    read_clean_bars,
    sources_summary,
)
from rnnfleet.prep.targets import TARGETS
from rnnfleet.scores.intervals import COVERAGE, horizon_bands, nearest_coverage
from rnnfleet.train.loop import EVAL_BATCH, outputs_of, window_view
from rnnfleet.train.modelfile import load_checkpoint
from rnnfleet.train.models import rebuild_model, vetted_plugins

# The forecast tables' vocabulary, the same in this command's CSV, the predict rule's
# predictions/<dataset>.csv and the fleet's results/forecasts.csv (rnnfleet.report.summary): the bar
# (`time`, UTC; `close`), `horizon` (bars ahead), `target` (what is forecast, in its units),
# `forecast` and, for log_return, `forecast_close`; the interval `forecast_low`,
# `forecast_high` at `coverage` (and the closes they imply); per horizon of a model of heads
# `forecast_h<h>`, `forecast_h<h>_q<percent>`, `forecast_h<h>_low_<percent>`,
# `forecast_h<h>_high_<percent>`, `forecast_close_h<h>`, horizons in numeric order.
FORECAST_COLUMNS = ("time", "close", "horizon", "target", "forecast", "forecast_close")
# The command's option for each `format:` key.
FORMAT_OPTIONS = {key: "--" + key.replace("_", "-") for key in FORMAT_DEFAULTS}


def forecast_columns(target_name: str) -> tuple[str, ...]:
    """The forecasts CSV's columns for a model of this target (before its interval's)."""
    return FORECAST_COLUMNS if target_name == "log_return" else FORECAST_COLUMNS[:-1]


def checkpoint_heads(checkpoint: dict) -> Heads:
    """The heads of a model file's model (rnnfleet.heads): its horizons and quantiles."""
    recorded = checkpoint["features"]
    return Heads.of(recorded.get("horizons") or [int(recorded["horizon"])], recorded.get("quantiles") or [])


@torch.no_grad()
def predict_scaled(
    model: torch.nn.Module, features: np.ndarray, seq_len: int, heads: Heads | None = None
) -> np.ndarray:
    """The model's raw output (the scaled target, or a logit) for every window of normalised
    features, in window order: (windows,), or with heads (windows, horizons, quantiles or 1)."""
    heads = heads or Heads((1,))
    device = next(model.parameters()).device
    windows = window_view(torch.from_numpy(features).to(device), seq_len)
    outputs = [
        outputs_of(model, windows[start : start + EVAL_BATCH], heads) for start in range(0, len(windows), EVAL_BATCH)
    ]
    return torch.cat(outputs).cpu().numpy()


def horizon_forecasts(checkpoint: dict, scaled: np.ndarray, coverage: float = COVERAGE) -> list[dict]:
    """Per horizon of the model file's model, from its raw outputs (predict_scaled), in the
    target's units: {"horizon", "forecast" (the point forecast), "quantiles" ({q: values}),
    "bands" ([(coverage, low, high)]: its calibrated intervals, rnnfleet.scores.intervals)}."""
    heads, target = checkpoint_heads(checkpoint), TARGETS[checkpoint["features"]["target"]]
    horizons = len(heads.horizons)
    offsets, scales = Normalisation.from_record(checkpoint["normalisation"]).target_scaling(horizons)
    scores = checkpoint.get("calibration", {}).get("scores")
    scores = np.zeros((horizons, 0)) if scores is None or not len(scores) else np.asarray(scores)
    if heads.single:  # one horizon of one output, as the heads of several have them
        scaled, scores = scaled.reshape(-1, 1, 1), scores.reshape(1, -1)
    forecasts = []
    for k, horizon in enumerate(heads.horizons):
        outputs, offset, scale = scaled[:, k, :], float(offsets[k]), float(scales[k])
        one = Heads((horizon,), heads.quantiles)
        forecasts.append(
            {
                "horizon": horizon,
                "forecast": target.to_units(outputs[:, heads.point], offset, scale),
                "quantiles": {q: target.to_units(outputs[:, i], offset, scale) for i, q in enumerate(heads.quantiles)},
                "bands": horizon_bands(
                    outputs[:, heads.point], outputs, scores[k], one, target, offset, scale, coverage
                ),
            }
        )
    return forecasts


def head_columns(target_name: str, forecasts: list[dict], close: np.ndarray) -> dict[str, np.ndarray]:
    """The forecasts' columns of every horizon (horizon_forecasts), named by the horizon and
    the quantile or interval: forecast_h5, forecast_close_h5 (log_return), forecast_h5_q5,
    forecast_h5_low_90, ..., in head_column_order."""
    columns = {}
    for forecast in forecasts:
        named = f"forecast_h{forecast['horizon']}"
        columns[named] = forecast["forecast"]
        if target_name == "log_return":
            columns[f"forecast_close_h{forecast['horizon']}"] = close * np.exp(forecast["forecast"])
        columns |= {f"{named}_q{q * 100:g}": values for q, values in forecast["quantiles"].items()}
        for coverage, low, high in forecast["bands"]:
            columns |= {f"{named}_low_{coverage * 100:g}": low, f"{named}_high_{coverage * 100:g}": high}
    return {name: columns[name] for name in sorted(columns, key=head_column_order)}


def interval_columns(
    target_name: str, coverage: float, low: np.ndarray, high: np.ndarray, close: np.ndarray
) -> dict[str, np.ndarray | float]:
    """The forecasts' interval columns: its coverage, forecast_low, forecast_high (in the
    target's units) and, for log_return, the closes they imply."""
    columns = {"coverage": coverage, "forecast_low": low, "forecast_high": high}
    if target_name == "log_return":
        columns |= {"forecast_close_low": close * np.exp(low), "forecast_close_high": close * np.exp(high)}
    return columns


def cpu_model(model: torch.nn.Module) -> torch.nn.Module:
    """The model itself on the CPU, else a copy of it there. The fleet's forecasts are then
    the numbers `rnnfleet predict` (CPU by default) gives from the model file, whichever
    device trained it. On CUDA the forecast differed from predict's in the fourth digit (seen
    on an NVIDIA H200; likely cuDNN's TF32 arithmetic, torch.backends.cudnn.allow_tf32, on by
    default)."""
    if all(parameter.device.type == "cpu" for parameter in model.parameters()):
        return model
    return copy.deepcopy(model).cpu()


def forecast_at_last_bar(model: torch.nn.Module, checkpoint: dict, arrays: PreparedArrays) -> dict:
    """The forecast made at the last bar of the arrays' file(s), as `rnnfleet predict --last 1`
    on those files makes it, as metrics entries: forecast_time (the bar's time, UTC),
    forecast_bar_close, forecast_horizon (bars), forecast_target, forecast (in the target's
    units) and, for log_return, forecast_close; its interval forecast_coverage,
    forecast_low, forecast_high (and for log_return the closes they imply, forecast_close_low,
    forecast_close_high); forecast_heads: the head columns of a model of heads. {} where the arrays keep no full window up to that bar (an array file
    of an older rnnfleet). The train job asks for it after the fit, with the model the file
    holds (on any device: it forecasts on the CPU, see cpu_model)."""
    import pandas as pd

    recorded = checkpoint["features"]
    seq_len, target = int(recorded["seq_len"]), TARGETS[recorded["target"]]
    if arrays.latest_time < 0 or len(arrays.latest_features) < seq_len:
        return {}
    features = Normalisation.from_record(checkpoint["normalisation"]).features(arrays.latest_features[-seq_len:])
    model = cpu_model(model).eval()
    heads = checkpoint_heads(checkpoint)
    scaled = predict_scaled(model, features, seq_len, heads).astype(np.float64)
    per_horizon = horizon_forecasts(checkpoint, scaled[-1:])
    forecast = float(per_horizon[0]["forecast"][-1])
    entries = {
        "forecast_time": str(pd.Timestamp(arrays.latest_time, tz="UTC")),
        "forecast_bar_close": arrays.last_close,
        "forecast_horizon": heads.horizons[0],
        "forecast_target": target.name,
        "forecast": forecast,
    }
    if target.name == "log_return":
        entries["forecast_close"] = arrays.last_close * float(np.exp(forecast))
    if per_horizon[0]["bands"]:
        coverage, low, high = nearest_coverage(per_horizon[0]["bands"], lambda band: band[0])
        band = interval_columns(target.name, coverage, float(low[0]), float(high[0]), arrays.last_close)
        entries |= {("forecast_coverage" if name == "coverage" else name): float(value) for name, value in band.items()}
    if not heads.single:
        columns = head_columns(target.name, per_horizon, np.array([arrays.last_close]))
        entries["forecast_heads"] = {name: float(values[-1]) for name, values in columns.items()}
    return entries


def forecast_frame(
    model: torch.nn.Module,
    checkpoint: dict,
    bars,
    last: int | None = None,
    name: str = "bars",
    plugin_sources: Mapping[str, bytes] = NO_SOURCES,
    coverage: float = COVERAGE,
):
    """A DataFrame of forecast_columns(target), one row per bar that ends a full window
    (only the last `last` of them when given), from bars as read_clean_bars returns them,
    the interval nearest `coverage` where the model file is calibrated (interval_columns)
    and a model of heads' columns (head_columns).
    A user's feature file runs only from plugin_sources (rnnfleet.train.models.vetted_plugins)."""
    import pandas as pd

    recorded = checkpoint["features"]
    seq_len, warmup = int(recorded["seq_len"]), int(recorded["warmup"])
    target = TARGETS[recorded["target"]]
    needed_rows = seq_len + warmup  # one window of features after the features' warm-up
    if len(bars) < needed_rows:
        raise DataError(
            f"{name}: {len(bars)} bars, a forecast needs at least {needed_rows} "
            f"(seq_len {seq_len} + {warmup} bar(s) of feature warm-up): give earlier bars too "
            "(several files are joined in time order, e.g. --csv yesterday.csv today.csv)"
        )
    if last is not None:
        bars = bars.iloc[-(last + needed_rows - 1) :]
    matrix = bar_features(bars, recorded["definition"], name, plugin_sources)
    features = Normalisation.from_record(checkpoint["normalisation"]).features(matrix.values[matrix.warmup :])
    heads = checkpoint_heads(checkpoint)
    per_horizon = horizon_forecasts(
        checkpoint, predict_scaled(model, features, seq_len, heads).astype(np.float64), coverage
    )
    forecasts = per_horizon[0]["forecast"]
    # Window w ends at feature row w + seq_len - 1, which describes bar warmup + w + seq_len - 1.
    window_end_bars = bars.iloc[matrix.warmup + seq_len - 1 :]
    close = window_end_bars["close"].to_numpy(dtype=np.float64)
    columns = {
        "time": window_end_bars["timestamp"].to_numpy(),
        "close": close,
        "horizon": heads.horizons[0],
        "target": target.name,
        "forecast": forecasts,
    }
    if target.name == "log_return":
        columns["forecast_close"] = close * np.exp(forecasts)
    columns = {name: columns[name] for name in forecast_columns(target.name)}
    if per_horizon[0]["bands"]:
        band = nearest_coverage(per_horizon[0]["bands"], lambda band: band[0])
        columns |= interval_columns(target.name, *band, close)
    if not heads.single:
        columns |= head_columns(target.name, per_horizon, close)
    return pd.DataFrame(columns)


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
    read_note: str = "",
    checkpoint: dict | None = None,
    coverage: float = COVERAGE,
):
    """Load the model file and the bars, write the forecasts CSV atomically; returns them.
    coverage: of the forecasts' interval (rnnfleet.scores.intervals), where the model file has one.
    read_note: a line saying how the bars are read, printed once they are; checkpoint: the
    model file's contents where the caller has loaded it already.

    A plug-in file the model file names is imported only when it is one of trusted_plugins
    or lies inside the working folder with the content recorded at training; else
    PluginRefused (one line) and nothing is imported (rnnfleet.train.models.vetted_plugins). The bars are read as preprocessing reads them (read_format: the `format:` config; None
    sniffs the layout), with the column names the model file recorded. Rows with NaN or inf
    are dropped up to max_bad_fraction of the file (as preprocessing does), else refused
    with a line naming max_bad_fraction_setting (the config key, or the command's option).
    """
    checkpoint = checkpoint if checkpoint is not None else load_checkpoint(model_path)
    plugin_sources = vetted_plugins(checkpoint, model_path, trusted_plugins)
    model = rebuild_model(checkpoint, plugin_sources, device, model_path)
    columns = checkpoint["features"].get("columns") or None
    bars = read_clean_bars(csv_path, columns, max_bad_fraction, read_format, max_bad_fraction_setting)
    csv_path = bars_label(csv_path)
    if read_note:
        print(read_note, file=sys.stderr)
    for line in sources_summary(bars, csv_path):
        print(line, file=sys.stderr)
    for note in bars.attrs.get("notes", []):
        print(f"{csv_path}: note: {note}", file=sys.stderr)
    zone_warning = other_zone_warning(checkpoint, bars.attrs.get("timezone", ""), str(csv_path))
    if zone_warning:
        print(zone_warning, file=sys.stderr)
    forecasts = forecast_frame(model, checkpoint, bars, last, str(csv_path), plugin_sources, coverage)
    text = io.StringIO()
    forecasts.to_csv(text, index=False)  # floats written with repr: they read back exactly
    with atomic_write(forecasts_path) as handle:
        handle.write(text.getvalue().encode())
    print(
        f"{model_path} on {csv_path}: {len(forecasts)} forecast(s) -> {forecasts_path}; "
        f"last: {forecasts['target'].iloc[-1]} {forecasts['forecast'].iloc[-1]:+.6g} at close "
        f"{forecasts['close'].iloc[-1]:.6g}",
        file=sys.stderr,
    )
    return forecasts


def training_read(checkpoint: dict) -> dict:
    """How the model's training bars were read: {"format": ..., "timezone": ..., "read_as":
    ...} ({} when the model file predates that record)."""
    read = checkpoint.get("read")
    return read if isinstance(read, dict) else {}


def recorded_format(checkpoint: dict) -> dict:
    """The `format:` settings the model's training bars were read with ({} when the model
    file predates that record)."""
    return dict(training_read(checkpoint).get("format") or {})


def settings_text(read_format: dict) -> str:
    """'timezone Asia/Tokyo, delimiter ';'': the settings that are not auto, in words."""
    given = [f"{key} {value!r}" for key, value in read_format.items() if value != FORMAT_DEFAULTS.get(key)]
    return ", ".join(given) or "every setting auto (sniffed from the file)"


def reading_settings(checkpoint: dict, model_path, options: dict, override: bool = False) -> tuple[dict, str]:
    """(the `format:` settings to read new bars with, the one line saying how): the model
    file's record, with the options the user gave (options: {format key: value}, given ones
    only) filling in its auto keys. An option that contradicts a recorded setting is a
    UserError naming both, unless override (the options win, and the line says so)."""
    recorded = recorded_format(checkpoint)
    if not recorded:
        settings = {**FORMAT_DEFAULTS, **options}
        return settings, (
            f"{model_path}: the model file does not record how its training bars were read (an older rnnfleet); "
            f"bars read with {settings_text(settings)}"
        )
    settings = {**FORMAT_DEFAULTS, **recorded}
    conflicts = [key for key, value in options.items() if settings[key] not in (value, FORMAT_DEFAULTS[key])]
    if conflicts and not override:
        key = conflicts[0]
        raise UserError(
            f"option {FORMAT_OPTIONS[key]} {options[key]!r} contradicts {model_path}, whose training bars were read "
            f"with format.{key} {settings[key]!r}; leave the option out to read them the same way, or add "
            "--override-format if this file really differs"
        )
    zone = training_read(checkpoint).get("timezone") or ""
    line = f"{model_path}: bars read as its training bars were: {settings_text({**settings, **options})}"
    line += f" (training times read in {zone})" if zone else ""
    if conflicts:
        overridden = ", ".join(f"{FORMAT_OPTIONS[key]} {options[key]!r} for {settings[key]!r}" for key in conflicts)
        line += f"; --override-format: {overridden}"
    return {**settings, **options}, line


def other_zone_warning(checkpoint: dict, bars_zone: str, bars_name: str) -> str:
    """A warning line when the new bars' naive times were read in another zone than the
    training bars' (say histdata's EST at training, a re-saved copy read as UTC now); '' else."""
    trained_zone = training_read(checkpoint).get("timezone", "")
    zoned = (TIMEZONE_EPOCH, TIMEZONE_IN_FILE, "")
    if trained_zone in zoned or bars_zone in zoned or ";" in trained_zone + bars_zone or trained_zone == bars_zone:
        return ""
    return (
        f"{bars_name}: warning: naive times read in {bars_zone}, the model's training bars' in {trained_zone}: "
        "time features and forecast times may be shifted (set --timezone)"
    )


# What a run writes in a project folder (the config's paths:, with their defaults) and reads
# from (data_dir): --out never lands there.
PROJECT_FOLDER_KEYS = ("prep", "models", "metrics", "results", "logs", "benchmarks", "predictions")
MODEL_FILE_START = b"PK\x03\x04"  # torch.save writes a zip archive


def is_model_file(path: str) -> bool:
    """Whether `path` is a file that starts as a model file does (whatever its name)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(MODEL_FILE_START)) == MODEL_FILE_START
    except OSError:
        return False


def project_folders(project: Path) -> dict[str, Path]:
    """{what: folder} of the project folder's data and outputs, resolved (links followed):
    its config's data_dir and paths: (config/config.yaml, else config.yaml; the defaults
    where it has neither or a key is missing)."""
    import yaml

    config = {}
    for config_path in (project / "config" / "config.yaml", project / "config.yaml"):
        if config_path.is_file():
            try:
                config = yaml.safe_load(config_path.read_text()) or {}
            except (OSError, UnicodeDecodeError, yaml.YAMLError):
                config = {}  # the run says what is wrong with it; the defaults are still guarded
            break
    config = config if isinstance(config, dict) else {}
    paths = config.get("paths") if isinstance(config.get("paths"), dict) else {}
    folders = {"data_dir": str(config.get("data_dir") or "demo_data")}
    folders |= {f"paths.{key}": str(paths.get(key) or key) for key in PROJECT_FOLDER_KEYS}
    return {what: Path(os.path.realpath(project / folder)) for what, folder in folders.items()}


def place_in_project(out: str, project: Path) -> str | None:
    """Where `out` lies among the project folder's data and outputs, in words; None when it
    lies elsewhere. A file that is one of theirs under another name (a hard link) counts."""
    resolved = Path(os.path.realpath(out))
    folders = project_folders(project)
    for what, folder in folders.items():
        if resolved.is_relative_to(folder):
            return f"lies in the project folder's {what} folder {folder}"
    try:
        out_stat = os.stat(out)
    except OSError:
        return None
    if out_stat.st_nlink < 2:
        return None
    for folder in folders.values():
        for root, _, names in os.walk(folder):
            for name in names:
                try:
                    other = os.stat(os.path.join(root, name))
                except OSError:
                    continue
                if (other.st_dev, other.st_ino) == (out_stat.st_dev, out_stat.st_ino):
                    return f"is {os.path.join(root, name)} of the project folder under another name (a hard link)"
    return None
