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
    variants = {"": {}, "stock_": {"RNNFLEET_STOCK_SNAKEMAKE": "1"}} if stock else {"": {}}
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


def real_run_figures(datasets: int, batches: int = 1, stock: bool = False) -> dict:
    """One run over all datasets, or `batches` runs of a slice each (the last one summarises);
    `stock`: without the workflow's Snakemake speed-ups."""
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
        env = {"RNNFLEET_STOCK_SNAKEMAKE": "1" if stock else "0"}
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


def main():
    args = parse_args()
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
