"""Speed: rnnfleet against the hand-written loop it replaces, same data and work, one run.

    make bench                                   # both workloads, 1 repetition
    .venv/bin/python bench/bench_speed.py --workloads large --datasets 6 --rows 5000 --reps 2
    .venv/bin/python bench/bench_speed.py --workloads many-small --datasets 200

Workloads (generated synthetic minute bars; --datasets/--rows/--epochs override them):
  large       12 datasets x 5,000 rows, 3 epochs
  many-small  1,000 datasets x 1,440 rows (one day each), 2 epochs
Variants (interleaved per repetition; models/min is the median over repetitions):
  naive      bench/naive_loop.py: sequential pandas + DataLoader loop, torch default threads, float32
  tight      bench/tight_loop.py: the limit, a tight hand-written loop, <cores> processes x 1 thread, bf16
  tight-fp32 the same in float32: the limit of the fp32 variant
  snakemake  the workflow: snakemake --cores <all> in a fresh folder (warm workers on, train.amp auto)
  fp32       the same with train.amp off: the float32 reference for the validation loss
  cold       the workflow with warm_workers off: every job imports torch itself
  one-proc   rnnfleet's preprocess_one + train_one in one warm process, no orchestration,
             at 1 thread and at <all> threads (its best layout is the reference)
Also prints the CPU the Snakemake process itself used per job and its share of the machine,
where a model's time goes in the workflow, and the CPU allocator's effect on one training
step. Appends one JSON line per workload to bench/out/speed.jsonl.
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

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO / "scripts"))

from bench_scale import run_and_sample_cpu  # noqa: E402

from rnnfleet.synthetic import write_synthetic_csv  # noqa: E402

WORKLOADS = {
    "large": {"datasets": 12, "rows": 5000, "epochs": 3},
    "many-small": {"datasets": 1000, "rows": 1440, "epochs": 2},
}
DEFAULT_VARIANTS = {
    "large": "naive,snakemake,fp32,cold,one-proc",
    "many-small": "naive,tight,snakemake,tight-fp32,fp32",
}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="large,many-small", help=f"of {', '.join(WORKLOADS)}")
    parser.add_argument("--datasets", type=int, help="override the workloads' number of datasets")
    parser.add_argument("--rows", type=int, help="override the workloads' rows per dataset")
    parser.add_argument("--epochs", type=int, help="override the workloads' epochs")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    parser.add_argument("--variants", help="override the workloads' variants: " + str(DEFAULT_VARIANTS))
    parser.add_argument("--out", default=str(BENCH / "out"))
    parser.add_argument("--step-steps", type=int, default=60, help="timed steps of the one-step comparison")
    parser.add_argument(
        "--concurrency",
        default="",
        help="also run the workflow with this many concurrent trainings, e.g. 1,2,4,8 (each declares "
        "gpu_mem=2, budget --resources gpu_mem=2*N): the GPU concurrency curve",
    )
    parser.add_argument(
        "--phases",
        help="append `<start> <end> <name> <trainings at once> <declared GB>` per concurrency run to this file "
        "(bench/gpu_samples.py reads it beside nvidia-smi samples)",
    )
    return parser.parse_args()


def workflow_config(args, data_dir: Path) -> dict:
    return {
        "data_dir": str(data_dir),
        "pattern": "*1m*.csv",
        "preprocess": {"val_fraction": 0.2},
        "model": {"cell": "lstm", "hidden_size": 64, "num_layers": 2, "dropout": 0.1},
        "train": {
            "seq_len": 60,
            "horizon": 1,
            "batch_size": 128,
            "epochs": args.epochs,
            "lr": 0.001,
            "patience": args.epochs + 1,  # no early stop: every variant does the same steps
            "seed": 0,
            "threads": 1,
            "gpu_mem": 2,
        },
    }


def timed(command: list[str], **kwargs) -> tuple[float, str]:
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} ... failed:\n{result.stderr[-3000:]}")
    return seconds, result.stdout


def metrics_of(folder: Path) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted((folder / "metrics").glob("*.json"))]


def fleet_outcome(seconds: float, models: list[dict]) -> dict:
    """A variant's seconds, mean validation loss and training windows (all datasets), from
    each model's record (a loop's JSON line or the workflow's metrics)."""
    return {
        "seconds": seconds,
        "val_loss": statistics.mean(model["val_loss"] for model in models),
        "train_windows": sum(model["train_windows"] for model in models),
    }


def loop_outcome(seconds: float, stdout: str) -> dict:
    """fleet_outcome of a hand-written loop, from the JSON line it prints per model."""
    return fleet_outcome(seconds, [json.loads(line) for line in stdout.splitlines() if line.startswith("{")])


def run_naive(args, data_dir: Path, work: Path) -> dict:
    return loop_outcome(
        *timed([sys.executable, str(BENCH / "naive_loop.py"), str(data_dir), str(work), "--epochs", str(args.epochs)])
    )


