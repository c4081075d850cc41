"""Scale: the workflow with thousands of datasets. Prints figures; appends a JSON line to bench/out/scale.jsonl.

    make bench-scale                                   # about 10 minutes on 2 cores
    .venv/bin/python bench/bench_scale.py --sizes 1000 --run-datasets

1. Dry-run (`snakemake -n`, full job listing) on N empty dataset files, for each --sizes N:
   wall time, CPU time and peak memory of the snakemake process; and the parse alone
   (`snakemake --list-rules`: Snakefile, config validation, discovery of the N files).
2. Real local runs of --run-datasets trivially small trainings (tiny model, one epoch,
   --cores all): wall time, the CPU the snakemake process itself spent per job (scheduling,
   DAG bookkeeping, spawning: sampled from /proc), the median job times. Two sizes show
   how the per-job cost grows with the number of datasets; the largest size is also run in
   --run-batches batches (`snakemake summarize --batch summarize=i/B`), the remedy.

3. What each of rnnfleet's patches to Snakemake buys (--leave-out NAME ...): the dry-run and
   the real run again without that patch, by the bench switch RNNFLEET_SNAKEMAKE_PATCHES_OFF
   (rnnfleet.hooks; "all": stock Snakemake), interleaved with runs with every patch, and the
   ratio without / with printed with the load average at each figure.

The machine is shared and small: wall times move with other load; the CPU figures less so.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO / "scripts"))

from rnnfleet.hooks import PATCHES, PATCHES_OFF_VARIABLE  # noqa: E402
from rnnfleet.synthetic import write_synthetic_csv  # noqa: E402

# A training that takes well under a second: what is left is the per-job overhead.
TINY_MODEL = {"cell": "gru", "hidden_size": 4, "num_layers": 1, "dropout": 0.0}
TINY_TRAIN = {"seq_len": 8, "batch_size": 256, "epochs": 1, "patience": 1, "threads": 1}
TINY_ROWS = 300
MEASURE = """
import resource, subprocess, sys, time
started = time.perf_counter()
with open(sys.argv[1], "w") as stdout:
    code = subprocess.run(sys.argv[2:], stdout=stdout, stderr=subprocess.DEVNULL).returncode
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(code, time.perf_counter() - started, usage.ru_utime + usage.ru_stime, usage.ru_maxrss)
"""


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[1000, 10000], help="datasets per dry-run")
    parser.add_argument("--reps", type=int, default=3, help="dry-runs per size (the median is printed)")
    parser.add_argument(
        "--stock",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also dry-run with stock Snakemake (RNNFLEET_STOCK_SNAKEMAKE=1), interleaved, for the ratio",
    )
    parser.add_argument(
        "--run-datasets", type=int, nargs="*", default=[100, 300], help="tiny trainings per real run (none: skip)"
    )
    parser.add_argument(
        "--run-batches",
        type=int,
        default=3,
        help="also run the largest --run-datasets as this many `snakemake summarize --batch summarize=i/B` runs",
    )
    parser.add_argument(
        "--leave-out",
        nargs="*",
        choices=[*PATCHES, "all", "speedups"],
        default=[],
        help="instead of 1 and 2: per name, dry-runs and real runs without that patch ('all': stock "
        "Snakemake; 'speedups': each speed-up in turn), interleaved with runs with every patch",
    )
    parser.add_argument(
        "--predict-all",
        action="store_true",
        help="with --leave-out: the dry-runs forecast every dataset (predict.datasets: all), so each dataset "
        "has a predict job too",
    )
    parser.add_argument("--out", default=str(BENCH / "out"))
    return parser.parse_args()


def snakemake_command(workdir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args]


def write_config(workdir: Path, **sections) -> None:
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config["data_dir"] = str(workdir / "data")
    for section, values in sections.items():
        config[section] = {**config[section], **values}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def measure(command: list[str], stdout_path: Path, env: dict | None = None) -> dict:
    """Wall s, CPU s and peak RSS (MB) of one command, from a fresh process whose only child it is."""
    output = subprocess.run(
        [sys.executable, "-c", MEASURE, str(stdout_path), *command],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    )
    code, wall, cpu, max_rss_kb = output.stdout.split()
    if int(code) != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {code}")
    return {"wall_s": float(wall), "cpu_s": float(cpu), "peak_rss_mb": int(max_rss_kb) / 1024}


def dry_run_figures(datasets: int, reps: int, stock: bool) -> dict:
    """Median of `reps` dry-runs with the workflow's Snakemake speed-ups, and with stock
    Snakemake (interleaved) when `stock`; both must list the same jobs."""
    variants = {"": {}, "stock_": {PATCHES_OFF_VARIABLE: "all"}} if stock else {"": {}}
    with tempfile.TemporaryDirectory(prefix=f"rnnfleet-scale-{datasets}-") as folder:
        workdir = Path(folder)
        (workdir / "data").mkdir()
        for number in range(datasets):
            (workdir / "data" / f"S{number:06d}_1m.csv").touch()  # a dry-run never reads them
        write_config(workdir)
        runs = {prefix: [] for prefix in variants}
        listed = {}
        for _ in range(reps):
            for prefix, env in variants.items():
                listing = workdir / f"dry_run_{prefix}.txt"
                runs[prefix].append(measure(snakemake_command(workdir, "-n"), listing, env))
                listed[prefix] = listing.read_text()
        for prefix, text in listed.items():
            train_jobs = text.count("\nrule train:")
            if train_jobs != datasets:
                raise RuntimeError(f"dry-run {prefix}listed {train_jobs} train jobs for {datasets} datasets")
        parse = measure(snakemake_command(workdir, "--list-rules"), workdir / "rules.txt")
    figures = {"datasets": datasets, "jobs": int(re.search(r"^total\s+(\d+)", listed[""], re.MULTILINE).group(1))}
    for prefix, dry_runs in runs.items():
        figures[f"{prefix}dry_run_wall_s"] = statistics.median(run["wall_s"] for run in dry_runs)
        figures[f"{prefix}dry_run_cpu_s"] = statistics.median(run["cpu_s"] for run in dry_runs)
        figures[f"{prefix}dry_run_peak_rss_mb"] = max(run["peak_rss_mb"] for run in dry_runs)
    figures.update(parse_wall_s=parse["wall_s"], parse_cpu_s=parse["cpu_s"])
    return figures


def own_cpu_seconds(pid: int) -> float | None:
    """utime + stime of one process (not its children), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_and_sample_cpu(
    command: list[str], cwd: Path | None = None, env: dict | None = None
) -> tuple[float, float, int]:
    """Run a snakemake command; return its wall time, the last CPU time sampled for its own
    process, and the number of jobs it ran."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )
    last_cpu = [0.0]

    def sample() -> None:
        while process.poll() is None:
            cpu = own_cpu_seconds(process.pid)
            if cpu is not None:
                last_cpu[0] = cpu
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stderr = process.communicate()[1]
    wall = time.perf_counter() - started
    sampler.join()
    if process.returncode != 0:
        raise RuntimeError(f"the real run failed:\n{stderr[-3000:]}")
    jobs_done = int(re.findall(r"(\d+) of \d+ steps", stderr)[-1])
    return wall, last_cpu[0], jobs_done


def benchmark_seconds(workdir: Path, rule: str) -> list[float]:
    seconds = []
    for path in (workdir / "benchmarks" / rule).glob("*.tsv"):
        with open(path) as table:
            seconds.append(float(next(csv.DictReader(table, delimiter="\t"))["s"]))
    return seconds


def real_run_figures(datasets: int, batches: int = 1, stock: bool = False, leave_out: str | None = None) -> dict:
    """One run over all datasets, or `batches` runs of a slice each (the last one summarises);
    `stock`: without the workflow's Snakemake patches; `leave_out`: without those (the bench
    switch's value)."""
    with tempfile.TemporaryDirectory(prefix="rnnfleet-scale-run-") as folder:
        workdir = Path(folder)
        for number in range(datasets):
            write_synthetic_csv(workdir / "data" / f"T{number:04d}_1m.csv", TINY_ROWS, number)
        write_config(workdir, model=TINY_MODEL, train=TINY_TRAIN)
        cores = os.cpu_count() or 1
        if batches == 1:
            commands = [snakemake_command(workdir, "--cores", str(cores))]
        else:
            commands = [
                snakemake_command(
                    workdir, "--cores", str(cores), "summarize", "--batch", f"summarize={batch}/{batches}"
                )
                for batch in range(1, batches + 1)
            ]
        env = {PATCHES_OFF_VARIABLE: leave_out if leave_out is not None else "all" if stock else ""}
        timings = [run_and_sample_cpu(command, env=env) for command in commands]
        wall, snakemake_cpu, jobs = (sum(column) for column in zip(*timings, strict=True))
        preprocess, train = benchmark_seconds(workdir, "preprocess"), benchmark_seconds(workdir, "train")
        train_loop = [json.loads(path.read_text())["train_seconds"] for path in (workdir / "metrics").glob("*.json")]
    return {
        "datasets": datasets,
        "batches": batches,
        "snakemake": "stock" if stock else "speed-ups",
        "jobs": jobs,
        "cores": cores,
        "wall_s": wall,
        "models_per_min": 60 * datasets / wall,
        "snakemake_cpu_per_job_ms": 1000 * snakemake_cpu / jobs,
        "preprocess_job_median_s": statistics.median(preprocess),
        "train_job_median_s": statistics.median(train),
        "train_loop_median_s": statistics.median(train_loop),
    }


