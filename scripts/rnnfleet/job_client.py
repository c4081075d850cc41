"""The process Snakemake starts for each preprocess and train job (scripts/job.py).

What it promises:
- It starts in a few hundredths of a second. A `script:` job first imports Snakemake and
  unpickles the job (about 0.1 CPU-s of each job, the time a one-day dataset's training
  takes); these jobs are shell commands that import only the standard library and
  rnnfleet's client code before handing the job to a warm worker.
- The rule writes the job's settings on the command line (rules/common.smk, job_command):
  `--text NAME VALUE` for paths and plain words, `--value NAME LITERAL` for numbers, flags,
  lists and dictionaries, read with ast.literal_eval (never eval or pickle).
- From there the job runs as it did from a `script:`: rnnfleet.warm.run_job with the same
  arguments, its stderr in the job's log, a failure as one line (rnnfleet.errors.job_guard).
"""

from __future__ import annotations

import argparse
import ast
import sys

# Job kind -> (the function that does the job, whether it gets the process's start time).
JOBS = {
    "preprocess": ("rnnfleet.jobs:preprocess_job", False),
    "train": ("rnnfleet.jobs:train_job", True),
}


def parse_job(arguments: list[str]) -> tuple[str, str, dict, bool]:
    """(job kind, log path, keyword arguments of the job's function, warm workers wanted)."""
    parser = argparse.ArgumentParser(prog="scripts/job.py", description=__doc__)
    parser.add_argument("kind", choices=JOBS)
    parser.add_argument("--log", required=True, help="the job's log file (stderr goes there)")
    parser.add_argument("--warm", type=ast.literal_eval, required=True, help="True: hand the job to a warm worker")
    parser.add_argument("--text", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    parser.add_argument("--value", nargs=2, action="append", default=[], metavar=("NAME", "LITERAL"))
    options = parser.parse_args(arguments)
    job_kwargs = dict(options.text)
    for name, literal in options.value:
        try:
            job_kwargs[name] = ast.literal_eval(literal)
        except (ValueError, SyntaxError):
            parser.error(f"--value {name}: not a Python literal: {literal!r}")
    return options.kind, options.log, job_kwargs, options.warm


def main(arguments: list[str]) -> None:
    kind, log_path, job_kwargs, warm = parse_job(arguments)
    sys.stderr = open(log_path, "w", buffering=1)

    from rnnfleet.errors import job_guard
    from rnnfleet.warm import process_started_at, run_job

    target, records_start = JOBS[kind]
    if records_start:
        job_kwargs["process_started_at"] = process_started_at()
    with job_guard(job_kwargs["dataset"]):
        run_job(target, job_kwargs, warm=warm)