def run_tight(args, data_dir: Path, work: Path, fp32: bool) -> dict:
    command = [sys.executable, str(BENCH / "tight_loop.py"), str(data_dir), str(work), "--epochs", str(args.epochs)]
    command += ["--processes", str(args.cores)] + (["--fp32"] if fp32 else [])
    return loop_outcome(*timed(command))


def own_warm_server_env() -> dict[str, str]:
    """The environment of a workflow run that starts a warm server of its own, as a first
    run does (a fresh private $XDG_RUNTIME_DIR; short, for the socket's path): the server of
    an earlier run, which serves every folder of this user for a minute, would spare it
    the server's imports, which every other side of a comparison pays."""
    return {**os.environ, "XDG_RUNTIME_DIR": tempfile.mkdtemp(prefix="rw-", dir="/tmp")}


def run_workflow(
    args, data_dir: Path, work: Path, warm: bool, concurrent: int | None = None, amp: str = "auto"
) -> dict:
    import yaml

    config = workflow_config(args, data_dir)
    config["train"].update(warm_workers=warm, amp=amp)
    work.mkdir(parents=True)
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work)]
    limits = ["--cores", str(args.cores)]
    if concurrent:
        limits = ["--cores", str(max(args.cores, concurrent)), "--resources", f"gpu_mem={2 * concurrent}"]
    seconds, snakemake_cpu, jobs = run_and_sample_cpu([*command, *limits], cwd=work, env=own_warm_server_env())
    metrics = metrics_of(work)
    train_wall = [
        float(next(csv.DictReader(p.open(), delimiter="\t"))["s"])
        for p in (work / "benchmarks" / "train").glob("*.tsv")
    ]
    prep_wall = [
        float(next(csv.DictReader(p.open(), delimiter="\t"))["s"])
        for p in (work / "benchmarks" / "preprocess").glob("*.tsv")
    ]
    split = {
        key: statistics.median(m[key] for m in metrics)
        for key in ("startup_seconds", "load_seconds", "setup_seconds", "train_seconds", "save_seconds")
    }
    split["train_job_wall_seconds"] = statistics.median(train_wall)
    split["preprocess_job_wall_seconds"] = statistics.median(prep_wall)
    return {
        **fleet_outcome(seconds, metrics),
        "amp": sorted({m["amp"] for m in metrics}),
        "split": split,
        "snakemake_cpu_per_job_s": snakemake_cpu / jobs,
        "snakemake_machine_share": snakemake_cpu / (seconds * args.cores),
    }


def run_one_process(args, data_dir: Path, work: Path, threads: int) -> dict:
    config = json.dumps(workflow_config(args, data_dir))
    seconds, _ = timed(
        [sys.executable, str(BENCH / "one_process.py"), str(data_dir), str(work), config, "--threads", str(threads)]
    )
    return fleet_outcome(seconds, metrics_of(work))


def step_milliseconds(tuned: bool, steps: int) -> float:
    command = [sys.executable, str(BENCH / "step_time.py"), "--threads", "1", "--steps", str(steps)]
    command += ["--tuned"] if tuned else []
    return float(timed(command)[1].strip())


def main():
    args = parse_args()
    summaries = []
    for workload in args.workloads.split(","):
        sizes = {key: getattr(args, key) or value for key, value in WORKLOADS[workload].items()}
        variants = args.variants or DEFAULT_VARIANTS[workload]
        summaries.append(run_workload(argparse.Namespace(**{**vars(args), **sizes, "variants": variants}), workload))
    tuned, default = step_milliseconds(True, args.step_steps), step_milliseconds(False, args.step_steps)
    print(
        f"\none training step, 1 thread: {tuned:.1f} ms with rnnfleet's allocator settings, {default:.1f} ms with glibc defaults ({default / tuned:.2f}x)"
    )
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with open(Path(args.out) / "speed.jsonl", "a") as handle:
        for summary in summaries:
            summary["step_ms"] = {"tuned_allocator": tuned, "glibc_default": default}
            handle.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), **summary}) + "\n")


