"""What a model costs beyond its work on each path a job can take: warm workers forked by a
server (fork), warm workers of the spawn path (spawn: no fork or descriptor passing, as on
Windows, under tests/without_unix_facilities), and each job in its own process (cold:
train.warm_workers false). With --before REF the same runs of that commit's tree (a git
worktree) are interleaved with this tree's, so each figure has its before and after.

    .venv/bin/python bench/bench_paths.py                               # 64 one-day datasets, 1 epoch
    .venv/bin/python bench/bench_paths.py --datasets 16 --reps 2 --before 10b3573

Per run: the run's wall seconds and models/min, and the per-model overhead: a train job's
wall (Snakemake's benchmark file) less its reading of the arrays and its training steps (the
metrics' load_seconds, train_seconds and refit_seconds), plus a preprocess job's wall less the
reading and preparing of its bars (preprocess_one's median in this process, warm, measured
once). Medians over the run's jobs. Each run starts a warm server of its own, as a first run
does (bench_speed.own_warm_server_env). Appends one JSON line per run to bench/out/paths.jsonl.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
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

from bench_speed import own_warm_server_env, workflow_config  # noqa: E402

from rnnfleet.synthetic import write_synthetic_csv  # noqa: E402

HARNESS = Path("tests") / "without_unix_facilities"
# path -> (train.warm_workers, under the harness)
PATHS = {"fork": (True, False), "spawn": (True, True), "cold": (False, False)}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", type=int, default=64)
    parser.add_argument("--rows", type=int, default=1440)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    parser.add_argument("--paths", default=",".join(PATHS), help=f"of {', '.join(PATHS)}")
    parser.add_argument("--before", help="a commit whose tree runs the same paths, interleaved (git worktree)")
    parser.add_argument("--out", default=str(BENCH / "out"))
    return parser.parse_args()


def job_walls(work: Path, rule: str) -> dict[str, float]:
    return {
        path.stem: float(next(csv.DictReader(path.open(), delimiter="\t"))["s"])
        for path in (work / "benchmarks" / rule).glob("*.tsv")
    }


def preprocess_work_seconds(config: dict, data_dir: Path, names: list[str], work: Path) -> float:
    """Median seconds of preprocess_one (reading and preparing a dataset's bars), in this
    process after one warm-up: what a preprocess job does, without its process."""
    from bench_phases import full_config

    from rnnfleet.runner.jobs import preprocess_one
    from rnnfleet.settings import preprocess_settings

    full = full_config("one-day", data_dir, argparse.Namespace(epochs=config["train"]["epochs"]))
    seconds = []
    for name in names[: min(len(names), 9)]:
        started = time.perf_counter()
        with contextlib.redirect_stderr(io.StringIO()):
            preprocess_one(
                [str(data_dir / f"{name}.csv")], str(work / f"{name}.npz"), **preprocess_settings(full), dataset=name
            )
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds[1:] or seconds)


def run(tree: Path, path: str, config: dict, work: Path, cores: int, preprocess_work: float) -> dict:
    import yaml

    warm, harness = PATHS[path]
    work.mkdir(parents=True)
    (work / "config.yaml").write_text(yaml.safe_dump({**config, "train": {**config["train"], "warm_workers": warm}}))
    env = own_warm_server_env()
    if harness:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree / HARNESS), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "snakemake", "-s", str(tree / "Snakefile"), "-d", str(work), "--cores", str(cores)]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, cwd=work, env=env)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{tree} {path}: the run failed:\n{result.stderr[-3000:]}")
    metrics = {p.stem: json.loads(p.read_text()) for p in (work / "metrics").glob("*.json")}
    train_walls, preprocess_walls = job_walls(work, "train"), job_walls(work, "preprocess")
    train_beyond = [
        train_walls[name] - m["load_seconds"] - m["train_seconds"] - (m.get("refit_seconds") or 0)
        for name, m in metrics.items()
    ]
    preprocess_beyond = statistics.median(preprocess_walls.values()) - preprocess_work
    return {
        "path": path,
        "workers": sorted({m["worker"] for m in metrics.values()}),
        "seconds": wall,
        "models_per_min": 60 * len(metrics) / wall,
        "train_job_wall": statistics.median(train_walls.values()),
        "preprocess_job_wall": statistics.median(preprocess_walls.values()),
        "train_beyond": statistics.median(train_beyond),
        "preprocess_beyond": preprocess_beyond,
        "overhead_per_model": statistics.median(train_beyond) + preprocess_beyond,
        "val_loss": statistics.mean(m["val_loss"] for m in metrics.values()),
    }


def before_tree(ref: str, root: Path) -> Path:
    tree = root / "before"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), ref], check=True, capture_output=True
    )
    return tree


def main() -> None:
    args = parse_args()
    paths = args.paths.split(",")
    root = Path(tempfile.mkdtemp(prefix="bench-paths-"))
    data_dir = root / "data"
    names = [f"S{index:04d}_1m" for index in range(args.datasets)]
    for index, name in enumerate(names):
        write_synthetic_csv(data_dir / f"{name}.csv", args.rows, 1000 + index)
    config = workflow_config(argparse.Namespace(epochs=args.epochs), data_dir)
    preprocess_work = preprocess_work_seconds(config, data_dir, names, root / "in-process")
    trees = {"after": REPO} | ({"before": before_tree(args.before, root)} if args.before else {})
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    print(
        f"{args.datasets} datasets x {args.rows} bars, {args.epochs} epoch(s), --cores {args.cores}; "
        f"preprocess work in process {preprocess_work:.3f} s; load {load}"
    )
    results: dict[tuple[str, str], list[dict]] = {}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        for rep in range(args.reps):
            order = [(side, path) for path in paths for side in trees]
            for side, path in order if rep % 2 == 0 else order[::-1]:
                outcome = run(trees[side], path, config, root / f"{side}-{path}-{rep}", args.cores, preprocess_work)
                outcome |= {"side": side, "rep": rep, "datasets": args.datasets, "epochs": args.epochs}
                results.setdefault((side, path), []).append(outcome)
                print(
                    f"  {side:6} {path:5} ({','.join(outcome['workers'])}): {outcome['seconds']:7.1f} s, "
                    f"{outcome['models_per_min']:6.1f} models/min, overhead per model {outcome['overhead_per_model']:.3f} s "
                    f"(train job {outcome['train_beyond']:.3f}, preprocess job {outcome['preprocess_beyond']:.3f})",
                    flush=True,
                )
                with open(out / "paths.jsonl", "a") as lines:
                    lines.write(json.dumps(outcome) + "\n")
    finally:
        if args.before:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(trees["before"])])
    summarise(results)


def summarise(results: dict[tuple[str, str], list[dict]]) -> None:
    """Medians per side and path, and the ratios the issue's targets name."""

    def median(side: str, path: str, key: str) -> float | None:
        runs = results.get((side, path))
        return statistics.median(r[key] for r in runs) if runs else None

    print("\nmedians:")
    for side, path in results:
        print(
            f"  {side:6} {path:5}: {median(side, path, 'seconds'):7.1f} s, "
            f"overhead per model {median(side, path, 'overhead_per_model'):.3f} s"
        )
    fork, spawn, cold = (median("after", p, "overhead_per_model") for p in ("fork", "spawn", "cold"))
    if fork and spawn:
        print(f"spawn / fork, overhead per model: {spawn / fork:.2f} (target <= 1.25)")
        print(
            f"spawn / fork, run wall: {median('after', 'spawn', 'seconds') / median('after', 'fork', 'seconds'):.2f} (target <= 1.35)"
        )
    if spawn and cold:
        print(f"cold / spawn, overhead per model: {cold / spawn:.2f} (target >= 3)")
    if spawn and median("before", "spawn", "seconds"):
        print(
            f"harness before / after, run wall: {median('before', 'spawn', 'seconds') / median('after', 'spawn', 'seconds'):.2f} (target >= 5)"
        )
    if median("before", "fork", "seconds") and fork:
        print(
            f"fork after / before, run wall: {median('after', 'fork', 'seconds') / median('before', 'fork', 'seconds'):.2f} (no slower)"
        )


if __name__ == "__main__":
    main()
