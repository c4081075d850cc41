"""`rnnfleet export`: its options, a project's models one by one, a file's metadata (the
export itself: rnnfleet.forecast.export_onnx)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from rnnfleet.errors import UserError
from rnnfleet.forecast.export_onnx import export_one, read_metadata, require_packages


def describe_file(path: str) -> int:
    for key, value in read_metadata(path).items():
        print(f"{key}: {value}")
    return 0


def main(
    argv: list[str] | None = None,
    prog: str = "python -m rnnfleet.cli.export",
    find_dataset: Callable[[str, Path], tuple[str, list[str]]] | None = None,
    project_models: Callable[[Path], tuple[list[str], Path]] | None = None,
) -> int:
    """find_dataset(name, folder) -> (model file, bar files); project_models(folder) -> (the
    datasets with a model file, the folder exports go to): how datasets of a project folder
    are found (the rnnfleet command's)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog=prog,
        description="Write a model's forecast (features, normalisation, network, intervals, prices) as one ONNX "
        "file for ONNX Runtime (MetaTrader 5, C#, C++), checked against rnnfleet predict first (docs/export.md).",
    )
    parser.add_argument(
        "datasets",
        nargs="*",
        metavar="DATASET",
        help="datasets of the project folder (default: every one with a model)",
    )
    parser.add_argument("--project", default=".", metavar="FOLDER", help="the project folder (default: .)")
    parser.add_argument("--model", help="instead of datasets: a model file, e.g. models/EURUSD_1m.pt")
    parser.add_argument("--csv", nargs="+", metavar="FILE", help="with --model: its bars, for the check")
    parser.add_argument("--out", help="with --model: the file to write (default: exports/<model name>.onnx)")
    parser.add_argument("--out-dir", metavar="FOLDER", help="with datasets: where <dataset>.onnx go (default: exports)")
    parser.add_argument("--describe", metavar="FILE", help="print what an exported file says it is, and stop")
    parser.add_argument(
        "--max-bad-fraction", type=float, default=0.01, help="rows with NaN/inf dropped up to this fraction (0.01)"
    )
    parser.add_argument(
        "--trust", action="append", default=[], metavar="FILE", help="a plug-in file the model names that you trust"
    )
    args = parser.parse_args(argv)
    try:
        require_packages()
        if args.describe:
            return describe_file(args.describe)
        if args.model:
            if args.datasets or not args.csv:
                parser.error("--model takes --csv (its bars) and no dataset names")
            out = Path(args.out or Path(args.project) / "exports" / f"{Path(args.model).stem}.onnx")
            return 0 if export_one(args.model, args.csv, out, args.max_bad_fraction, args.trust, args.project) else 1
        if find_dataset is None or project_models is None:
            raise UserError("datasets of a project folder are exported by the rnnfleet command (rnnfleet export NAME)")
        folder = Path(args.project)
        with_models, exports = project_models(folder)
        names = args.datasets or with_models
        if not names:
            raise UserError(f"{folder}: no trained model to export (train first: snakemake --cores all)")
        out_dir = Path(args.out_dir) if args.out_dir else exports
        failed = [name for name in names if not export_dataset(find_dataset, name, folder, out_dir, args)]
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if failed:
        print(f"{len(failed)} of {len(names)} not exported: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def export_dataset(find_dataset, name: str, folder: Path, out_dir: Path, args) -> bool:
    """export_one of a dataset of the project folder: its model and bar files found as a run finds them."""
    try:
        model, bar_files = find_dataset(name, folder)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return False
    return export_one(model, bar_files, out_dir / f"{name}.onnx", args.max_bad_fraction, args.trust, folder)


if __name__ == "__main__":
    sys.exit(main())
