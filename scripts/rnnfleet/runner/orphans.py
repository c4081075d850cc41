"""A job's side of its run's life: a job whose run is gone stops, and publishes nothing.

`kill -9` of Snakemake's process alone leaves its jobs running (its shell's children, and
warm children, which are not even in its process tree); a later run would then work beside
them while they overwrite its results with the killed run's settings. So:

- Each run's Snakemake process holds two files in recovery.RUNS_DIR locked for as long as
  it lives, and names the run to its jobs in recovery.RUN_VARIABLE (`<host>/<run id>`).
  A lock is what tells a run is alive, rather than Snakemake's pid (with its start time):
  the OS drops it however the process dies, it reads the same on Linux, macOS and Windows,
  and it is the very test a starting run makes (recovery.claim_run_folder), so a job and a
  new run never disagree about whether the old run lives. A watch of the parent process
  (PR_SET_PDEATHSIG, getppid) would not do: a job's parent is Snakemake's shell, and a warm
  child's is the warm server, which outlives every run.
- While a job works (run_job_guard) it holds a lock file of its own there (job-*.lock,
  its pid inside), so a starting run sees it and waits for it to end before it treats the
  folder as free. A job whose run is gone at its start does not start.
- Every POLL_SECONDS a thread of the job tests its run's file; once the run is gone the job
  is stopped as by SIGTERM (errors.job_guard: its half-written files removed), and ended
  after STOP_GRACE_SECONDS if that did not end it.
- checkpoint.atomic_write renames a finished file into place (publishing, installed as its
  publish guard when this module is imported) only while the job holds its
  lock and has just seen its run alive (publishing). The run can still die between that test and
  the rename; but a starting run waits for the lock, so no write of a dead run's job lands
  after a new run has claimed the folder.

Nothing is watched where no run is named, where it runs on another machine (a cluster
node: its file locks may not reach the Snakemake host) or where the runs' folder is not
visible (a container that does not see it): jobs then behave as before.
"""

from __future__ import annotations

import contextlib
import os
import platform
import secrets
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from rnnfleet.atomic_files import guard_publishing
from rnnfleet.errors import UserError, job_guard
from rnnfleet.runner.file_locks import held_elsewhere, try_lock
from rnnfleet.runner.run_files import JOB_PREFIX, RUN_VARIABLE, RUNS_DIR, run_alive_path

POLL_SECONDS = 0.25
STOP_GRACE_SECONDS = 20.0
STOPPED_EXIT_STATUS = 128 + 15  # as after SIGTERM

_job_lock: IO | None = None  # this process's job file while it holds one
_watching = False  # a job of this process is watched already (nested job_guard)


class RunGone(UserError):
    """The run that started this job is no longer alive."""


def watched_run() -> tuple[int, Path] | None:
    """(pid of the run's Snakemake process, the file it holds) for the run that started this
    process, or None where none can be watched (see the module doc)."""
    reference = os.environ.get(RUN_VARIABLE)
    if not reference:
        return None
    host, _, run_id = reference.rpartition("/")
    if host != platform.node() or not RUNS_DIR.is_dir():
        return None
    run_pid = run_id.partition("-")[0]
    if not run_pid.isdigit():
        return None
    return int(run_pid), run_alive_path(run_id).absolute()


def run_alive(alive_file: Path) -> bool:
    return held_elsewhere(alive_file)


@contextlib.contextmanager
def job_lock_held() -> Iterator[None]:
    """Hold this process's job file locked (once: nested uses share it)."""
    global _job_lock
    if _job_lock is not None:
        yield
        return
    _job_lock = _take_job_lock()
    try:
        yield
    finally:
        lock_file, _job_lock = _job_lock, None
        lock_file.close()  # before the unlink: Windows removes no open file
        Path(lock_file.name).unlink(missing_ok=True)


def _take_job_lock() -> IO:
    """A new job file in RUNS_DIR, locked, with this pid inside. A starting run removes the
    files it can lock; one removed between our open and our lock is not seen: take another."""
    while True:
        path = (RUNS_DIR / f"{JOB_PREFIX}{os.getpid()}-{secrets.token_hex(4)}.lock").absolute()
        lock_file = try_lock(path)
        if lock_file is None:
            continue
        try:
            still_there = os.path.samestat(os.fstat(lock_file.fileno()), os.stat(path))
        except FileNotFoundError:
            still_there = False
        if still_there:
            lock_file.write(str(os.getpid()))
            lock_file.flush()
            return lock_file
        lock_file.close()


@contextlib.contextmanager
def stop_if_run_goes(subject: str) -> Iterator[None]:
    """Run the body as a job of a live run: refused if the run is gone already, stopped if
    it goes meanwhile (see the module doc)."""
    global _watching
    run = watched_run()
    if run is None or _watching or run[0] == os.getpid():
        yield
        return
    alive_file = run[1]
    with job_lock_held():
        if not run_alive(alive_file):
            raise RunGone(f"{subject}: not started: the Snakemake run that started this job is gone")
        done = threading.Event()
        watcher = threading.Thread(target=_watch, args=(alive_file, done), name="rnnfleet-run-watch", daemon=True)
        _watching = True
        watcher.start()
        try:
            yield
        finally:
            done.set()
            watcher.join()  # after this no stop can arrive: the caller's signal handlers may go
            _watching = False


def _watch(alive_file: Path, done: threading.Event) -> None:
    while not done.wait(POLL_SECONDS):
        if run_alive(alive_file):
            continue
        print(
            "rnnfleet: the Snakemake run that started this job is gone (killed?): stopping the job",
            file=sys.stderr,
            flush=True,
        )
        _stop_main_thread()
        if not done.wait(STOP_GRACE_SECONDS):
            print(f"rnnfleet: the job did not stop within {STOP_GRACE_SECONDS:.0f} s: ending it", file=sys.stderr)
            sys.stderr.flush()
            os._exit(STOPPED_EXIT_STATUS)
        return


def _stop_main_thread() -> None:
    """SIGTERM to the main thread, where errors.job_guard turns it into a clean stop. Aimed
    at the main thread so that a wait there ends at once; Windows has no such signal to
    send, so the handler is called there as if the signal had come."""
    if hasattr(signal, "pthread_kill"):
        signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
    else:
        import _thread

        _thread.interrupt_main(signal.SIGTERM)


@contextlib.contextmanager
def publishing(path: str | os.PathLike) -> Iterator[None]:
    """Around the rename that publishes `path`: raise RunGone, and publish nothing, unless the
    run that started this process is alive; hold the job file meanwhile, so that a starting
    run waits for the rename to be done."""
    run = watched_run()
    if run is None or run[0] == os.getpid():  # no run to watch, or the run's own process
        yield
        return
    with job_lock_held():
        if not run_alive(run[1]):
            raise RunGone(f"{path}: not written: the Snakemake run that started this job is gone")
        yield


guard_publishing(publishing)


@contextlib.contextmanager
def run_job_guard(
    subject: str, attempt: int = 1, gpu_mem_gb: int | None = None, attempts: int | None = None
) -> Iterator[None]:
    """errors.job_guard for a job of a run: the work is not started if the Snakemake run
    that started it is gone, and is stopped (cleanly, as by SIGTERM) if it goes meanwhile.
    The job's client, which only waits for the warm worker doing the work, uses job_guard."""
    with job_guard(subject, attempt, gpu_mem_gb, attempts), stop_if_run_goes(subject):
        yield