def run_workload(args, workload: str) -> dict:
    variants = args.variants.split(",")
    root = Path(tempfile.mkdtemp(prefix="rnnfleet-bench-"))
    data_dir = root / "data"
    for index in range(args.datasets):
        write_synthetic_csv(data_dir / f"S{index:04d}_1m.csv", args.rows, 1000 + index)
    runners = {
        "naive": lambda work: run_naive(args, data_dir, work),
        "tight": lambda work: run_tight(args, data_dir, work, fp32=False),
        "tight-fp32": lambda work: run_tight(args, data_dir, work, fp32=True),
        "snakemake": lambda work: run_workflow(args, data_dir, work, warm=True),
        "fp32": lambda work: run_workflow(args, data_dir, work, warm=True, amp="off"),
        "cold": lambda work: run_workflow(args, data_dir, work, warm=False),
        "one-proc-1t": lambda work: run_one_process(args, data_dir, work, 1),
        f"one-proc-{args.cores}t": lambda work: run_one_process(args, data_dir, work, args.cores),
    }
    if "one-proc" in variants:
        variants = [v for v in variants if v != "one-proc"] + ["one-proc-1t", f"one-proc-{args.cores}t"]
    results: dict[str, list[dict]] = {name: [] for name in variants}
    print(
        f"\n{workload}: {args.datasets} datasets x {args.rows} rows, LSTM(5, 64, 2 layers), seq 60, batch 128, "
        f"{args.epochs} epochs, {args.cores} cores"
    )
    for rep in range(args.reps):
        for name in variants:
            outcome = runners[name](root / f"{name}-{rep}")
            results[name].append(outcome)
            amp = f"  amp {','.join(outcome['amp'])}" if "amp" in outcome else ""
            print(
                f"  rep {rep + 1} {name:<14} {outcome['seconds']:7.1f} s  val_loss {outcome['val_loss']:.4f}{amp}",
                flush=True,
            )

    per_min = {
        name: statistics.median(args.datasets * 60 / r["seconds"] for r in runs) for name, runs in results.items()
    }
    val_loss = {name: statistics.mean(r["val_loss"] for r in runs) for name, runs in results.items()}
    baseline = per_min.get("naive")
    print(f"\n{'variant':<16}{'models/min':>11}{'x naive':>9}{'mean val_loss':>15}")
    for name in results:
        ratio = f"{per_min[name] / baseline:9.2f}" if baseline else f"{'-':>9}"
        print(f"{name:<16}{per_min[name]:11.1f}{ratio}{val_loss[name]:15.4f}")
    summary = {
        "workload": workload,
        "datasets": args.datasets,
        "rows": args.rows,
        "epochs": args.epochs,
        "cores": args.cores,
        "models_per_min": per_min,
        "val_loss": val_loss,
        # Equal work: every variant trains on the same windows (the same split, the test period held out).
        "train_windows": {name: runs[0]["train_windows"] for name, runs in results.items()},
    }
    same = len(set(summary["train_windows"].values())) == 1
    print(
        "training windows, all datasets: "
        + ", ".join(f"{name} {windows}" for name, windows in summary["train_windows"].items())
        + (" (the same work)" if same else " (NOT the same work: the models/min do not compare)")
    )
    for reference in ("fp32", "naive"):
        if "snakemake" in val_loss and reference in val_loss:
            difference = val_loss["snakemake"] / val_loss[reference] - 1
            summary[f"val_loss_vs_{reference}"] = difference
            print(f"snakemake's validation loss vs {reference} (float32): {difference:+.2%}")
    for workflow, limit in (("snakemake", "tight"), ("fp32", "tight-fp32")):
        if workflow in per_min and limit in per_min:
            summary[f"{workflow}_vs_{limit}"] = per_min[workflow] / per_min[limit]
            print(f"{workflow} / {limit} (models/min): {summary[f'{workflow}_vs_{limit}']:.2f}")
    one_proc = [name for name in per_min if name.startswith("one-proc")]
    if "snakemake" in per_min and one_proc:
        best = max(one_proc, key=per_min.get)
        summary["snakemake_vs_best_one_process"] = per_min["snakemake"] / per_min[best]
        print(f"snakemake / best one-process ({best}): {summary['snakemake_vs_best_one_process']:.2f}")
    for name in ("snakemake", "fp32", "cold"):
        if name in results:
            split = {k: statistics.median(r["split"][k] for r in results[name]) for k in results[name][0]["split"]}
            summary[f"{name}_split_seconds"] = split
            cpu_per_job = statistics.median(r["snakemake_cpu_per_job_s"] for r in results[name])
            share = statistics.median(r["snakemake_machine_share"] for r in results[name])
            summary[f"{name}_snakemake_cpu_per_job_s"] = cpu_per_job
            summary[f"{name}_snakemake_machine_share"] = share
            print(
                f"{name}: Snakemake's own CPU {cpu_per_job:.3f} s per job ({share:.0%} of the machine); per model "
                "(median s): " + ", ".join(f"{k.removesuffix('_seconds')} {v:.2f}" for k, v in split.items())
            )
    if args.concurrency:
        curve = {}
        for concurrent in map(int, args.concurrency.split(",")):
            started = time.time()
            outcome = run_workflow(args, data_dir, root / f"curve-{concurrent}", warm=True, concurrent=concurrent)
            if args.phases:
                with open(args.phases, "a") as phases:
                    phases.write(f"{started:.3f} {time.time():.3f} concurrency-{concurrent} {concurrent} 2\n")
            curve[concurrent] = args.datasets * 60 / outcome["seconds"]
            print(f"{concurrent} concurrent trainings: {curve[concurrent]:.1f} models/min", flush=True)
        summary["concurrency_models_per_min"] = curve
    shutil.rmtree(root, ignore_errors=True)
    return summary


if __name__ == "__main__":
    main()
