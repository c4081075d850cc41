"""Runs that end abruptly: the Snakemake process's side (the Snakefile calls these).

A run killed with SIGKILL (or by a power loss) leaves Snakemake's lock files, which make
every later run refuse to start until `snakemake --unlock`, and may leave hidden
`.partial` files from atomic writes. Each rnnfleet run holds an exclusive lock on a file of
its own in RUNS_DIR for as long as its process lives (the OS drops it when the process dies,
however it dies, see rnnfleet.runner.file_locks); a run that can lock every other file there knows
no other run is alive in this folder, so what it finds of those two kinds was left by a
dead run and goes. Where the platform has no such lock, nothing is removed: Snakemake's own
`--unlock` is then the way out, as without rnnfleet.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from rnnfleet.runner.file_locks import os_locks_available, try_lock, wait_for_lock

SNAKEMAKE_DIR = Path(".snakemake")
RUNS_DIR = SNAKEMAKE_DIR / "rnnfleet-runs"  # one locked file per live run
CLAIM_LOCK = RUNS_DIR / "claim.lock"  # held while a starting run looks at the others
SNAKEMAKE_LOCKS = SNAKEMAKE_DIR / "locks"
PARTIAL_SUFFIX = ".partial"  # see checkpoint.atomic_write

_held_run_locks: list[IO[str]] = []  # open for the life of the process: closing would drop the lock


def claim_run_folder(output_folders: Iterable[str | os.PathLike]) -> bool:
    """Join the runs in the current folder. If no other run is alive here, first remove
    Snakemake's stale locks and stale `.partial` files in output_folders (one listing each).
    Returns whether this run was alone (False also where the platform cannot tell)."""
    if not os_locks_available():
        return False
    RUNS_DIR.mkdir(parents=True, exist_ok=True)
    claim_lock = wait_for_lock(CLAIM_LOCK)  # another starting run may be cleaning up
    try:
        _held_run_locks.append(wait_for_lock(RUNS_DIR / f"{os.getpid()}.lock"))
        if not _other_runs_alive():
            _remove_what_dead_runs_left(output_folders)
            return True
        return False
    finally:
        claim_lock.close()


def _other_runs_alive() -> bool:
    """Whether any other run holds its file; files of dead runs are removed on the way."""
    alive = False
    own_name = f"{os.getpid()}.lock"
    for entry in os.scandir(RUNS_DIR):
        if entry.name in (own_name, CLAIM_LOCK.name):
            continue
        lock_file = try_lock(entry.path)
        if lock_file is None:
            alive = True
        else:
            lock_file.close()
            Path(entry.path).unlink(missing_ok=True)
    return alive


def _remove_what_dead_runs_left(output_folders: Iterable[str | os.PathLike]) -> None:
    if SNAKEMAKE_LOCKS.is_dir() and any(SNAKEMAKE_LOCKS.iterdir()):
        shutil.rmtree(SNAKEMAKE_LOCKS)
        print("rnnfleet: removed the lock left by a run that was killed", file=sys.stderr)
    for folder in output_folders:
        remove_partial_files(folder)


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
