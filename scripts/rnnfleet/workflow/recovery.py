"""Runs that end abruptly: the Snakemake process's side (the Snakefile calls these).

A run killed with SIGKILL (or by a power loss) leaves Snakemake's lock files, which make
every later run refuse to start until `snakemake --unlock`, and may leave hidden
`.partial` files from atomic writes. Each rnnfleet run holds an exclusive lock on a file of
its own in RUNS_DIR for as long as its process lives (the OS drops it when the process dies,
however it dies, see rnnfleet.runner.file_locks); a run that can lock every other file there knows
no other run is alive in this folder, so what it finds of those two kinds was left by a
dead run and goes. Where the platform has no such lock, nothing is removed: Snakemake's own
`--unlock` is then the way out, as without rnnfleet.

A run killed alone (`kill -9` of Snakemake's process, not of its jobs) leaves its jobs
running. Each of them holds a lock file of its own in RUNS_DIR while it works (job-*.lock,
rnnfleet.runner.orphans) and stops once its run's file is no longer locked. A starting run that
finds no other run alive but such jobs still working waits for them to end (up to
ORPHAN_WAIT_SECONDS) before it removes anything, and refuses to run if they do not.
"""

from __future__ import annotations

import os
import platform
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from rnnfleet.errors import STOP_SIGNALS, UserError, room_left
from rnnfleet.runner.file_locks import os_locks_available, try_lock, wait_for_lock
from rnnfleet.runner.run_files import (
    ALIVE_SUFFIX,
    JOB_PREFIX,
    RUN_VARIABLE,
    RUNS_DIR,
    SNAKEMAKE_DIR,
    run_alive_path,
)

CLAIM_LOCK = RUNS_DIR / "claim.lock"  # held while a starting run looks at the others
SNAKEMAKE_LOCKS = SNAKEMAKE_DIR / "locks"
PARTIAL_SUFFIX = ".partial"  # see checkpoint.atomic_write
ORPHAN_WAIT_SECONDS = 60.0  # jobs of a killed run stop within about orphans.STOP_GRACE_SECONDS

_held_run_locks: list[IO[str]] = []  # open for the life of the process: closing would drop the lock


WORKING_MARK = "working\n"  # written into a run's file once it runs its jobs (mark_run_working)


# Less room than this in .snakemake's file system and Snakemake's lock (the list of every input
# and output), its records and its log cannot be written: it would end in tracebacks.
SNAKEMAKE_ROOM_BYTES = 1024 * 1024


class SnakemakeFolderFull(UserError):
    """The file system of .snakemake (Snakemake's locks, records and logs) is full."""


class JobsOfKilledRunAlive(UserError):
    """Jobs of a run that was killed still work in this folder and did not stop in time."""


class RunWorkingUnlocked(UserError):
    """Another run works in this folder, and Snakemake's lock, which would refuse this one,
    was removed meanwhile (`snakemake --unlock`)."""


def run_lock_path(run_id: str) -> Path:
    """The file a run holds and other runs test."""
    return RUNS_DIR / f"run-{run_id}.lock"


def claim_run_folder(output_folders: Iterable[str | os.PathLike]) -> bool:
    """Join the runs in the current folder and name this run to its jobs (RUN_VARIABLE). If
    no other run is alive here, first wait for the jobs of dead runs to end, then remove
    Snakemake's stale locks and stale `.partial` files in output_folders (one listing each).
    Returns whether this run was alone (False also where the platform cannot tell). Raises
    SnakemakeFolderFull when .snakemake has no room (check_snakemake_folder_room),
    JobsOfKilledRunAlive when such jobs still work after ORPHAN_WAIT_SECONDS, and
    RunWorkingUnlocked when another run works here (mark_run_working) while Snakemake's lock
    folder is empty: its lock was removed (`snakemake --unlock`), and Snakemake would let this
    run re-run and delete what that one is making."""
    check_snakemake_folder_room()
    if not os_locks_available():
        return False
    RUNS_DIR.mkdir(parents=True, exist_ok=True)
    claim_lock = wait_for_lock(CLAIM_LOCK)  # another starting run may be cleaning up
    try:
        run_id = f"{os.getpid()}-{secrets.token_hex(4)}"  # unique: a pid can come back
        for path in (run_lock_path(run_id), run_alive_path(run_id)):
            _held_run_locks.append(wait_for_lock(path))
        os.environ[RUN_VARIABLE] = f"{platform.node()}/{run_id}"
        own_names = {run_lock_path(run_id).name, run_alive_path(run_id).name, CLAIM_LOCK.name}
        if _others_alive(own_names)[0]:
            working = _working_runs(own_names)
            if working and not _snakemake_locks_held():
                raise RunWorkingUnlocked(
                    f"another run (pid {', '.join(working)}) is working in this folder and Snakemake's lock "
                    f"({SNAKEMAKE_LOCKS}) was removed meanwhile (snakemake --unlock?): nothing was run; wait for "
                    "that run to end, then run again"
                )
            return False
        _wait_for_jobs_of_dead_runs(own_names)
        _remove_what_dead_runs_left(output_folders)
        return True
    finally:
        claim_lock.close()


