"""The morning run: one more day of bars for every dataset, its models updated and the fleet's
forecasts written, against a full re-train of the same bars, in the same run of this script;
and the morning's cost at two history lengths (it should follow the new bars, not the history).

    .venv/bin/python bench/bench_morning.py                                 # 8 datasets, 30 and 180 days
    .venv/bin/python bench/bench_morning.py --datasets 64 --days 90         # the issue's size (long)
    .venv/bin/python bench/bench_morning.py --noop-datasets 1000 --days     # a no-op morning only
    .venv/bin/python bench/bench_morning.py --days 30 180 --fixed-parts 5 4  # parts of 5 and 4 days

For each --days D: N datasets of D day files (data/<dataset>-1m-<day>.csv, 1,440 bars a day,
datasets.files) are trained by one real run; one more day is written for each; the folder is
copied twice and both copies run `snakemake` on the same bars:
  morning  the defaults: only the new day file is read (prep/bars/ keeps the bars of the others),
           every model is updated, results/forecasts.csv written;
  full     update.enabled false and no bars cache: every file read, every model trained from
           scratch (what the same morning costs without either).
Then the morning folder runs `snakemake` once more with nothing new (a no-op morning).
Prints wall times, the train and preprocess jobs' summed times, the mean test skill of each,
the ratios, the validation and test windows and the test skill interval's width, and the
morning's wall time at the longest history over that at the shortest.
--morning-only: no full side (the morning's history ratio alone, without the full re-trains' time).
--fixed-parts V T: both runs with preprocess.val_bars and test_bars of V and T days (parts that
do not grow with the history) instead of the default fractions.
--noop-datasets K: K tiny datasets (one 200-bar file each) trained, then the wall time of a run
with nothing new. Appends one JSON line to bench/out/morning.jsonl.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml
from bench_update import BARS_PER_DAY, append_record, run_summary, snakemake, workflow_config, write_day

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "scripts"))

from rnnfleet.synthetic import synthetic_bars, write_synthetic_csv  # noqa: E402

# Targets of the issue: the morning costs at most this share of a full re-train, with a test
# skill within this of it; at the longest history at most this many times the shortest.
COST_TARGET, SKILL_TARGET, HISTORY_TARGET = 0.10, 0.02, 1.25


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", type=int, default=8)
    parser.add_argument("--days", type=int, nargs="*", default=[30, 180], help="history lengths, in days")
    parser.add_argument("--epochs", type=int, default=10, help="train.epochs of a full fit (early stopping on)")
    parser.add_argument("--noop-datasets", type=int, default=0, help="also time a no-op morning of this many")
    parser.add_argument(
        "--fixed-parts", type=int, nargs=2, metavar=("VAL_DAYS", "TEST_DAYS"), help="validation and test parts in days"
    )
    parser.add_argument(
        "--morning-only",
        action="store_true",
        help="skip the full re-train of the same bars (the morning's history ratio only, far quicker)",
    )
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    parser.add_argument("--out", default=str(BENCH / "out"))
    return parser.parse_args()


def job_seconds(folder: Path, rule: str) -> float:
    """The summed wall time of the run's jobs of rule (Snakemake's benchmark files)."""
    return sum(
        float(next(csv.DictReader(path.open(), delimiter="\t"))["s"])
        for path in (folder / "benchmarks" / rule).glob("*.tsv")
    )


def files_read(folder: Path) -> int:
    """Of the run's preprocess jobs, the bar files read (not taken from the bars cache)."""
    counted = 0
    for log in (folder / "logs" / "preprocess").glob("*.log"):
        found = re.search(r": (\d+) file\(s\) read \(", log.read_text())
        counted += int(found.group(1)) if found else 0
    return counted


def part_summary(folder: Path) -> dict:
    """The run's validation and test windows (mean over datasets) and the mean width of the
    test skill's 95% interval: what a longer part buys, against what it costs the morning."""
    metrics = [json.loads(path.read_text()) for path in sorted((folder / "metrics").glob("*.json"))]
    return {
        "val_windows": statistics.mean(m["val_windows"] for m in metrics),
        "test_windows": statistics.mean(m["test_windows"] for m in metrics),
        "test_interval_width": statistics.mean(m["test_skill_high"] - m["test_skill_low"] for m in metrics),
    }


def forecast_rows(folder: Path) -> int:
    with open(folder / "results" / "forecasts.csv") as table:
        return sum(1 for row in csv.DictReader(table) if row["forecast"])


