"""How a job ends when something goes wrong, so that every failure explains itself.

A problem the user can fix (a bad file, too little memory) ends the job with one line that
names the file and the problem, in the job's log and in Snakemake's own error output; a
bug keeps its traceback in the log and gets the same one-line summary; SIGTERM, SIGINT,
SIGHUP (a terminal or ssh connection closed) and SIGQUIT stop the job through the normal
exception path, so half-written files are removed.
The last marked line of a log is the job's outcome: the run summary reads it back. A
problem in the input data ends with DATA_ERROR_NOTE and settings a dataset cannot train with
with SETTINGS_ERROR_NOTE, so that the summary can tell a file or a setting to fix from a
failure that may pass (a crash, a kill, too little memory). A file that cannot be
written (disk full, quota, read-only folder, permission) is a WriteError naming the path and
the cause in plain words.
"""

from __future__ import annotations

import contextlib
import errno
import os
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
SETTINGS_ERROR_NOTE = " [settings error: change the setting named; until then it fails the same way]"
# Ends the problem of a job Snakemake retries (a training) when a retry would fail the same
# way; rnnfleet.hooks.retry_policy then has Snakemake not launch it again.
NOT_RETRIED = " (not retried: more memory would not help)"
# In the line of a job whose warm child was killed by a signal (rnnfleet.runner.warm_client):
# most often the kernel's OOM killer, out of host memory, which twice the GPU memory would
# not cure, so it is not retried either.
KILLED_BY = " process was killed by "
_TAIL_BYTES = 64 * 1024


class UserError(ValueError):
    """A problem the user can fix; the message is one sentence naming the file or the setting."""


class DataError(UserError):
    """A problem with a user's dataset; the message names the file and the problem."""


class SettingsError(UserError):
    """Settings a dataset cannot train with (more walk-forward folds than its rows hold); the
    message names the dataset and the settings to change."""


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


# Less room than this in a job's log folder and the job's messages could not be kept: the
# job stops at once (rnnfleet.runner.job_client.open_log), and its empty log says why.
LOG_ROOM_BYTES = 16 * 1024


def room_left(folder: str | os.PathLike) -> int | None:
    """Bytes this process may still write in folder's file system (root: all free blocks);
    None where the OS does not say (Windows: a full disk shows when a file is written)."""
    if not hasattr(os, "statvfs"):
        return None
    try:
        status = os.statvfs(folder)
    except OSError:
        return None
    blocks = status.f_bfree if hasattr(os, "geteuid") and os.geteuid() == 0 else status.f_bavail
    return blocks * status.f_frsize


def write_error(path: object, error: OSError) -> WriteError:
    """The WriteError for an OSError met while writing `path`."""
    cause = WRITE_CAUSES.get(error.errno) or (error.strerror or str(error))
    return WriteError(f"{path}: cannot be written: {cause}")


# The signals that stop a job cleanly (STOP_SIGNALS; SIGHUP and SIGQUIT are not on Windows).
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT") if hasattr(signal, name)
)


class JobStopped(BaseException):
    """A stop signal (STOP_SIGNALS) reached the job (a BaseException, like KeyboardInterrupt, so only
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
    for number in STOP_SIGNALS:
        signal.signal(number, signal.SIG_IGN)  # a second signal must not interrupt the clean-up
    raise JobStopped(signal_number)


def _stop_handlers() -> dict[int, object]:
    """Install _stop for each stop signal but those ignored already (`nohup` ignores SIGHUP);
    returns the handlers it replaced."""
    previous = {}
    for number in STOP_SIGNALS:
        if signal.getsignal(number) is not signal.SIG_IGN:
            previous[number] = signal.signal(number, _stop)
    return previous


def _is_out_of_memory(error: BaseException) -> bool:
    torch = sys.modules.get("torch")  # only a job that imported torch can run out of GPU memory
    return torch is not None and isinstance(error, torch.OutOfMemoryError)


@contextlib.contextmanager
def job_guard(
    subject: str, attempt: int = 1, gpu_mem_gb: int | None = None, attempts: int | None = None
) -> Iterator[None]:
    """Run a job's work; on failure write one marked line (see module doc) and exit non-zero.

    subject names what the job works on (the dataset) in lines whose error does not name a file.
    attempts: for a job Snakemake retries (a training), how many attempts it has in all; its
    out-of-memory line then says whether a retry follows, any other problem ends with NOT_RETRIED.
    """
    not_retried = NOT_RETRIED if attempts is not None else ""
    previous_handlers = _stop_handlers()
    try:
        yield
    except DataError as error:
        report(ERROR_PREFIX + one_line(error) + not_retried + DATA_ERROR_NOTE)
        raise SystemExit(1) from None
    except SettingsError as error:
        report(ERROR_PREFIX + one_line(error) + not_retried + SETTINGS_ERROR_NOTE)
        raise SystemExit(1) from None
    except UserError as error:
        report(ERROR_PREFIX + with_suffix(one_line(error), not_retried))
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
                f"{ERROR_PREFIX}{subject}: {OUT_OF_MEMORY} within its train.gpu_mem of {gpu_mem_gb} GB"
                + (
                    f" (attempt {attempt}); raise train.gpu_mem or lower train.batch_size"
                    if attempts is None
                    else out_of_memory_next_step(attempt, attempts)
                )
            )
        elif isinstance(error, OSError) and error.errno in WRITE_CAUSES and error.filename is not None:
            # Not from atomic_write (that raises WriteError): it may be a read, so no verb.
            report(f"{ERROR_PREFIX}{error.filename}: {WRITE_CAUSES[error.errno]}{not_retried}")
        else:
            import traceback

            traceback.print_exc()
            report(
                f"{ERROR_PREFIX}{subject}: internal error {type(error).__name__}: {one_line(error)} "
                f"(traceback in the log){not_retried}"
            )
        raise SystemExit(1) from None
    finally:
        for number, handler in previous_handlers.items():
            signal.signal(number, handler)


def with_suffix(text: str, suffix: str) -> str:
    return text if text.endswith(suffix) else text + suffix


def out_of_memory_next_step(attempt: int, attempts: int) -> str:
    """What follows attempt `attempt` (of `attempts`) running out of GPU memory, in words."""
    if attempt < attempts:
        return (
            f" (attempt {attempt} of {attempts}); retry {attempt} of {attempts - 1} follows with twice the "
            "gpu_mem (never more than --resources gpu_mem)"
        )
    return f" (attempt {attempt} of {attempts}, the last); raise train.gpu_mem or lower train.batch_size"


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


def log(message: str) -> None:
    """One line of a job's log (its stderr), written at once."""
    print(message, file=sys.stderr, flush=True)
