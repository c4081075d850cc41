"""The run's estimate of the time it has left, from the trainings it has finished.

Snakemake's own progress line counts steps, and a fleet's steps differ: a preprocess job takes
a fraction of a training. Once the first trainings of a run have finished, a thread of the
Snakemake process says how many of its trainings are done and about how long the rest take at
the rate so far, each time another tenth of them is done. It learns what is done from the
metrics files the trainings write (one listing of their folder a second), so it works the same
whatever runs the jobs (warm workers, cold processes, a cluster).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

POLL_SECONDS = 1.0
REPORTS = 10  # a line each time another tenth of the trainings is done


def remaining_line(done: int, total: int, elapsed: float) -> str:
    """The line for `done` of `total` trainings finished `elapsed` seconds into the run."""
    left = (total - done) * elapsed / done
    return (
        f"rnnfleet: {done} of {total} trainings done in {duration(elapsed)}; "
        f"about {duration(left)} left at the rate so far"
    )


def duration(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"


def finished(wanted: dict[str, set[str]], since: float) -> int:
    """How many of the files `wanted` names ({folder: file names}) were written at or after
    `since` (one listing per folder)."""
    done = 0
    for folder, names in wanted.items():
        try:
            with os.scandir(folder) as entries:
                done += sum(1 for entry in entries if entry.name in names and entry.stat().st_mtime >= since)
        except OSError:
            continue
    return done


def watch_trainings(metrics_paths: list[str], started: float, say: Callable[[str], None]) -> threading.Thread | None:
    """Start the thread that says the run's remaining time (see the module doc) for the
    trainings whose metrics files are metrics_paths; None where there are fewer than two."""
    total = len(metrics_paths)
    if total < 2:
        return None
    since = started - 1  # file times are as coarse as a second on some file systems
    wanted: dict[str, set[str]] = {}
    for path in metrics_paths:
        wanted.setdefault(os.path.dirname(path) or ".", set()).add(os.path.basename(path))

    def watch() -> None:
        reported = 0
        while reported < total:
            time.sleep(POLL_SECONDS)
            done = finished(wanted, since)
            if done >= total:
                return
            if done > reported and (not reported or done * REPORTS // total > reported * REPORTS // total):
                say(remaining_line(done, total, time.time() - started))
                reported = done

    thread = threading.Thread(target=watch, name="rnnfleet-progress", daemon=True)
    thread.start()
    return thread


def metrics_of_planned_trainings(jobs, rule: str = "train") -> list[str]:
    """The metrics files of the jobs of `rule` among `jobs` (a DAG's jobs to run)."""
    return [str(job.output.metrics) for job in jobs if job.rule.name == rule]
