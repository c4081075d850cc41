"""Runs that end abruptly: the Snakemake process's side (the Snakefile calls these).

A run killed with SIGKILL (or by a power loss) leaves Snakemake's lock files, which make
every later run refuse to start until `snakemake --unlock`, and may leave hidden
`.partial` files from atomic writes. Each rnnfleet run holds a shared flock on
RUN_LOCK for as long as its process lives (the kernel drops it when the process dies,
however it dies); a run that can take it exclusively knows no other run is alive in
this folder, so what it finds of those two kinds was left by a dead run and goes.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO

SNAKEMAKE_DIR = Path(".snakemake")
RUN_LOCK = SNAKEMAKE_DIR / "rnnfleet-run.lock"
SNAKEMAKE_LOCKS = SNAKEMAKE_DIR / "locks"
PARTIAL_SUFFIX = ".partial"  # see checkpoint.atomic_write

_held_run_locks: list[IO[str]] = []  # open for the life of the process: closing would drop the lock


def claim_run_folder(output_folders: Iterable[str | os.PathLike]) -> bool:
    """Join the runs in the current folder. If no other run is alive here, first remove
    Snakemake's stale locks and stale `.partial` files in output_folders (one listing each).
    Returns whether this run was alone."""
    SNAKEMAKE_DIR.mkdir(exist_ok=True)
    run_lock = open(RUN_LOCK, "a")
    _held_run_locks.append(run_lock)
    try:
        fcntl.flock(run_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fcntl.flock(run_lock, fcntl.LOCK_SH)  # waits only while another run cleans up
        return False
    if SNAKEMAKE_LOCKS.is_dir() and any(SNAKEMAKE_LOCKS.iterdir()):
        shutil.rmtree(SNAKEMAKE_LOCKS)
        print("rnnfleet: removed the lock left by a run that was killed", file=sys.stderr)
    for folder in output_folders:
        remove_partial_files(folder)
    fcntl.flock(run_lock, fcntl.LOCK_SH)  # from now on other runs may start beside this one
    return True


def remove_partial_files(folder: str | os.PathLike) -> list[str]:
    """Delete the hidden `.partial` files of atomic writes that never finished."""
    removed = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith(".") and entry.name.endswith(PARTIAL_SUFFIX):
                    os.unlink(entry.path)
                    removed.append(entry.path)
    except FileNotFoundError:
        pass
    return removed


def stop_jobs_on_signals() -> None:
    """Make SIGTERM and SIGINT sent to Snakemake's own process stop the running jobs too.

    Snakemake alone answers SIGTERM by waiting for running jobs to finish, and SIGINT by
    waiting for its job threads: with trainings that run for hours, neither stops soon.
    Each job handles SIGTERM by cleaning up and exiting (errors.job_guard); a terminal's
    Ctrl+C reaches the jobs directly and the repeat here is harmless.
    """
    for number in (signal.SIGTERM, signal.SIGINT):
        snakemake_handler = signal.getsignal(number)

        def forward(signal_number, frame, snakemake_handler=snakemake_handler):
            terminate_descendants()
            if callable(snakemake_handler):
                snakemake_handler(signal_number, frame)
            elif signal_number == signal.SIGINT:
                raise KeyboardInterrupt

        signal.signal(number, forward)


def terminate_descendants() -> None:
    import psutil  # a dependency of Snakemake

    for process in psutil.Process().children(recursive=True):
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            pass
