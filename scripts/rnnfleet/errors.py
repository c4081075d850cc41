"""How a job ends when something goes wrong, so that every failure explains itself.

A problem the user can fix (a bad file, too little memory) ends the job with one line that
names the file and the problem, in the job's log and in Snakemake's own error output; a
bug keeps its traceback in the log and gets the same one-line summary; SIGTERM or SIGINT
stop the job through the normal exception path, so half-written files are removed.
The last marked line of a log is the job's outcome: the run summary reads it back. A
problem in the input data ends with DATA_ERROR_NOTE, so that the summary can tell a file to
fix from a failure that may pass (a crash, a kill, too little memory). A file that cannot be
written (disk full, quota, read-only folder, permission) is a WriteError naming the path and
the cause in plain words.
"""

from __future__ import annotations

import contextlib
import errno
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # each job's client imports this module: only what it needs at run time
    from collections.abc import Iterator
    from pathlib import Path

ERROR_PREFIX = "ERROR: "
STOPPED_PREFIX = "STOPPED: "
ATTEMPT_PREFIX = "ATTEMPT "  # starts a retry's part of the log
OUT_OF_MEMORY = "ran out of GPU memory"
DATA_ERROR_NOTE = " [data error: fix or remove the file; the next run tries it again]"
_TAIL_BYTES = 64 * 1024


class UserError(ValueError):
    """A problem the user can fix; the message is one sentence naming the file or the setting."""


class DataError(UserError):
    """A problem with a user's dataset; the message names the file and the problem."""


class WriteError(UserError):
    """A file could not be written; the message names the path and the cause in plain words."""


# The causes a user can do something about, in the words they would search for
# (EDQUOT and EROFS do not exist on every platform).
WRITE_CAUSES = {
    getattr(errno, name): cause
    for name, cause in (
        ("ENOSPC", "the disk is full (no space left on device); free some space and run again"),
        ("EDQUOT", "the disk quota is used up; free some space or raise the quota and run again"),
        ("EROFS", "the folder is on a read-only file system; choose a writable folder in paths:"),
        ("EACCES", "permission denied for this user; fix the file's or the folder's permissions"),
        ("EPERM", "operation not permitted for this user; fix the file's or the folder's permissions"),
    )
    if hasattr(errno, name)
}


def write_error(path: object, error: OSError) -> WriteError:
    """The WriteError for an OSError met while writing `path`."""
    cause = WRITE_CAUSES.get(error.errno) or (error.strerror or str(error))
    return WriteError(f"{path}: cannot be written: {cause}")


class JobStopped(BaseException):
    """SIGTERM or SIGINT reached the job (a BaseException, like KeyboardInterrupt, so only
    clean-up code such as atomic_write's sees it on the way out)."""

    def __init__(self, signal_number: int):
        super().__init__(signal.Signals(signal_number).name)
        self.signal_number = signal_number


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def report(line: str) -> None:
    """Write a line to the job's log (sys.stderr) and to Snakemake's error output (the
    process's original stderr) when the two differ."""
    print(line, file=sys.stderr, flush=True)
    if sys.__stderr__ is not None and sys.__stderr__ is not sys.stderr:
        print(line, file=sys.__stderr__, flush=True)


def _stop(signal_number: int, _frame) -> None:
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, signal.SIG_IGN)  # a second signal must not interrupt the clean-up
    raise JobStopped(signal_number)


def _is_out_of_memory(error: BaseException) -> bool:
    torch = sys.modules.get("torch")  # only a job that imported torch can run out of GPU memory
    return torch is not None and isinstance(error, torch.OutOfMemoryError)


@contextlib.contextmanager
def job_guard(subject: str, attempt: int = 1, gpu_mem_gb: int | None = None, watch_run: bool = True) -> Iterator[None]:
    """Run a job's work; on failure write one marked line (see module doc) and exit non-zero.
    With watch_run, the work stops if the Snakemake run that started it goes, and is not
    started if it is gone (rnnfleet.orphans); the job's client, which only waits for the
    warm worker doing the work, passes False.

    subject names what the job works on (the dataset) in lines whose error does not name a file.
    """
    previous_handlers = {number: signal.signal(number, _stop) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        with _run_watch(subject) if watch_run else contextlib.nullcontext():
            yield
    except DataError as error:
        report(ERROR_PREFIX + one_line(error) + DATA_ERROR_NOTE)
        raise SystemExit(1) from None
    except UserError as error:
        report(ERROR_PREFIX + one_line(error))
        raise SystemExit(1) from None
    except (JobStopped, KeyboardInterrupt) as stop:
        number = stop.signal_number if isinstance(stop, JobStopped) else signal.SIGINT
        report(
            f"{STOPPED_PREFIX}{subject}: stopped by {signal.Signals(number).name} before finishing; "
            "nothing half-written was kept, the next run does this job again"
        )
        raise SystemExit(128 + number) from None
    except Exception as error:
        if _is_out_of_memory(error):
            report(
                f"{ERROR_PREFIX}{subject}: {OUT_OF_MEMORY} within its train.gpu_mem of {gpu_mem_gb} GB "
                f"(attempt {attempt}); Snakemake retries with twice the gpu_mem while attempts are left, "
                "after that raise train.gpu_mem or lower train.batch_size"
            )
        elif isinstance(error, OSError) and error.errno in WRITE_CAUSES and error.filename is not None:
            # Not from atomic_write (that raises WriteError): it may be a read, so no verb.
            report(f"{ERROR_PREFIX}{error.filename}: {WRITE_CAUSES[error.errno]}")
        else:
            import traceback

            traceback.print_exc()
            report(
                f"{ERROR_PREFIX}{subject}: internal error {type(error).__name__}: {one_line(error)} "
                "(traceback in the log)"
            )
        raise SystemExit(1) from None
    finally:
        for number, handler in previous_handlers.items():
            signal.signal(number, handler)


def _run_watch(subject: str) -> contextlib.AbstractContextManager:
    from rnnfleet.orphans import stop_if_run_goes  # file locks and threads: not in a job's client

    return stop_if_run_goes(subject)


def last_marked_line(log_path: str | Path) -> str | None:
    """The job's outcome as its log last recorded it: the last ERROR or STOPPED line of its
    latest attempt, or None if there is none (it succeeded, is still running, or was killed)."""
    try:
        with open(log_path, "rb") as log:
            log.seek(0, 2)
            log.seek(max(0, log.tell() - _TAIL_BYTES))
            tail = log.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None
    for line in reversed(tail.splitlines()):
        if line.startswith(ATTEMPT_PREFIX):
            return None
        if line.startswith((ERROR_PREFIX, STOPPED_PREFIX)):
            return line
    return None
