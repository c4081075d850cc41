"""Retries that happen only when they can help: Snakemake retries a failed job while its rule
has `retries:` left, whatever the error. A training is worth retrying only after it ran out of
GPU memory (the retry declares more), was stopped (a batch system's cancel) or died without a
message; for any other error its log's last line ends with errors.NOT_RETRIED, or says its
warm worker was killed by a signal (errors.KILLED_BY: most often the kernel's OOM killer, out
of host memory), and with this hook Snakemake does not launch it again.

What it promises: `apply()` replaces the property `snakemake.jobs.Job.restart_times` (read by
Snakemake's scheduler when a job fails, to decide whether to launch it again) with one that
returns 0 for a job of the rules named whose log's last marked line ends with NOT_RETRIED or is
an ERROR line with KILLED_BY (or that has no such line, where retry_silent_deaths() says no),
and the stock value otherwise. RNNFLEET_STOCK_RETRIES=1 turns it off. Where Snakemake has no such property, nothing is replaced and one
warning line says so; the job then stops at once on each further attempt (runner.jobs).
"""

from __future__ import annotations

import os
import sys

from rnnfleet.errors import ERROR_PREFIX, KILLED_BY, NOT_RETRIED, last_marked_line

# Set (to anything): stock Snakemake retries, for the test of what a job does without this hook.
RETRY_POLICY_OFF = "RNNFLEET_STOCK_RETRIES"


def retry_can_help(log_path: str) -> bool:
    """False when the job's log says its error would come back on a retry."""
    line = last_marked_line(log_path)
    return line is None or not (NOT_RETRIED in line or (line.startswith(ERROR_PREFIX) and KILLED_BY in line))


def apply(rule_names: tuple[str, ...], warn: bool = True, retry_silent_deaths=lambda: True) -> bool:
    """Have Snakemake retry jobs of `rule_names` only when retry_can_help; True if applied.
    retry_silent_deaths(): whether a job that died without a line is retried (the Snakefile:
    on a cluster, where a cancelled job dies so; not on this machine, where such a death is
    the kernel's OOM killer far more often than anything twice the GPU memory would cure)."""
    from snakemake.jobs import Job

    if os.environ.get(RETRY_POLICY_OFF):
        return False
    stock = Job.__dict__.get("restart_times")
    if isinstance(stock, property) and getattr(stock.fget, "__rnnfleet_retry_policy__", False):
        return True  # applied already (the Snakefile is parsed more than once in a process)
    if not isinstance(stock, property) or stock.fget is None:
        if warn:
            print(
                "rnnfleet: this Snakemake has no Job.restart_times property: a training that failed with an "
                "error more memory cannot fix is launched again and stops at once",
                file=sys.stderr,
            )
        return False

    def restart_times(job) -> int:
        times = stock.fget(job)
        if times and job.rule.name in rule_names and job.log:
            log_path = str(job.log[0])
            if not retry_can_help(log_path) or (last_marked_line(log_path) is None and not retry_silent_deaths()):
                return 0
        return times

    restart_times.__rnnfleet_retry_policy__ = True
    restart_times.__rnnfleet_stock__ = stock.fget
    Job.restart_times = property(restart_times)
    return True
