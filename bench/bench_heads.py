"""Several horizons and quantiles: what an epoch of a model with heads costs against the same
model's single forecast, and the single forecast's epoch against another checkout's (the
code before heads existed), all in the same run of this script.

    .venv/bin/python bench/bench_heads.py                                # heads against one forecast
    git worktree add /tmp/before <commit>                                  # the code before heads
    .venv/bin/python bench/bench_heads.py --before /tmp/before/scripts   # ... and the default, before/after

Generates `--rows` one-minute bars once; each measurement is a fresh process (one torch
thread, as a train job) that prepares the arrays with its variant's horizons and trains
`--epochs` epochs of the default model (LSTM 2x64, seq 60, batch 128, early stopping off)
with train.amp `--amp`, and reports its median epoch seconds. Variants, interleaved over
`--reps` repetitions, each starting with the next variant (median of each):

- `single`: train.horizon 1, no quantiles (the default), this checkout;
- `heads`: train.horizons [1, 5, 15, 60] and train.quantiles [0.05, 0.5, 0.95] (12 outputs);
- `before`: `single` run with the rnnfleet of `--before` (a checkout's scripts folder).

Prints each variant's median epoch and the ratios heads / single and single / before, and
appends one JSON line to bench/out/heads.jsonl.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent

HEADS = {"horizons": [1, 5, 15, 60], "quantiles": [0.05, 0.5, 0.95]}
# The targets: an epoch of heads at most this many times a single forecast's, and
# the default not slower than before (at most this ratio, the machine's run-to-run noise).
HEADS_TARGET, DEFAULT_TARGET = 1.3, 1.02


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--amp", default="auto", help="train.amp: auto, off, bf16")
    parser.add_argument("--before", help="the scripts folder of another checkout: its single forecast, too")
    parser.add_argument("--out", default=str(BENCH / "out"))
    parser.add_argument("--worker", nargs=3, metavar=("SCRIPTS", "CSV", "VARIANT"), help=argparse.SUPPRESS)
    return parser.parse_args()


def epoch_seconds(scripts: str, csv_path: str, variant: str, epochs: int, amp: str) -> float:
    """In this process, with rnnfleet from `scripts`: the median epoch of one training."""
    sys.path.insert(0, scripts)
    import torch

    from rnnfleet.prep.prepare import prepare_dataset
    from rnnfleet.train.evaluate import train_and_evaluate

    torch.set_num_threads(1)
    heads = HEADS if variant == "heads" else {}
    horizon = heads.get("horizons", 1)
    arrays, _ = prepare_dataset(csv_path, seq_len=60, horizon=horizon, val_fraction=0.15)
    model = {"cell": "lstm", "hidden_size": 64, "num_layers": 2, "dropout": 0.1}
    train = {"seq_len": 60, "batch_size": 128, "epochs": epochs, "lr": 1e-3, "patience": epochs, "seed": 0}
    train |= {"amp": amp, **({"quantiles": heads["quantiles"]} if heads else {})}
    result = train_and_evaluate(arrays, model, loop_settings(train), torch.device("cpu"))
    return statistics.median(epoch["seconds"] for epoch in result.trained.history)


def loop_settings(train: dict):
    """The loop's settings as the imported checkout takes them: a LoopSettings, or the dict
    itself in a checkout from before the loop typed its settings (--before)."""
    try:
        from rnnfleet.train.loop import LoopSettings
    except ImportError:
        return train
    return LoopSettings.of(train)


def measure(scripts: str, csv_path: str, variant: str, args) -> float:
    """epoch_seconds in a fresh process (so that each checkout imports its own rnnfleet)."""
    command = [sys.executable, __file__, "--worker", scripts, csv_path, variant]
    command += ["--epochs", str(args.epochs), "--amp", args.amp]
    done = subprocess.run(
        command, check=True, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    args = parse_args()
    if args.worker:
        print(epoch_seconds(*args.worker, args.epochs, args.amp))
        return
    sys.path.insert(0, str(REPO / "scripts"))
    from bench_update import append_record

    from rnnfleet.synthetic import write_synthetic_csv

    variants = {"single": str(REPO / "scripts"), "heads": str(REPO / "scripts")}
    if args.before:
        variants["before"] = str(Path(args.before).resolve())
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory(prefix="rnnfleet-heads-") as folder:
        csv_path = str(write_synthetic_csv(Path(folder) / "A_1m.csv", args.rows, 1))
        names = list(variants)
        for rep in range(args.reps):
            for name in names[rep % len(names) :] + names[: rep % len(names)]:  # each variant first in turn
                scripts = variants[name]
                seconds[name].append(measure(scripts, csv_path, "heads" if name == "heads" else "single", args))
                print(f"rep {rep + 1}: {name:6s} {seconds[name][-1]:.3f} s an epoch", flush=True)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    record = {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": args.rows, "amp": args.amp, "median": median}
    record["heads_ratio"] = median["heads"] / median["single"]
    print(f"\nheads / single: {record['heads_ratio']:.3f} (target at most {HEADS_TARGET})")
    if "before" in median:
        record["default_ratio"] = median["single"] / median["before"]
        print(f"single / before: {record['default_ratio']:.3f} (target at most {DEFAULT_TARGET}: not slower)")
    append_record(args.out, "heads", record)


if __name__ == "__main__":
    main()