def load() -> float:
    return os.getloadavg()[0]


def median_with_load(runs: list[tuple[float, float]], scale: float = 1, unit: str = "s") -> str:
    """'median unit (load a-b)' of (seconds, load average at the start) pairs; scale: units a second."""
    loads = [run[1] for run in runs]
    median = scale * statistics.median(run[0] for run in runs)
    return f"{median:.2f} {unit} (load {min(loads):.1f}-{max(loads):.1f})"


def leave_out_figures(
    names: list[str], sizes: list[int], run_datasets: list[int], reps: int, predict_all: bool = False
) -> dict:
    """Per patch left out, and with every patch: the dry-run's CPU (one dry-run of each size per
    repetition) and Snakemake's own CPU per job of a real run (each --run-datasets size), in
    interleaved repetitions; the ratio without / with printed."""
    variants = {"every patch": "", **{f"without {name}": name for name in names}}
    record = {"variants": variants, "dry_runs": {}, "runs": {}}
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix=f"rnnfleet-scale-{size}-") as folder:
            workdir = Path(folder)
            (workdir / "data").mkdir()
            for number in range(size):
                (workdir / "data" / f"S{number:06d}_1m.csv").touch()
            write_config(workdir, **({"predict": {"datasets": "all"}} if predict_all else {}))
            cpu = {label: [] for label in variants}
            for _ in range(reps):
                for label, off in variants.items():
                    started_load = load()
                    figures = measure(
                        snakemake_command(workdir, "-n"), workdir / "dry_run.txt", {PATCHES_OFF_VARIABLE: off}
                    )
                    cpu[label].append((figures["cpu_s"], started_load))
        record["dry_runs"][size] = cpu
        forecasts = ", predict.datasets: all" if predict_all else ""
        print(
            f"\n{size:,} datasets{forecasts}, `snakemake -n`: CPU s, median of {reps} interleaved (ratio to every patch):"
        )
        with_all = statistics.median(run[0] for run in cpu["every patch"])
        for label, runs in cpu.items():
            ratio = statistics.median(run[0] for run in runs) / with_all
            print(f"  {label:<30} {median_with_load(runs):>28}  x{ratio:.3f}", flush=True)
    for size in run_datasets:
        per_job = {label: [] for label in variants}
        for _ in range(reps):
            for label, off in variants.items():
                started_load = load()
                run = real_run_figures(size, leave_out=off)
                per_job[label].append((run["snakemake_cpu_per_job_ms"] / 1000, started_load))
        record["runs"][size] = per_job
        print(f"\n{size} tiny trainings, Snakemake's own CPU per job, median of {reps} interleaved:")
        with_all = statistics.median(run[0] for run in per_job["every patch"])
        for label, runs in per_job.items():
            ratio = statistics.median(run[0] for run in runs) / with_all
            print(f"  {label:<30} {median_with_load(runs, 1000, 'ms'):>28}  x{ratio:.3f}", flush=True)
    return record


