"""Updates: a run that updates every model with one new day of bars, against a full re-train
of the same data in the same run of this script (rnnfleet.train.updating; docs/running.md).

    .venv/bin/python bench/bench_update.py                          # 8 datasets x 20 days, this machine
    .venv/bin/python bench/bench_update.py --datasets 300 --days 30  # the issue's size

Each dataset is a symbol of day files (data/<dataset>-1m-<day>.csv, 1,440 generated bars a
day, datasets.files). Steps: one real run trains every model on `days` days; one more day is
written for each; the folder is copied twice and both copies run `snakemake` on the same
bars: `update` with the default `update:` settings (every model is updated), `full` with
update.enabled false (every model trained from scratch, the baseline). Prints each run's
wall time, its train jobs' summed wall time and training seconds, the mean test skill on
the (same) held-out test period, the worst per-dataset difference, and the ratios against
the baseline. Appends one JSON line to bench/out/update.jsonl.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO / "scripts"))

from rnnfleet.synthetic import synthetic_bars  # noqa: E402

BARS_PER_DAY = 1440
# Targets of the issue: the update run costs at most this share of the full re-train, with a
# test skill within this of it.
COST_TARGET, SKILL_TARGET = 0.20, 0.02


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", type=int, default=8)
    parser.add_argument("--days", type=int, default=20, help="days of bars the models are first trained on")
    parser.add_argument("--epochs", type=int, default=10, help="train.epochs of a full fit (early stopping on)")
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    parser.add_argument("--out", default=str(BENCH / "out"))
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    return parser.parse_args()


def workflow_config(args) -> dict:
    return {
        "data_dir": "data",
        "datasets": {"files": "{dataset}-1m-*"},
        "model": {"cell": "lstm", "hidden_size": 32, "num_layers": 1, "dropout": 0.0},
        "train": {"seq_len": 30, "batch_size": 256, "epochs": args.epochs, "patience": 3, "threads": 1},
        "evaluate": {"bootstrap": 200},
    }


def write_day(data: Path, dataset: str, bars, day: int) -> None:
    part = bars.iloc[day * BARS_PER_DAY : (day + 1) * BARS_PER_DAY]
    part.to_csv(data / f"{dataset}-1m-{day:02d}.csv", index=False, float_format="%.6f")


def snakemake(folder: Path, cores: int) -> float:
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(folder),
        "--cores",
        str(cores),
    ]
    started = time.perf_counter()
    result = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"snakemake in {folder} failed:\n{result.stderr[-3000:]}")
    return seconds


def append_record(out: str, name: str, record: dict) -> None:
    """One JSON line appended to <out>/<name>.jsonl: the benches' history of figures."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{name}.jsonl", "a") as lines:
        lines.write(json.dumps(record) + "\n")


def train_job_seconds(folder: Path) -> float:
    """The summed wall time of the run's train jobs (Snakemake's benchmark files)."""
    return sum(
        float(next(csv.DictReader(path.open(), delimiter="\t"))["s"])
        for path in (folder / "benchmarks" / "train").glob("*.tsv")
    )


def run_summary(folder: Path, seconds: float) -> dict:
    metrics = {path.stem: json.loads(path.read_text()) for path in sorted((folder / "metrics").glob("*.json"))}
    return {
        "seconds": seconds,
        "train_job_seconds": train_job_seconds(folder),
        "train_seconds": sum(m["train_seconds"] for m in metrics.values()),
        "made": sorted({m["made"] for m in metrics.values()}),
        "test_skill": {name: m["test_skill"] for name, m in metrics.items()},
        "train_windows": statistics.mean(m.get("update_train_windows", m["train_windows"]) for m in metrics.values()),
    }


def main() -> None:
    args = parse_args()
    work = Path(tempfile.mkdtemp(prefix="rnnfleet-bench-update-"))
    base = work / "base"
    data = base / "data"
    data.mkdir(parents=True)
    (base / "config.yaml").write_text(yaml.safe_dump(workflow_config(args)))
    names = [f"S{index:03d}" for index in range(args.datasets)]
    history = {name: synthetic_bars(BARS_PER_DAY * (args.days + 1), 1000 + index) for index, name in enumerate(names)}
    for name, bars in history.items():
        for day in range(args.days):
            write_day(data, name, bars, day)
    print(f"{args.datasets} datasets x {args.days} days ({args.days * BARS_PER_DAY:,} bars each), {args.cores} cores")
    first = snakemake(base, args.cores)
    print(f"first fit of every model: {first:.1f} s")
    for name, bars in history.items():
        write_day(data, name, bars, args.days)
    runs = {}
    for variant in ("full", "update"):
        folder = work / variant
        shutil.copytree(base, folder, symlinks=True)
        if variant == "full":
            config = yaml.safe_load((folder / "config.yaml").read_text())
            config["update"] = {"enabled": False}
            (folder / "config.yaml").write_text(yaml.safe_dump(config))
        runs[variant] = run_summary(folder, snakemake(folder, args.cores))
    full, update = runs["full"], runs["update"]
    differences = [update["test_skill"][name] - full["test_skill"][name] for name in names]
    mean_skill = {variant: statistics.mean(run["test_skill"].values()) for variant, run in runs.items()}
    result = {
        "datasets": args.datasets,
        "days": args.days,
        "cores": args.cores,
        "first_fit_seconds": first,
        "runs": {
            variant: {key: value for key, value in run.items() if key != "test_skill"} for variant, run in runs.items()
        },
        "mean_test_skill": mean_skill,
        "cost_ratio_run": update["seconds"] / full["seconds"],
        "cost_ratio_train_jobs": update["train_job_seconds"] / full["train_job_seconds"],
        "cost_ratio_training": update["train_seconds"] / full["train_seconds"],
        "skill_difference_mean": statistics.mean(differences),
        "skill_difference_worst": min(differences, key=lambda value: -abs(value)),
    }
    print(f"{'':8} {'run wall':>9} {'train jobs':>11} {'training':>9} {'windows':>8} {'mean test skill':>16}  made")
    for variant, run in runs.items():
        print(
            f"{variant:8} {run['seconds']:8.1f}s {run['train_job_seconds']:10.1f}s {run['train_seconds']:8.1f}s "
            f"{run['train_windows']:8.0f} {mean_skill[variant]:+16.4f}  {', '.join(run['made'])}"
        )
    print(
        f"update / full: run {result['cost_ratio_run']:.2f}, train jobs {result['cost_ratio_train_jobs']:.2f}, "
        f"training {result['cost_ratio_training']:.2f} (target <= {COST_TARGET})"
    )
    print(
        f"test skill, update - full: mean {result['skill_difference_mean']:+.4f}, worst dataset "
        f"{result['skill_difference_worst']:+.4f} (target within {SKILL_TARGET})"
    )
    append_record(args.out, "update", result)
    if args.keep:
        print(f"work folder: {work}")
    else:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
