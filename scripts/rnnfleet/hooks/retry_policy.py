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
and the stock value otherwise. Applied by rnnfleet.hooks.apply alone, behind its one gate;
without it (another Snakemake, or the bench switch leaving `retry_policy` out) Snakemake
launches such a job again and it stops at once on each further attempt (runner.jobs).
"""

from __future__ import annotations

from rnnfleet.errors import ERROR_PREFIX, KILLED_BY, NOT_RETRIED, last_marked_line


def retry_can_help(log_path: str) -> bool:
    """False when the job's log says its error would come back on a retry."""
    line = last_marked_line(log_path)
    return line is None or not (NOT_RETRIED in line or (line.startswith(ERROR_PREFIX) and KILLED_BY in line))


def apply(rule_names: tuple[str, ...], retry_silent_deaths=lambda: True) -> None:
    """Have Snakemake retry jobs of `rule_names` only when retry_can_help.
    retry_silent_deaths(): whether a job that died without a line is retried (the Snakefile:
    on a cluster, where a cancelled job dies so; not on this machine, where such a death is
    the kernel's OOM killer far more often than anything twice the GPU memory would cure)."""
    from snakemake.jobs import Job

    stock = Job.__dict__["restart_times"].fget
    stock = getattr(stock, "__rnnfleet_stock__", stock)  # the Snakefile is parsed more than once in a process

    def restart_times(job) -> int:
        times = stock(job)
        if times and job.rule.name in rule_names and job.log:
            log_path = str(job.log[0])
            if not retry_can_help(log_path) or (last_marked_line(log_path) is None and not retry_silent_deaths()):
                return 0
        return times

    restart_times.__rnnfleet_stock__ = stock
    Job.restart_times = property(restart_times)
