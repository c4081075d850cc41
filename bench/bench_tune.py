"""`snakemake tune` on generated fleets: does the search find settings that beat the defaults
on datasets it never trained on where there is something to find, and does its verdict say
"no better" where there is nothing? And what does a search cost against one training of a
fleet?

- `momentum`: every dataset's returns carry a part of the return before (x_t = m x_{t-1}
  + noise, m = --momentum, 0.4; each dataset its own scale), learnable, but not well at "the
  defaults" here: the repo's model (LSTM 2x64, dropout 0.1) at a learning rate of 0.1, 100
  times the repo's;
- `noise`: independent returns: no setting can beat the baseline but by luck (an LSTM 1x16).

    .venv/bin/python bench/bench_tune.py --fleet momentum --seeds 3
    .venv/bin/python bench/bench_tune.py --fleet noise --seeds 10
    .venv/bin/python bench/bench_tune.py --fleet real --days 3
    .venv/bin/python bench/bench_tune.py --budget --datasets 64 --sample 8 --trials 30

--fleet real: the 16 Binance pairs of ../shared/data (bench_fleet_start_real.py), each its last
--days days, with the repo's config.yaml as the defaults (target: realised volatility over 30
bars) and the space train.lr [1e-4, 1e-2] log-scaled, train.seq_len [30, 60, 120] and
model.hidden_size [32, 64].

(Two fleets tried and dropped, where the LSTM learned nothing the search could find: returns
repeating the one 45 bars before, and prices pulled back towards their level 60 bars before
(x_t = -10 mean(x_{t-60..t-1}) + noise, which least squares on the last 60 returns predicts
with R^2 0.16); with seq_len 60 or 90 at 4,000 or 20,000 bars the skill stayed within
+-0.002.)

Per fleet and seed, the bars in a fresh folder, a config.yaml (seq_len 30, at most 8 epochs,
patience 2, lr 0.1: "the defaults" here) with a `tune:` section (space: train.lr in
[1e-4, 1e-1] log-scaled and train.seq_len in [15, 30]; --trials trials on --sample sample
datasets, the others held out), then the real `snakemake tune --cores <cores>`: the verdict
line, the held-out datasets' mean test skill with the chosen settings and with the defaults,
the chosen settings, and the run's wall time (the preprocessing, the search and the verdict).

--budget: the repo's config.yaml (its tune: section, with --trials and --sample) on a
momentum fleet of --datasets datasets of --rows bars: see budget().

Appends one JSON line to <out>/tune.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from rnnfleet.synthetic import write_bars_of_returns

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "scripts"))

MODEL = {"cell": "lstm", "hidden_size": 16, "num_layers": 1, "dropout": 0.0}
TRAIN = {"seq_len": 30, "batch_size": 128, "epochs": 8, "lr": 0.1, "patience": 2, "seed": 0, "threads": 1}
SPACE = {"train.lr": {"low": 1e-4, "high": 1e-1, "log": True}, "train.seq_len": [15, 30]}
# --fleet momentum: the repo's model (LSTM 2x64, dropout 0.1) at the bench's learning rate.
MOMENTUM_MODEL = yaml.safe_load((BENCH.parent / "config.yaml").read_text())["model"]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fleet", choices=("momentum", "noise", "real"), default="momentum")
    parser.add_argument("--days", type=float, default=3.0, help="--fleet real: each pair's last days")
    parser.add_argument("--datasets", type=int, default=12)
    parser.add_argument("--sample", type=int, default=4)
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--momentum", type=float, default=0.4, help="--fleet momentum: the share of the return before")
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--seeds", type=int, default=1, help="fleets drawn with seeds 0 .. N-1")
    parser.add_argument(
        "--budget", action="store_true", help="the search's time against one training of the fleet (see budget())"
    )
    parser.add_argument("--rounds", type=int, default=1, help="--budget: training and search alternately, N times")
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    parser.add_argument("--out", default=str(BENCH / "out"))
    return parser.parse_args()


def fleet_returns(kind: str, datasets: int, rows: int, rng: np.random.Generator, momentum: float) -> list[np.ndarray]:
    fleet = []
    for _ in range(datasets):
        shocks = rng.normal(0, 1, rows)
        x = shocks.copy()
        if kind == "momentum":
            for t in range(1, rows):
                x[t] = momentum * x[t - 1] + shocks[t]
        fleet.append(rng.uniform(0.5, 2.0) * 1e-3 * x)
    return fleet


def one_search(kind: str, seed: int, args, folder: Path) -> dict:
    if kind == "real":
        from bench_fleet_start_real import FLEET_ARCHIVE, write_pairs

        datasets = len(write_pairs(str(FLEET_ARCHIVE), folder, args.days, 16))
        config = yaml.safe_load((BENCH.parent / "config.yaml").read_text())
        config |= {"data_dir": "data", "pattern": "*.csv", "target": "realised_volatility"}
        config["train"] |= {"horizon": 30}
        config["export"] = {**config.get("export", {}), "onnx": False}
        space = {
            "train.lr": {"low": 1e-4, "high": 1e-2, "log": True},
            "train.seq_len": [30, 60, 120],
            "model.hidden_size": [32, 64],
        }
    else:
        rng = np.random.default_rng(seed)
        (folder / "data").mkdir(parents=True)
        datasets = args.datasets
        for number, returns in enumerate(fleet_returns(kind, datasets, args.rows, rng, args.momentum)):
            write_bars_of_returns(folder / "data" / f"{kind}{number:02d}_1m.csv", returns, rng, decimals=8)
        model = MOMENTUM_MODEL if kind == "momentum" else MODEL
        config = {"data_dir": "data", "pattern": "*.csv", "model": model, "train": TRAIN}
        space = SPACE
    config["tune"] = {
        "space": space,
        "trials": args.trials,
        "sample": args.sample,
        "holdout": datasets - args.sample,
        "epochs": config["train"]["epochs"],
        "seed": seed,
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    seconds = snakemake_tune(folder, args.cores)
    skills = json.loads((folder / "results/tune/verdict.json").read_text())["skills"]
    best = yaml.safe_load((folder / "results/tune/best.yaml").read_text())
    return {
        "fleet": kind,
        "seed": seed,
        "verdict": (folder / "results/tune/verdict.txt").read_text().strip(),
        "chosen": best["settings"],
        "best_value": best["evidence"]["best_value"],
        "held_out": len(skills),
        "chosen_mean_test_skill": statistics.mean(entry["chosen"] for entry in skills.values()),
        "defaults_mean_test_skill": statistics.mean(entry["defaults"] for entry in skills.values()),
        "better": sum(entry["chosen"] > entry["defaults"] for entry in skills.values()),
        "seconds": seconds,
    }


def snakemake_tune(folder: Path, cores: int, target: str = "tune") -> float:
    """The seconds `snakemake --cores <cores> <target>` took in folder ("": the default target)."""
    import subprocess

    command = [sys.executable, "-m", "snakemake", "-s", str(BENCH.parent / "Snakefile"), "--cores", str(cores)]
    started = time.perf_counter()
    result = subprocess.run([*command, *([target] if target else [])], cwd=folder, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"snakemake {target} in {folder} failed:\n{result.stderr[-3000:]}")
    return time.perf_counter() - started


def budget(args) -> dict:
    """The repo's config.yaml on a generated fleet of --datasets (momentum): the default
    `snakemake` (every dataset preprocessed and trained) in a fresh folder, then in another on
    the same bars a search of --trials trials on --sample datasets (`snakemake tune_report`,
    its preprocessing included), with as many workers as --cores hold training jobs; --rounds
    times, alternating; then the held-out verdict (`snakemake tune`) after the last search."""
    config = yaml.safe_load((BENCH.parent / "config.yaml").read_text())
    config |= {"data_dir": "data", "pattern": "*.csv"}
    config["export"] = {**config.get("export", {}), "onnx": False}
    workers = max(1, args.cores // int(config["train"]["threads"]))
    config["tune"] |= {"trials": args.trials, "sample": args.sample, "workers": workers}
    fleet = fleet_returns("momentum", args.datasets, args.rows, np.random.default_rng(0), args.momentum)
    seconds: dict[str, list[float]] = {"training": [], "search": [], "verdict": []}
    with tempfile.TemporaryDirectory() as scratch:
        runs = [("training", ""), ("search", "tune_report")] * args.rounds + [("verdict", "tune")]
        for number, (run, target) in enumerate(runs):
            folder = (
                Path(scratch) / f"{run}-{number // 2}"
                if run != "verdict"
                else Path(scratch) / f"search-{args.rounds - 1}"
            )
            if not folder.exists():
                (folder / "data").mkdir(parents=True)
                for pair, returns in enumerate(fleet):
                    bars_rng = np.random.default_rng(pair)
                    write_bars_of_returns(folder / "data" / f"pair{pair:02d}_1m.csv", returns, bars_rng, decimals=8)
                (folder / "config.yaml").write_text(yaml.safe_dump(config))
            seconds[run].append(snakemake_tune(folder, args.cores, target))
            print(f"budget: {run} {seconds[run][-1]:.0f}s", flush=True)
    return {
        "datasets": args.datasets,
        "sample": args.sample,
        "trials": args.trials,
        "workers": workers,
        "seconds": seconds,
    }


def main() -> None:
    args = parse_args()
    from bench_update import append_record

    if args.budget:
        record = budget(args)
        seconds = record["seconds"]
        for search, training in zip(seconds["search"], seconds["training"], strict=True):
            print(
                f"budget: a {args.trials}-trial search on {args.sample} datasets ({record['workers']} workers) "
                f"{search:.0f}s; one training of the {args.datasets}-dataset fleet {training:.0f}s; "
                f"search / training x{search / training:.2f}"
            )
        total = sum(seconds["search"]) / sum(seconds["training"])
        print(
            f"budget: over {args.rounds} round(s) x{total:.2f}; the held-out verdict after it {seconds['verdict'][0]:.0f}s"
        )
        append_record(args.out, "tune", {"at": time.time(), "budget": record})
        return
    results = []
    for seed in range(args.seeds):
        with tempfile.TemporaryDirectory() as folder:
            result = one_search(args.fleet, seed, args, Path(folder) / "fleet")
        results.append(result)
        gain = result["chosen_mean_test_skill"] - result["defaults_mean_test_skill"]
        print(
            f"{args.fleet} seed {seed}, {result['held_out'] + args.sample} datasets, {args.trials} trials on {args.sample}: "
            f"chose {result['chosen']} (best of {args.trials}: {result['best_value']:.4f}); held-out mean test skill "
            f"chosen {result['chosen_mean_test_skill']:+.4f}, defaults {result['defaults_mean_test_skill']:+.4f} "
            f"({gain:+.4f}, better on {result['better']} of {result['held_out']}); {result['verdict']}; "
            f"snakemake tune {result['seconds']:.0f}s",
            flush=True,
        )
    if args.fleet == "noise":
        kept = sum(" beat " not in result["verdict"] for result in results)
        print(f"noise: the verdict says no better than the defaults in {kept} of {len(results)} seeds")
    append_record(args.out, "tune", {"at": time.time(), "fleet": args.fleet, "results": results})


if __name__ == "__main__":
    main()
