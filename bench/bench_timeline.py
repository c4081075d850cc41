"""Where the seconds of one real run go: every process the run starts, when, for how long.

    .venv/bin/python bench/bench_timeline.py --datasets 6 --rows 5000 --epochs 2
    .venv/bin/python bench/bench_timeline.py --datasets 200 --rows 1440 --epochs 2

Runs `snakemake --cores <cores>` on generated bars with bench_speed.py's model and settings
and samples the run's processes every 20 ms: Snakemake's own, each job's script (the thin
client), the warm server and its children (each runs one job after another, so there are
fewer children than jobs). Prints, per kind of process, their number, median wall time
and median CPU time, and the run's phases: Snakemake's start-up,
the warm server's imports, the first and the last training, and what follows the last one.
Process start times come from the kernel (Linux), so they do not depend on the sampling.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import yaml

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "scripts"))

from bench_speed import REPO, own_warm_server_env, workflow_config  # noqa: E402

from rnnfleet.synthetic import write_synthetic_csv  # noqa: E402

SAMPLE_SECONDS = 0.02
RULES = ("preprocess", "train", "summarize", "plots")


@dataclass
class Seen:
    kind: str
    command: str
    start: float  # seconds since the run started
    end: float
    cpu: float = 0.0


def started_at(process: psutil.Process) -> float:
    """When the process was created, from the kernel's clock ticks where /proc has them (psutil
    places Linux starts up to a second early: it reads the boot time in whole seconds)."""
    try:
        with open(f"/proc/{process.pid}/stat") as stat, open("/proc/uptime") as uptime:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
            return time.time() - (float(uptime.read().split()[0]) - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return process.create_time()


def kind_of(process: psutil.Process, servers: set[int], seen: dict[int, Seen]) -> str | None:
    """'warm server', 'warm child', '<rule> client', '<rule> worker' (a process a client
    started) or None (shells, and programs started by the processes above: a fork that
    has not run exec yet still shows its parent's command line)."""
    command = " ".join(process.cmdline())
    parent = seen.get(process.ppid())
    if parent is not None and parent.kind.endswith(" client") and command and parent.command == command:
        return parent.kind.replace(" client", " worker")
    if "rnnfleet.runner.warm" in command:
        return "warm child" if process.ppid() in servers else "warm server"
    for rule in RULES:  # scripts/job.py <rule> (preprocess, train), or a script: job's .<rule>.py
        if re.search(rf"\.{rule}\.py\b|scripts/job\.py {rule}\b", command):
            return f"{rule} client"
    return None


def run_and_watch(command: list[str], workdir: Path) -> tuple[float, float, dict[int, Seen]]:
    """Run `command`; return its wall time, Snakemake's own CPU time and the processes seen."""
    started = time.time()
    log = open(workdir / "snakemake.log", "w+")  # noqa: SIM115 - a pipe read only at the end would fill and block
    snakemake = subprocess.Popen(command, cwd=workdir, stdout=subprocess.DEVNULL, stderr=log, env=own_warm_server_env())
    main = psutil.Process(snakemake.pid)
    seen: dict[int, Seen] = {}
    servers: set[int] = set()
    snakemake_cpu = 0.0
    while snakemake.poll() is None:
        now = time.time() - started
        try:
            snakemake_cpu = sum(main.cpu_times()[:2])
            processes = main.children(recursive=True)
            for server in servers:  # a server outlives the job that started it
                processes += psutil.Process(server).children()
        except psutil.Error:
            processes = []
        for process in processes:
            try:
                command = " ".join(process.cmdline())
                if not command:
                    continue  # exited, not reaped yet
                known = seen.get(process.pid)
                if known is None or known.command != command:
                    kind = kind_of(process, servers, seen)
                    if kind is None or (known is not None and kind != known.kind):
                        seen.pop(process.pid, None)  # it ran exec: not one of ours after all
                        continue
                    if kind == "warm server":
                        servers.add(process.pid)
                    known = seen.setdefault(process.pid, Seen(kind, command, started_at(process) - started, now))
                    known.command = command
                known.end = now
                known.cpu = sum(process.cpu_times()[:2])
            except psutil.Error:
                continue
        time.sleep(SAMPLE_SECONDS)
    log.seek(0)
    if snakemake.wait() != 0:
        raise SystemExit(f"the run failed:\n{log.read()[-3000:]}")
    log.close()
    return time.time() - started, snakemake_cpu, seen


def print_timeline(wall: float, snakemake_cpu: float, seen: dict[int, Seen]) -> None:
    by_kind: dict[str, list[Seen]] = {}
    for process in sorted(seen.values(), key=lambda process: process.start):
        by_kind.setdefault(process.kind, []).append(process)
    jobs = sum(len(by_kind.get(f"{rule} client", [])) for rule in RULES)
    print(
        f"run: {wall:.2f} s wall; Snakemake's own CPU {snakemake_cpu:.2f} s ({snakemake_cpu / max(jobs, 1):.3f} s per job)"
    )
    print(f"{'process':<18}{'count':>6}{'median wall':>13}{'median CPU':>12}{'total CPU':>11}")
    for kind, processes in by_kind.items():
        walls = [process.end - process.start for process in processes]
        cpus = [process.cpu for process in processes]
        print(
            f"{kind:<18}{len(processes):>6}{statistics.median(walls):>12.3f}s{statistics.median(cpus):>11.3f}s"
            f"{sum(cpus):>10.2f}s"
        )
    clients = {rule: by_kind.get(f"{rule} client", []) for rule in RULES}
    first_job = min((p.start for ps in clients.values() for p in ps), default=wall)
    children = by_kind.get("warm child", [])
    trainings = clients["train"]
    print("phases (seconds since the run started):")
    print(f"  {first_job:7.2f}  first job starts (Snakemake's imports, parsing, DAG)")
    if children:
        print(f"  {children[0].start:7.2f}  first warm child (the warm server has imported torch)")
    if trainings:
        print(f"  {trainings[0].start:7.2f}  first training starts")
        print(f"  {max(p.end for p in trainings):7.2f}  last training ends")
    for rule in ("summarize", "plots"):
        for process in clients[rule]:
            print(f"  {process.start:7.2f}  {rule} starts, {process.end - process.start:.2f} s")
    print(f"  {wall:7.2f}  Snakemake exits")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", type=int, default=6)
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rnnfleet-timeline-") as root:
        data_dir, workdir = Path(root) / "data", Path(root) / "run"
        for index in range(args.datasets):
            write_synthetic_csv(data_dir / f"S{index:04d}_1m.csv", args.rows, 1000 + index)
        workdir.mkdir()
        (workdir / "config.yaml").write_text(yaml.safe_dump(workflow_config(args, data_dir)))
        command = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir)]
        print(f"{args.datasets} datasets x {args.rows} rows, {args.epochs} epochs, {args.cores} cores")
        print_timeline(*run_and_watch([*command, "--cores", str(args.cores)], workdir))


if __name__ == "__main__":
    main()
