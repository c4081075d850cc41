"""`rnnfleet predict`: its options and its checks of what the command line names (the
forecasts themselves: rnnfleet.forecast.predict)."""

from __future__ import annotations

import argparse
import glob
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from rnnfleet.bars.formats import DELIMITERS, FORMAT_DEFAULTS, FORMAT_PRESETS, is_time_zone
from rnnfleet.errors import UserError
from rnnfleet.forecast.predict import checkpoint_heads, forecast_csv, is_model_file, place_in_project, reading_settings
from rnnfleet.scores.intervals import COVERAGE
from rnnfleet.train.modelfile import load_checkpoint


def coverage_setting(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a coverage between 0 and 1 (e.g. 0.9)")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(
    argv: list[str] | None = None,
    prog: str = "python -m rnnfleet.cli.predict",
    find_dataset: Callable[[str, Path], tuple[str, list[str]]] | None = None,
) -> int:
    """find_dataset(name, project folder) -> (model file, bar files): how --dataset is
    answered (the rnnfleet command's; without one, --dataset is refused in one line)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Forecast the model's target (e.g. the close log return and the implied close) "
        "at each bar of a CSV with a model file written by rnnfleet.",
    )
    parser.add_argument("--model", help="model file, e.g. models/EURUSD_1m.pt")
    parser.add_argument(
        "--csv",
        nargs="+",
        metavar="FILE",
        help="recent bars (any layout rnnfleet reads); several files or a quoted glob (e.g. 'data/BTCUSDT/*.zip') "
        "are joined in time order, as training joins a dataset's period files",
    )
    parser.add_argument(
        "--dataset",
        metavar="NAME",
        help="instead of --model and --csv: the dataset NAME of the project folder, its model file and "
        "its own bar files, found as a run there finds them",
    )
    parser.add_argument(
        "--project",
        default=".",
        metavar="FOLDER",
        help="the project folder of --dataset, whose data and outputs --out may not replace (default: .)",
    )
    add_format_options(parser)
    parser.add_argument("--out", required=True, help="forecasts CSV to write")
    parser.add_argument("--last", type=positive_int, help="forecast only at the last N bars (default: every bar)")
    parser.add_argument(
        "--max-bad-fraction", type=float, default=0.0, help="drop rows with NaN/inf up to this fraction (default 0)"
    )
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N")
    parser.add_argument(
        "--coverage",
        type=coverage_setting,
        help=f"coverage of the forecast interval, calibrated on the model's validation errors (default {COVERAGE}); "
        "a model with quantiles (train.quantiles) has the intervals of its quantile pairs instead",
    )
    parser.add_argument(
        "--trust",
        action="append",
        default=[],
        metavar="FILE",
        help="a plug-in file (builder or features) the model file names that you trust to run; repeatable. "
        "Without it only files inside this folder, unchanged since training, are imported",
    )
    args = parser.parse_args(argv)
    if (args.dataset is None and None in (args.model, args.csv)) or (args.dataset and (args.model or args.csv)):
        parser.error("give --dataset NAME, or --model and --csv")
    options = {key: getattr(args, key) for key in FORMAT_DEFAULTS if getattr(args, key) is not None}
    try:
        if args.dataset is not None:
            if find_dataset is None:
                raise UserError("--dataset is answered by the rnnfleet command (rnnfleet predict --dataset ...)")
            args.model, args.csv = find_dataset(args.dataset, Path(args.project))
        bars_files = expanded_paths(args.csv)
        check_command_paths(args.model, bars_files, args.out, args.project)
        check_device(args.device)
        checkpoint = load_checkpoint(args.model)
        check_coverage_option(checkpoint, args.model, args.coverage)
        read_format, read_note = reading_settings(checkpoint, args.model, options, args.override_format)
        forecast_csv(
            args.model,
            bars_files,
            args.out,
            args.last,
            args.max_bad_fraction,
            args.device,
            read_format,
            args.trust,
            max_bad_fraction_setting="option --max-bad-fraction",
            read_note=read_note,
            checkpoint=checkpoint,
            coverage=args.coverage or COVERAGE,
        )
    except (UserError, FileNotFoundError) as error:  # DataError, ModelFileError, a plug-in's problem
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


def check_coverage_option(checkpoint: dict, model_path: str, coverage: float | None) -> None:
    """UserError for --coverage with a model of quantiles: its intervals are those its quantile pairs bound."""
    heads = checkpoint_heads(checkpoint)
    if coverage is not None and heads.quantiles:
        pairs = ", ".join(f"{low:g}-{high:g}" for low, high in heads.pair_quantiles()) or "none"
        raise UserError(
            f"--coverage {coverage:g}: {model_path} forecasts quantiles {list(heads.quantiles)}, and its intervals are "
            f"those its quantile pairs bound (calibrated on its validation windows: {pairs}); leave --coverage out, "
            "or train with other train.quantiles"
        )


def expanded_paths(given: list[str]) -> list[str]:
    """The --csv files: each name as given, a glob pattern (one no file is named after) as
    the files it matches, in name order. UserError for a pattern that matches nothing."""
    paths = []
    for name in given:
        if os.path.exists(name) or not glob.has_magic(name):
            paths.append(name)
            continue
        matched = sorted(path for path in glob.glob(name, recursive=True) if os.path.isfile(path))
        if not matched:
            raise UserError(f"--csv {name}: no file matches that pattern")
        paths += matched
    return list(dict.fromkeys(paths))


def check_command_paths(model: str, csv: list[str], out: str, project: str | os.PathLike = ".") -> None:
    """UserError when --out would replace the command's own input, a model file, or a file of
    the project folder's data or outputs (or add a file there), however the path is spelled
    (links, `.` and `..`, hard links), or is a folder."""
    for option, given in (*(("--csv", path) for path in csv), ("--model", model)):
        if os.path.exists(out) and os.path.exists(given) and os.path.samefile(out, given):
            raise UserError(
                f"--out {out} is the {option} file: it would be replaced by the forecasts; name another file"
            )
    if os.path.isdir(out):
        raise UserError(
            f"--out {out} is a folder; name the forecasts file to write, e.g. {os.path.join(out, 'forecasts.csv')}"
        )
    if is_model_file(out):
        raise UserError(f"--out {out} is a model file: it would be replaced by the forecasts; name another file")
    place = place_in_project(out, Path(project))
    if place:
        raise UserError(f"--out {out} {place}: the forecasts would replace or add to its files; name a file elsewhere")


def check_device(device: str) -> None:
    """UserError for a --device this torch build cannot use (CUDA asked of a CPU-only build)."""

    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise UserError(f"--device {device!r} is not a device name; allowed: cpu, cuda, cuda:N, mps") from None
    if kind == "cuda" and not torch.cuda.is_available():
        build = "a CPU-only build of PyTorch" if torch.version.cuda is None else "PyTorch sees no CUDA GPU here"
        raise UserError(f"--device {device}: {build}; use --device cpu (or install PyTorch's CUDA build: README, GPU)")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"--device {device}: MPS is not available here; use --device cpu")


def add_format_options(parser: argparse.ArgumentParser) -> None:
    """The options of the `format:` settings (docs/data.md); each defaults to the model file's record."""
    group = parser.add_argument_group(
        "how the bars file is read (default: as the model file records its training bars were read)"
    )
    group.add_argument("--timezone", type=time_zone, help="zone of naive times, e.g. Asia/Tokyo, Etc/GMT+5, UTC")
    group.add_argument("--preset", choices=list(FORMAT_PRESETS), help="a known layout")
    group.add_argument(
        "--header", type=header_setting, help="auto, true or false: whether the first line names the columns"
    )
    group.add_argument("--delimiter", type=delimiter_setting, help="auto, ',', ';', tab or '|'")
    group.add_argument(
        "--positions", type=positions_setting, help="column positions of a headerless file, e.g. timestamp=0,open=1,..."
    )
    group.add_argument("--timestamp-unit", choices=["auto", "s", "ms", "us", "ns", "text"], help="epoch unit, or text")
    group.add_argument("--timestamp-format", help="strftime layout of text times, e.g. '%%Y%%m%%d %%H%%M%%S'")
    group.add_argument(
        "--price-side", choices=["bid", "ask", "mid"], help="prices of a file with bid and ask columns (default bid)"
    )
    group.add_argument(
        "--override-format",
        action="store_true",
        help="let the options above differ from the model file's record (read this file unlike the training bars)",
    )