def one_history(args, work: Path, days: int) -> dict:
    base = work / f"days{days}" / "base"
    data = base / "data"
    data.mkdir(parents=True)
    config = workflow_config(args)
    if args.fixed_parts:
        val_days, test_days = args.fixed_parts
        config["preprocess"] = {"val_bars": val_days * BARS_PER_DAY, "test_bars": test_days * BARS_PER_DAY}
    (base / "config.yaml").write_text(yaml.safe_dump(config))
    names = [f"S{index:03d}" for index in range(args.datasets)]
    history = {name: synthetic_bars(BARS_PER_DAY * (days + 1), 1000 + index) for index, name in enumerate(names)}
    for name, bars in history.items():
        for day in range(days):
            write_day(data, name, bars, day)
    first = snakemake(base, args.cores)
    print(f"{args.datasets} datasets x {days} days: first fit of every model {first:.1f} s")
    for name, bars in history.items():
        write_day(data, name, bars, days)
    runs = {}
    for variant in ("morning",) if args.morning_only else ("full", "morning"):
        folder = base.parent / variant
        shutil.copytree(base, folder, symlinks=True)
        for old in (folder / "benchmarks").glob("*/*.tsv"):
            old.unlink()  # only this run's jobs are summed
        if variant == "full":
            (folder / "config.yaml").write_text(yaml.safe_dump({**config, "update": {"enabled": False}}))
            shutil.rmtree(folder / "prep" / "bars")
        seconds = snakemake(folder, args.cores)
        runs[variant] = {
            **run_summary(folder, seconds),
            **part_summary(folder),
            "preprocess_job_seconds": job_seconds(folder, "preprocess"),
            "forecasts": forecast_rows(folder),
            "files_read": files_read(folder),
        }
    started = time.perf_counter()
    snakemake(base.parent / "morning", args.cores)
    noop = time.perf_counter() - started
    morning = runs["morning"]
    full = runs.get("full")
    differences = [morning["test_skill"][name] - full["test_skill"][name] for name in names] if full else [0.0]
    return {
        "days": days,
        "first_fit_seconds": first,
        "runs": {variant: {k: v for k, v in run.items() if k != "test_skill"} for variant, run in runs.items()},
        "mean_test_skill": {variant: statistics.mean(run["test_skill"].values()) for variant, run in runs.items()},
        "cost_ratio": morning["seconds"] / full["seconds"] if full else None,
        "skill_difference_worst": max(differences, key=abs) if full else None,
        "noop_seconds": noop,
    }


def noop_morning(args, work: Path) -> dict:
    folder = work / "noop"
    (folder / "data").mkdir(parents=True)
    for index in range(args.noop_datasets):
        write_synthetic_csv(folder / "data" / f"N{index:04d}_1m.csv", 200, seed=index)
    config = {
        "data_dir": "data",
        "model": {"cell": "gru", "hidden_size": 4, "num_layers": 1, "dropout": 0.0},
        "train": {"seq_len": 8, "batch_size": 64, "epochs": 1, "threads": 1},
        "evaluate": {"bootstrap": 100},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    first = snakemake(folder, args.cores)
    started = time.perf_counter()
    snakemake(folder, args.cores)
    return {"datasets": args.noop_datasets, "first_run_seconds": first, "noop_seconds": time.perf_counter() - started}


def main() -> None:
    args = parse_args()
    work = Path(tempfile.mkdtemp(prefix="rnnfleet-bench-morning-"))
    result: dict = {
        "datasets": args.datasets,
        "cores": args.cores,
        "fixed_parts_days": args.fixed_parts,
        "morning_only": args.morning_only,
        "histories": [],
    }
    try:
        for days in args.days:
            history = one_history(args, work, days)
            result["histories"].append(history)
            print(
                f"  {'':8} {'run wall':>9} {'preprocess':>11} {'files read':>11} {'train jobs':>11} "
                f"{'their loops':>12} {'forecasts':>10} {'test skill':>11}"
            )
            for variant, run in history["runs"].items():
                print(
                    f"  {variant:8} {run['seconds']:8.1f}s {run['preprocess_job_seconds']:10.1f}s {run['files_read']:11d} "
                    f"{run['train_job_seconds']:10.1f}s {run['train_seconds']:11.1f}s {run['forecasts']:10d} "
                    f"{history['mean_test_skill'][variant]:+11.4f}  {', '.join(run['made'])}"
                )
            morning = history["runs"]["morning"]
            print(
                f"  parts: {morning['val_windows']:,.0f} validation and {morning['test_windows']:,.0f} test windows a "
                f"dataset; test skill's 95% interval {morning['test_interval_width']:.4f} wide (mean)"
            )
            if history["cost_ratio"] is not None:
                print(
                    f"  morning / full: {history['cost_ratio']:.3f} (target <= {COST_TARGET}); test skill, worst "
                    f"dataset morning - full: {history['skill_difference_worst']:+.4f} (target within "
                    f"{SKILL_TARGET}); no-op morning {history['noop_seconds']:.1f} s"
                )
        if len(result["histories"]) > 1:
            shortest, longest = result["histories"][0], result["histories"][-1]
            ratio = longest["runs"]["morning"]["seconds"] / shortest["runs"]["morning"]["seconds"]
            result["history_ratio"] = ratio
            print(
                f"morning at {longest['days']} days / at {shortest['days']} days: {ratio:.2f} "
                f"(target <= {HISTORY_TARGET})"
            )
        if args.noop_datasets:
            result["noop"] = noop_morning(args, work)
            print(
                f"no-op morning of {args.noop_datasets} datasets: {result['noop']['noop_seconds']:.1f} s "
                f"(their first run {result['noop']['first_run_seconds']:.1f} s)"
            )
    finally:
        shutil.rmtree(work)
    append_record(args.out, "morning", result)


if __name__ == "__main__":
    main()
