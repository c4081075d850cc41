"""One forecast's latency through an exported ONNX file (ONNX Runtime) against rnnfleet predict.

    .venv/bin/python bench/bench_export.py
    .venv/bin/python bench/bench_export.py --old-runtime /path/to/other-venv/bin/python   # + an older runtime

Trains the default model (LSTM 2x64, seq 60, one horizon, one epoch: the weights do not
change the cost) on `--rows` synthetic one-minute bars, exports it (rnnfleet.forecast.export_onnx,
which checks it against rnnfleet predict first), and times, each the median of `--reps`
rounds that run each measurement in turn (the machine's load moves both sides alike), one
torch thread and one ONNX Runtime thread:

- `onnx`: InferenceSession.run on the last window, and on the last `--batch` windows at once;
- `predict`: rnnfleet predict's forecasts of the same bars in this process, the model loaded
  and the bars read (rnnfleet.forecast.predict.forecast_frame, --last 1 and --last batch: features,
  normalisation, network, intervals, the table);
- `command`: a fresh process each: `rnnfleet predict --last 1` on the bars file against
  examples/onnx/forecast.py (onnxruntime, numpy and pandas only) on the same file.

--old-runtime PYTHON: also runs the file with the onnxruntime of another Python (e.g. a venv
with onnxruntime==1.15.1 and numpy<2, standing in for MetaTrader's older runtime) on the
same windows and prints the largest difference from this one's outputs.
Appends one JSON line to bench/out/export.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO / "scripts"))

OLD_RUNTIME_RUN = """
import sys, numpy as np, onnxruntime
session = onnxruntime.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
names = [output.name for output in session.get_outputs()]
windows = np.load(sys.argv[2])
np.savez(sys.argv[3], **dict(zip(names, session.run(names, {"bars": windows}))))
print(onnxruntime.__version__)
"""


def interleaved_medians(runs: dict, reps: int, warm_up: bool = True) -> dict[str, float]:
    """{name: median seconds of runs[name]()} over reps rounds, each round running every one
    in turn, so that the machine's load moves all of them alike."""
    if warm_up:
        for run in runs.values():
            run()
    times = {name: [] for name in runs}
    for _ in range(reps):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def trained_model(folder: Path, rows: int) -> tuple[Path, Path]:
    """(model file, bars CSV): the default model trained one epoch on synthetic bars."""
    import torch

    from rnnfleet.prep.prepare import prepare_dataset
    from rnnfleet.synthetic import synthetic_bars
    from rnnfleet.train.evaluate import train_and_evaluate
    from rnnfleet.train.loop import LoopSettings
    from rnnfleet.train.modelfile import build_checkpoint, calibration_record, save_checkpoint

    csv_path = folder / "BENCH_1m.csv"
    synthetic_bars(rows, seed=3).to_csv(csv_path, index=False)
    model = {"cell": "lstm", "hidden_size": 64, "num_layers": 2, "dropout": 0.1}
    train = {"seq_len": 60, "batch_size": 128, "epochs": 1, "lr": 0.001, "patience": 3, "seed": 0, "amp": "off"}
    arrays, _ = prepare_dataset(csv_path, 60, 1, val_fraction=0.2)
    result = train_and_evaluate(arrays, model, LoopSettings.of(train), torch.device("cpu"))
    checkpoint = build_checkpoint(
        "BENCH_1m", result.trained, arrays, model, train, {"val_loss": result.evaluated.val_loss}
    )
    checkpoint["calibration"] = calibration_record(result.evaluated)
    save_checkpoint(checkpoint, folder / "BENCH_1m.pt")
    return folder / "BENCH_1m.pt", csv_path


