"""rnnfleet.hooks.snakemake_speedups in real snakemake runs: it changes nothing Snakemake plans
(same jobs and reasons), and tunes garbage collection only when on."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
from conftest import PROGRAMS, REPO, TINY_ROWS, add_datasets, write_config, write_synthetic_csv
from conftest import snakemake as run_snakemake

from rnnfleet.hooks import PATCHES_OFF_VARIABLE, snakemake_speedups

PATCHES_LINE = re.compile(r"rnnfleet: Snakemake patches on: (.*)")
# The bench switch's value: "all" leaves every patch out (stock Snakemake), "" none.
WITHOUT = {"1": "all", "0": ""}


def job_lines(dry_run_output: str) -> list[str]:
    """The dry-run's job listing without its timestamps and run id; file lists in reasons
    sorted (Snakemake prints them from sets, in an order that varies between runs)."""
    kept = []
    for line in dry_run_output.splitlines():
        if re.match(r"\s*(\[\w{3} \w{3}|Date:|Workflow ID:)", line) or PATCHES_LINE.search(line):
            continue
        if line.strip().startswith("reason:"):
            parts = line.split("reason: ", 1)[1].split("; ")
            line = "reason: " + "; ".join(
                f"{label}: {', '.join(sorted(files.split(', ')))}"
                for label, files in (part.split(": ", 1) for part in parts)
            )
        kept.append(line)
    return kept


def job_blocks(dry_run_output: str) -> tuple[list[str], list[str]]:
    """(each job's block of lines, the other lines), both sorted: Snakemake lists jobs in an
    order that follows object hashes, which varies from run to run."""
    blocks, other = [], []
    for line in job_lines(dry_run_output):
        if re.match(r"(local)?rule \w+:", line):
            blocks.append(line)
        elif blocks and blocks[-1] is not None and (line.startswith((" ", "reason:"))):
            blocks[-1] += "\n" + line
        else:
            other.append(line)
            blocks.append(None)
    return sorted(filter(None, blocks)), sorted(other)


def test_dry_run_lists_the_same_jobs_and_reasons_with_and_without_speedups(tmp_path):
    add_datasets(tmp_path, [f"D{n}_1m" for n in range(6)])
    write_config(tmp_path, data_dir="data", predict={"datasets": ["D0_1m"]})
    run_snakemake(tmp_path, "--until", "preprocess")  # some jobs done: reasons differ per job
    changed_csv = tmp_path / "data" / "D1_1m.csv"
    write_synthetic_csv(changed_csv, TINY_ROWS, seed=99)  # and an input newer than its output
    later = time.time() + 10
    os.utime(changed_csv, (later, later))
    listings = {}
    for stock in ("1", "0"):
        result = run_snakemake(tmp_path, "-n", "-p", "--verbose", env={PATCHES_OFF_VARIABLE: WITHOUT[stock]})
        output = result.stdout + result.stderr
        listings[stock] = job_blocks(output)
        applied = PATCHES_LINE.search(output).group(1)
        assert (applied == "none") == (stock == "1"), applied
    jobs = listings["0"][0]
    assert any("reason: Updated input files: data/D1_1m.csv" in job for job in jobs)
    assert sum(job.startswith("rule train:") for job in jobs) == 6
    assert listings["0"] == listings["1"]


@pytest.mark.parametrize("stock", ["1", "0"])
def test_garbage_collection_is_tuned_only_with_the_speedups(stock):
    result = subprocess.run(
        [sys.executable, str(PROGRAMS / "gc_settings.py"), str(REPO / "scripts")],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, PATCHES_OFF_VARIABLE: WITHOUT[stock]},
    )
    first_threshold, frozen = map(int, result.stdout.split())
    if stock == "1":
        assert (first_threshold, frozen) == (700, 0)
    else:
        assert first_threshold == snakemake_speedups.GC_FIRST_THRESHOLD and frozen > 1000