def time_zone(text: str) -> str:
    if text != "auto" and not is_time_zone(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a time zone (e.g. UTC, Asia/Tokyo, Etc/GMT+5)")
    return text


def header_setting(text: str) -> bool | str:
    choices = {"auto": "auto", "true": True, "false": False}
    if text.lower() not in choices:
        raise argparse.ArgumentTypeError(f"{text!r}: allowed auto, true, false")
    return choices[text.lower()]


def delimiter_setting(text: str) -> str:
    delimiter = {"tab": "\t", "\\t": "\t"}.get(text, text)
    if delimiter != "auto" and delimiter not in DELIMITERS:
        raise argparse.ArgumentTypeError(f"{text!r}: allowed auto, ',', ';', tab, '|'")
    return delimiter


def positions_setting(text: str) -> dict:
    positions = {}
    for item in text.split(","):
        key, _, position = item.partition("=")
        if key.strip() not in ("timestamp", "date", "time", "open", "high", "low", "close", "volume"):
            raise argparse.ArgumentTypeError(f"{item!r}: want key=position, keys timestamp (or date, time), open, ...")
        if not position.strip().isdigit():
            raise argparse.ArgumentTypeError(f"{item!r}: the position must be a whole number from 0")
        positions[key.strip()] = int(position)
    return positions


if __name__ == "__main__":
    sys.exit(main())