def main():
    args = parse_args()
    if args.leave_out:
        names = [
            name
            for choice in args.leave_out
            for name in (
                [name for name, module in PATCHES.items() if module == "snakemake_speedups"]
                if choice == "speedups"
                else [choice]
            )
        ]
        print(f"bench_scale --leave-out on {platform.node()}, {os.cpu_count()} cores; load {load():.1f}")
        record = leave_out_figures(names, args.sizes, args.run_datasets, args.reps, args.predict_all)
        record["when"] = time.strftime("%Y-%m-%d %H:%M:%S")
        Path(args.out).mkdir(parents=True, exist_ok=True)
        with open(Path(args.out) / "scale_patches.jsonl", "a") as handle:
            handle.write(json.dumps(record) + "\n")
        return
    machine = f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}"
    record = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine, "dry_runs": []}
    print(f"bench_scale on {machine}; load average at start {os.getloadavg()[0]:.1f}")
    print(f"\ndry-run (snakemake -n, every job listed), N empty dataset files, median of {args.reps}:")
    stock_header = f" {'stock wall s':>13} {'stock CPU s':>12} {'stock MB':>9}" if args.stock else ""
    print(
        f"{'datasets':>9} {'jobs':>7} {'wall s':>8} {'CPU s':>7} {'peak MB':>8}{stock_header} "
        f"{'parse wall s':>13} {'parse CPU s':>12}"
    )
    for size in args.sizes:
        figures = dry_run_figures(size, args.reps, args.stock)
        record["dry_runs"].append(figures)
        stock_columns = (
            f" {figures['stock_dry_run_wall_s']:>13.1f} {figures['stock_dry_run_cpu_s']:>12.1f} "
            f"{figures['stock_dry_run_peak_rss_mb']:>9.0f}"
            if args.stock
            else ""
        )
        print(
            f"{figures['datasets']:>9,} {figures['jobs']:>7,} {figures['dry_run_wall_s']:>8.1f} "
            f"{figures['dry_run_cpu_s']:>7.1f} {figures['dry_run_peak_rss_mb']:>8.0f}{stock_columns} "
            f"{figures['parse_wall_s']:>13.2f} {figures['parse_cpu_s']:>12.2f}",
            flush=True,
        )
    runs = [(size, 1, stock) for size in args.run_datasets for stock in ([False, True] if args.stock else [False])]
    if args.run_datasets and args.run_batches > 1:
        runs.append((max(args.run_datasets), args.run_batches, False))
    if runs:
        print("\nreal runs of tiny trainings (one epoch of a 4-unit GRU on 300 rows), --cores all:")
        print(
            f"{'datasets':>9} {'batches':>8} {'snakemake':>10} {'jobs':>5} {'wall s':>7} {'models/min':>11} {'snakemake CPU/job':>18} "
            f"{'preprocess job':>15} {'train job':>10} {'train loop':>11}"
        )
    record["runs"] = []
    for size, batches, stock in runs:
        run = real_run_figures(size, batches, stock)
        record["runs"].append(run)
        print(
            f"{run['datasets']:>9} {run['batches']:>8} {run['snakemake']:>10} {run['jobs']:>5} {run['wall_s']:>7.1f} "
            f"{run['models_per_min']:>11.0f} {run['snakemake_cpu_per_job_ms']:>15.0f} ms "
            f"{run['preprocess_job_median_s']:>13.2f} s "
            f"{run['train_job_median_s']:>8.2f} s {run['train_loop_median_s']:>9.2f} s",
            flush=True,
        )
    print(f"load average at end {os.getloadavg()[0]:.1f} (other work on this machine inflates wall times)")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with open(Path(args.out) / "scale.jsonl", "a") as handle:
        handle.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