def check_snakemake_folder_room() -> None:
    """Raise SnakemakeFolderFull when .snakemake's file system (the working folder's where it
    is not made yet) has less than SNAKEMAKE_ROOM_BYTES left for this user; nothing where the
    OS does not say (Windows)."""
    room = room_left(SNAKEMAKE_DIR if SNAKEMAKE_DIR.is_dir() else Path("."))
    if room is not None and room < SNAKEMAKE_ROOM_BYTES:
        import logging

        # Snakemake's log file is there too: each line its handler cannot write would print a traceback.
        logging.raiseExceptions = False
        raise SnakemakeFolderFull(
            f"{SNAKEMAKE_DIR.absolute()}: cannot be written: its file system is full ({room} bytes left), and "
            "Snakemake keeps its lock, records and logs there; free some space there and run again; nothing was run"
        )


def _others_alive(own_names: set[str]) -> tuple[bool, list[str]]:
    """(whether another run holds its file, the files held by working jobs); files no one
    holds are removed on the way."""
    runs_alive, job_files = False, []
    for entry in os.scandir(RUNS_DIR):
        if entry.name in own_names:
            continue
        lock_file = try_lock(entry.path)
        if lock_file is None:
            if entry.name.startswith(JOB_PREFIX):
                job_files.append(entry.path)
            elif not entry.name.endswith(ALIVE_SUFFIX):  # held an instant by a job's test: not a sign
                runs_alive = True
        else:
            lock_file.close()
            Path(entry.path).unlink(missing_ok=True)
    return runs_alive, job_files


def mark_run_working() -> None:
    """Say in this run's file that it runs jobs (onstart: not a dry-run, Snakemake's lock held)."""
    if _held_run_locks:
        _held_run_locks[0].write(WORKING_MARK)
        _held_run_locks[0].flush()


def _working_runs(own_names: set[str]) -> list[str]:
    """The pids of the other runs whose files say they run jobs (read, not locked: the lock is advisory)."""
    pids = []
    for entry in os.scandir(RUNS_DIR):
        if entry.name in own_names or not entry.name.startswith("run-") or not entry.name.endswith(".lock"):
            continue
        try:
            with open(entry.path) as handle:
                if WORKING_MARK in handle.read():
                    pids.append(entry.name.removeprefix("run-").partition("-")[0])
        except OSError:  # gone meanwhile, or a platform whose locks also bar reading: not known to work
            continue
    return pids


def _snakemake_locks_held() -> bool:
    try:
        return any(SNAKEMAKE_LOCKS.iterdir())
    except OSError:
        return False


def _wait_for_jobs_of_dead_runs(own_names: set[str]) -> None:
    """Wait until no job holds its file. The files are listed again here, after the runs
    were seen dead: a job that saw its run alive (orphans.publishing) took its file before,
    so it is listed, and the wait covers whatever it still renames into place."""
    job_files = _others_alive(own_names)[1]
    if not job_files:
        return
    print(
        f"rnnfleet: waiting for {len(job_files)} job(s) of a run that was killed to stop (pid {_job_pids(job_files)})",
        file=sys.stderr,
        flush=True,
    )
    deadline = time.monotonic() + ORPHAN_WAIT_SECONDS
    while job_files:
        if time.monotonic() > deadline:
            pids = _job_pids(job_files)
            raise JobsOfKilledRunAlive(
                f"{len(job_files)} job(s) of an earlier run in this folder that was killed still run (pid {pids}) "
                f"and did not stop within {ORPHAN_WAIT_SECONDS:g} s; nothing was run: stop them "
                f"(kill {pids.replace(',', '')}) and run again"
            )
        time.sleep(0.1)
        job_files = _others_alive(own_names)[1]


def _job_pids(job_files: list[str]) -> str:
    """The pids the jobs wrote into their files (rnnfleet.runner.orphans), for messages."""
    pids = []
    for path in job_files:
        try:
            pids.append(Path(path).read_text().strip() or "?")
        except OSError:
            pids.append("?")
    return ", ".join(pids)


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
    """Make SIGTERM and SIGINT sent to Snakemake's own process stop the running jobs too,
    and SIGHUP (a terminal or ssh connection closed) and SIGQUIT end the run as SIGTERM does.

    Snakemake alone answers SIGTERM by waiting for running jobs to finish, and SIGINT by
    waiting for its job threads: with trainings that run for hours, neither stops soon.
    SIGHUP and SIGQUIT it leaves to the OS, which ends it at once: no after-failure table,
    no previous models put back. Each job handles these signals by cleaning up and exiting
    (errors.job_guard); a terminal's Ctrl+C (or hang-up) reaches the jobs directly and the
    repeat here is harmless. A signal ignored at the start (`nohup` ignores SIGHUP) stays ignored.
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
    as_sigterm = signal.getsignal(signal.SIGTERM)
    for name in ("SIGHUP", "SIGQUIT"):  # not on Windows
        number = getattr(signal, name, None)
        if number is not None and signal.getsignal(number) is not signal.SIG_IGN:
            signal.signal(number, as_sigterm)


def hold_off_stop_signals() -> None:
    """For the rest of the run, which writes what it delivers after failures (onerror) and
    ends: a further stop signal (a second Ctrl+C, as impatient hands press it) gets one line
    and does not interrupt the writing, which would end it with a traceback and without its
    last lines. Outside the main thread (where signals cannot be set) nothing changes."""
    said = []

    def hold(_signal_number, _frame) -> None:
        if not said:
            said.append(True)
            print(
                "rnnfleet: still writing the results of the datasets that are done; the run ends right after",
                file=sys.stderr,
                flush=True,
            )

    try:
        for number in STOP_SIGNALS:
            if signal.getsignal(number) is not signal.SIG_IGN:
                signal.signal(number, hold)
    except ValueError:  # not the main thread
        pass


def terminate_descendants() -> None:
    import psutil  # a dependency of Snakemake

    for process in psutil.Process().children(recursive=True):
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            pass
