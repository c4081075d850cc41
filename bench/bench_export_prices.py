"""How close an exported ONNX file's forecasts are to rnnfleet predict's at real prices.

    .venv/bin/python bench/bench_export_prices.py [--rows 4000] [--epochs 3]

Takes the last `--rows` minutes of BTCUSDT (close about 57,000) and of DOGEUSDT divided by
2,000 (close about 0.0002) from ../shared/data/realfleet-binance-2021.tar.xz, trains a small
LSTM on each with the real snakemake (seq 30), exports it and feeds the file the last 256
windows two ways: the bars' own float64 values (as MetaTrader 5, C# and C++ hold prices) and
the bars rounded to float32 first (a platform that keeps prices in float32). Prints, for each,
the largest difference from rnnfleet predict on the same bars, in the target's std for the
forecast and in price units for the forecast close, and the ratio of the two ways.
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "tests"))
FLEET = REPO.parent / "shared" / "data" / "realfleet-binance-2021.tar.xz"
PAIRS = {"BTC_1m": ("BTCUSDT", 1.0), "TINY_1m": ("DOGEUSDT", 1 / 2000)}
WINDOWS = 256


def write_pairs(folder: Path, rows: int) -> None:
    import pandas as pd

    (folder / "data").mkdir()
    with tarfile.open(FLEET) as archive:
        for dataset, (pair, scale) in PAIRS.items():
            member = next(name for name in archive.getnames() if name.endswith(f"/{pair}_1m.csv"))
            bars = pd.read_csv(archive.extractfile(member)).tail(rows)
            for column in ("open", "high", "low", "close"):
                bars[column] = (bars[column] * scale).round(10)
            bars.to_csv(folder / "data" / f"{dataset}.csv", index=False)


def differences(folder: Path, dataset: str, rounded: bool) -> tuple[float, float]:
    """(largest forecast difference in the target's std, largest forecast-close difference)."""
    from rnnfleet.forecast import export_onnx
    from rnnfleet.forecast.predict import forecast_frame
    from rnnfleet.prep.prepare import read_clean_bars
    from rnnfleet.train.modelfile import load_checkpoint
    from rnnfleet.train.models import rebuild_model

    model_path = folder / "models" / f"{dataset}.pt"
    checkpoint = load_checkpoint(model_path)
    bars = read_clean_bars(folder / "data" / f"{dataset}.csv", None, 0.01)
    plan = export_onnx.export_plan(checkpoint, {})
    network = rebuild_model(checkpoint, {}, "cpu", model_path)
    model_bytes = export_onnx.onnx_bytes(export_onnx.ForecastGraph(network, plan).eval(), "")
    reference = forecast_frame(network, checkpoint, bars, WINDOWS, dataset, {})
    windows = export_onnx.input_windows(bars, WINDOWS, plan.window_bars)
    if rounded:
        windows = windows.astype(np.float32).astype(np.float64)
    close = bars["close"].to_numpy()[-WINDOWS:]
    columns = export_onnx.predict_columns(export_onnx.run_onnx(model_bytes, windows), plan, close)
    forecast = np.max(np.abs(columns["forecast"] - reference["forecast"].to_numpy())) / float(plan.scales[0])
    return float(forecast), float(np.max(np.abs(columns["forecast_close"] - reference["forecast_close"].to_numpy())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    from conftest import snakemake, write_config

    with tempfile.TemporaryDirectory(prefix="rnnfleet-bench-export-prices-") as work:
        folder = Path(work)
        write_pairs(folder, args.rows)
        write_config(folder, data_dir="data", train={"epochs": args.epochs, "seq_len": 30, "batch_size": 256})
        snakemake(folder, "--cores", "2")
        print(f"{'dataset':<8} {'fed':<18} {'forecast (of std)':>18} {'forecast close':>15}")
        for dataset in PAIRS:
            exact, rounded = differences(folder, dataset, False), differences(folder, dataset, True)
            print(f"{dataset:<8} {'float64 bars':<18} {exact[0]:>18.3g} {exact[1]:>15.3g}")
            print(f"{dataset:<8} {'float32-rounded':<18} {rounded[0]:>18.3g} {rounded[1]:>15.3g}")
            print(
                f"{dataset:<8} {'ratio rounded/own':<18} {rounded[0] / exact[0]:>18.0f}x {rounded[1] / exact[1]:>14.0f}x"
            )


if __name__ == "__main__":
    main()