def fresh_process(command: list[str]):
    env = {**os.environ, "PYTHONPATH": str(REPO / "scripts")}
    return lambda: subprocess.run(command, check=True, capture_output=True, env=env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3000, help="bars of the synthetic dataset (default 3000)")
    parser.add_argument("--batch", type=int, default=1000, help="windows of the batch (default 1000)")
    parser.add_argument("--reps", type=int, default=20, help="runs per in-process measurement (median; default 20)")
    parser.add_argument("--command-reps", type=int, default=3, help="fresh processes per command (median; default 3)")
    parser.add_argument("--old-runtime", metavar="PYTHON", help="a Python with an older onnxruntime to run the file")
    args = parser.parse_args()

    import numpy as np
    import onnxruntime
    import torch

    from rnnfleet.forecast.export_onnx import export_model, input_windows
    from rnnfleet.forecast.predict import forecast_frame
    from rnnfleet.prep.prepare import read_clean_bars
    from rnnfleet.train.modelfile import load_checkpoint
    from rnnfleet.train.models import rebuild_model

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="rnnfleet-bench-export-") as work:
        folder = Path(work)
        model_path, csv_path = trained_model(folder, args.rows)
        bars = read_clean_bars(csv_path, None, 0.0)
        exported = export_model(model_path, bars, folder / "BENCH_1m.onnx")
        checkpoint = load_checkpoint(model_path)
        model = rebuild_model(checkpoint, {})
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(str(exported.path), options, providers=["CPUExecutionProvider"])
        batch = input_windows(bars, args.batch, 61)
        one = batch[-1:]
        figures = interleaved_medians(
            {
                "onnx_one": lambda: session.run(None, {"bars": one}),
                "predict_one": lambda: forecast_frame(model, checkpoint, bars, 1),
                "onnx_batch": lambda: session.run(None, {"bars": batch}),
                "predict_batch": lambda: forecast_frame(model, checkpoint, bars, args.batch),
            },
            args.reps,
        )
        predict_command = [sys.executable, "-m", "rnnfleet.cli", "predict", "--model", str(model_path)]
        predict_command += ["--csv", str(csv_path), "--out", str(folder / "f.csv"), "--last", "1"]
        example = [sys.executable, str(REPO / "examples" / "onnx" / "forecast.py"), str(exported.path), str(csv_path)]
        commands = {"command_onnx": fresh_process(example), "command_predict": fresh_process(predict_command)}
        figures |= interleaved_medians(commands, args.command_reps, warm_up=False)  # nothing to warm up
        old = {}
        if args.old_runtime:
            np.save(folder / "windows.npy", batch)
            version = subprocess.run(
                [args.old_runtime, "-c", OLD_RUNTIME_RUN, str(exported.path), str(folder / "windows.npy"),
                 str(folder / "old.npz")],
                check=True, capture_output=True, text=True,
            ).stdout.strip()  # fmt: skip
            new_outputs = dict(
                zip([o.name for o in session.get_outputs()], session.run(None, {"bars": batch}), strict=True)
            )
            old_outputs = np.load(folder / "old.npz")
            scale = float(np.asarray(checkpoint["normalisation"]["target_std"]).min())
            difference = max(
                float(np.max(np.abs(old_outputs[name] - values) / (np.abs(values) if "close" in name else scale)))
                for name, values in new_outputs.items()
            )
            old = {"old_runtime": version, "old_runtime_difference": difference}
    ms = {name: seconds * 1000 for name, seconds in figures.items()}
    print(f"default model (LSTM 2x64, seq 60), {args.rows} bars; {exported.comparison.text()}")
    print(f"{'':34}{'ONNX Runtime':>14}{'rnnfleet predict':>18}{'ratio':>8}")
    for label, onnx_key, predict_key in (
        ("one window (in process)", "onnx_one", "predict_one"),
        (f"batch of {args.batch} windows (in process)", "onnx_batch", "predict_batch"),
        ("one forecast, a fresh process", "command_onnx", "command_predict"),
    ):
        ratio = figures[predict_key] / figures[onnx_key]
        print(f"{label:34}{ms[onnx_key]:>11.3f} ms{ms[predict_key]:>15.3f} ms{ratio:>7.1f}x")
    if old:
        print(f"onnxruntime {old['old_runtime']} on the same {args.batch} windows: largest difference "
              f"{old['old_runtime_difference']:.3g} (of the target's std; closes relative)")  # fmt: skip
    record = {
        "bench": "export",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "rows": args.rows,
        "batch": args.batch,
        "reps": args.reps,
        "onnxruntime": onnxruntime.__version__,
        "torch": torch.__version__,
        "milliseconds": ms,
        **old,
    }
    (BENCH / "out").mkdir(exist_ok=True)
    with open(BENCH / "out" / "export.jsonl", "a") as handle:
        handle.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
