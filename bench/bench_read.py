"""Preprocess time and peak memory of a 1,000,000-row bars file, in CSV and in Parquet.

    .venv/bin/python bench/bench_read.py [--rows 1000000] [--repeats 2]

Writes the same bars as a headered CSV, a headerless Binance-style CSV (12 columns, epoch
ms) and a Parquet file with three extra columns, then measures, each in a fresh process:
- baseline: what a user would write, `pandas.read_csv` / `pandas.read_parquet` of the whole
  file with its time column parsed;
- read: rnnfleet's reading alone (`rnnfleet.bars.formats.read_bars`: sniff, six columns, UTC times,
  sorted), the same work as the baseline;
- preprocess: the whole preprocess job (`preprocess_one`: read, clean, gaps, features,
  split, normalisation, array file). Prints seconds, peak resident memory above the process's state
after imports (Linux: /proc/self/status VmHWM, reset after the imports), both relative to the file's size, and the ratio
to the baseline measured in the same run (median of the repeats).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))


def status_bytes(field: str) -> int:
    """VmRSS (now) or VmHWM (peak) from /proc/self/status, in bytes."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024


def reset_peak() -> int:
    """Start counting the peak from now (Linux: clear_refs 5 resets VmHWM); returns resident bytes now."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
    return status_bytes("VmRSS")


def measure_one(kind: str, path: str, out_dir: str) -> dict:
    """Runs in its own process: imports first, then the timed work."""
    import pandas as pd  # noqa: F401  (imported before the baseline memory is taken)
    import pyarrow.parquet  # noqa: F401

    from rnnfleet.bars.formats import read_bars
    from rnnfleet.runner.jobs import preprocess_one

    before = reset_peak()
    started = time.perf_counter()
    if kind == "read":
        read_bars(path)
    elif kind == "preprocess":
        preprocess_one(path, str(Path(out_dir) / "arrays.npz"), seq_len=60, horizon=1, val_fraction=0.2)
    elif path.endswith(".parquet"):
        pd.read_parquet(path)
    elif "binance" in path:
        frame = pd.read_csv(path, header=None)
        frame[0] = pd.to_datetime(frame[0], unit="ms", utc=True)
    else:
        frame = pd.read_csv(path)
        frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True)
    return {"seconds": time.perf_counter() - started, "peak_bytes": status_bytes("VmHWM") - before}


def write_files(rows: int, folder: Path) -> dict[str, Path]:
    import pandas as pd

    from rnnfleet.synthetic import synthetic_bars

    bars = synthetic_bars(rows, seed=1)
    timestamps = pd.to_datetime(bars["timestamp"], utc=True)
    files = {"csv (header, ISO times)": folder / "bench_1m.csv"}
    bars.to_csv(files["csv (header, ISO times)"], index=False, float_format="%.6f")
    files["csv (binance, 12 columns)"] = folder / "binance_1m.csv"
    open_ms = timestamps.astype("datetime64[ms, UTC]").astype("int64")
    numbers = bars[["open", "high", "low", "close", "volume"]]
    binance = pd.DataFrame({"t": open_ms, **numbers, "close_t": open_ms + 59_999, "q": numbers["volume"]})
    binance = binance.assign(n=7, tb=numbers["volume"] / 2, tq=numbers["volume"], ignore=0)
    binance.to_csv(files["csv (binance, 12 columns)"], index=False, header=False, float_format="%.6f")
    files["parquet (+3 columns)"] = folder / "bench_1m.parquet"
    extra = {"symbol": "BTCUSDT", "trades": 7, "vwap": bars["close"]}
    pd.DataFrame({"timestamp": timestamps, **numbers, **extra}).to_parquet(files["parquet (+3 columns)"])
    return files


def run_measure(kind: str, path: Path, out_dir: str) -> dict:
    result = subprocess.run(
        [sys.executable, __file__, "--measure", kind, str(path), out_dir], capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--measure", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure_one(*args.measure)))
        return
    with tempfile.TemporaryDirectory() as folder:
        print(f"writing {args.rows:,} rows in each layout ...", flush=True)
        files = write_files(args.rows, Path(folder))
        print(
            f"{'file':28} {'MB':>7} {'variant':>10} {'seconds':>8} {'peak MB':>8} {'peak/file':>9} "
            f"{'x baseline time':>15} {'x baseline mem':>14}"
        )
        for label, path in files.items():
            size = path.stat().st_size
            medians = {}
            for kind in ("baseline", "read", "preprocess"):
                runs = [run_measure(kind, path, folder) for _ in range(args.repeats)]
                medians[kind] = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
            for kind, measured in medians.items():
                base = medians["baseline"]
                print(
                    f"{label:28} {size / 1e6:7.1f} {kind:>10} {measured['seconds']:8.2f} "
                    f"{measured['peak_bytes'] / 1e6:8.1f} {measured['peak_bytes'] / size:9.2f} "
                    f"{measured['seconds'] / base['seconds']:15.2f} "
                    f"{measured['peak_bytes'] / max(base['peak_bytes'], 1):14.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
