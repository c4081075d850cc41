"""Forecasts from an rnnfleet ONNX file with ONNX Runtime (torch is not needed).

    pip install onnxruntime numpy pandas
    python forecast.py exports/EURUSD_1m.onnx recent_bars.csv [more bar files ...]

The bar files: 1-minute bars, in the time zone and bar interval the model was trained with
(its metadata says which). Where rnnfleet is installed, they are read by rnnfleet's own reader:
any layout a run reads (a raw headerless Binance file, MT4, histdata, Parquet, ...), several
files joined in time order. Without rnnfleet, a CSV whose header names open, high, low, close
and volume is read by those names, and a headerless one as rnnfleet's plain layout: time,
open, high, low, close, volume (Binance's klines start so). The first line printed says which.
"""

import sys

import numpy as np
import onnxruntime
import pandas as pd

PLAIN_POSITIONS = {"open": 1, "high": 2, "low": 3, "close": 4, "volume": 5}


def read_bars(paths: list[str], columns: list[str]) -> tuple[np.ndarray, str]:
    """(bars (rows, 5) float64 in `columns` order, oldest first; how they were read)."""
    try:
        from rnnfleet.prep.prepare import read_clean_bars
    except ImportError:
        return read_csv_bars(paths[0], columns)
    bars = read_clean_bars(paths if len(paths) > 1 else paths[0], None, 0.01)
    values = np.column_stack([bars[name] if name in bars else np.zeros(len(bars)) for name in columns])
    return values, f"rnnfleet's reader: {bars.attrs['read_as']}"


def read_csv_bars(path: str, columns: list[str]) -> tuple[np.ndarray, str]:
    first = pd.read_csv(path, nrows=1, header=None).iloc[0].astype(str).str.strip().str.lower().tolist()
    if set(columns) <= set(first):
        table = pd.read_csv(path)
        table.columns = [str(name).strip().lower() for name in table.columns]
        return table[columns].to_numpy(np.float64), f"a CSV with the header names {', '.join(columns)}"
    table = pd.read_csv(path, header=None)
    return table[[PLAIN_POSITIONS[name] for name in columns]].to_numpy(np.float64), (
        "a headerless CSV: time, open, high, low, close, volume"
    )


def main(model_path: str, bar_paths: list[str]) -> None:
    session = onnxruntime.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    window = int(meta["window_bars"])  # seq_len + 1: one bar before the window for the returns
    columns = meta["input_columns"].split(",")  # open,high,low,close,volume
    bars, how = read_bars(bar_paths, columns)
    print(f"bars read with {how}")
    if len(bars) < window:
        sys.exit(f"{bar_paths[-1]}: {len(bars)} bars, the model needs the last {window}")
    # [1, window, 5] in the input's own type (double: prices as the platform has them).
    dtype = np.float64 if session.get_inputs()[0].type == "tensor(double)" else np.float32
    batch = bars[None, -window:].astype(dtype)
    names = [output.name for output in session.get_outputs()]
    outputs = dict(zip(names, session.run(names, {meta["input_name"]: batch}), strict=True))  # by name
    horizons = meta["horizons"].split(",")
    coverages = [c for c in meta["interval_coverages"].split(",") if c]
    print(f"{meta['dataset']}: {meta['target']} from the bar closing at {bars[-1, 3]:.10g}")
    for k, horizon in enumerate(horizons):
        line = f"  {horizon} bar(s) ahead: {outputs['forecast'][0, k]:+.9g}"
        if "forecast_close" in outputs:
            line += f" (close {outputs['forecast_close'][0, k]:.9g})"
        for j, coverage in enumerate(coverages):
            line += (
                f"; {float(coverage):.0%} interval [{outputs['lower'][0, k, j]:+.6g}, {outputs['upper'][0, k, j]:+.6g}]"
            )
        print(line)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
