"""Forecasts from an rnnfleet ONNX file with ONNX Runtime alone (no rnnfleet, no torch).

    pip install onnxruntime numpy pandas
    python forecast.py exports/EURUSD_1m.onnx recent_bars.csv

recent_bars.csv: 1-minute bars with the columns open, high, low, close, volume, oldest first,
in the time zone and bar interval the model was trained with (its metadata says which).
"""

import sys

import numpy as np
import onnxruntime
import pandas as pd


def main(model_path: str, bars_path: str) -> None:
    session = onnxruntime.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    window = int(meta["window_bars"])  # seq_len + 1: one bar before the window for the returns
    columns = meta["input_columns"].split(",")  # open,high,low,close,volume
    bars = pd.read_csv(bars_path)[columns].to_numpy(np.float32)
    if len(bars) < window:
        sys.exit(f"{bars_path}: {len(bars)} bars, the model needs the last {window}")
    batch = bars[None, -window:]  # [1, window, 5]; several windows: stack them along the first axis
    names = [output.name for output in session.get_outputs()]
    outputs = dict(zip(names, session.run(names, {meta["input_name"]: batch}), strict=True))
    horizons = meta["horizons"].split(",")
    coverages = [c for c in meta["interval_coverages"].split(",") if c]
    print(f"{meta['dataset']}: {meta['target']} from the bar closing at {bars[-1, 3]:g}")
    for k, horizon in enumerate(horizons):
        line = f"  {horizon} bar(s) ahead: {outputs['forecast'][0, k]:+.6g}"
        if "forecast_close" in outputs:
            line += f" (close {outputs['forecast_close'][0, k]:.6g})"
        for j, coverage in enumerate(coverages):
            line += (
                f"; {float(coverage):.0%} interval [{outputs['lower'][0, k, j]:+.6g}, {outputs['upper'][0, k, j]:+.6g}]"
            )
        print(line)


if __name__ == "__main__":
    main(*sys.argv[1:3])
