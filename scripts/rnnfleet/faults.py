"""Test hooks that make failures happen on purpose, at a known moment. Each does nothing
unless its environment variable is set; the tests set them for real snakemake runs.

RNNFLEET_TEST_PAUSE_AT=<point> with RNNFLEET_TEST_PAUSE_FILE=<path>: the first job that
    reaches <point> ("preprocess", "epoch", "model-write", "fold": after a walk-forward
    fold's scores are saved; "after-failures": Snakemake's process, once the table written
    after failures is in place, before its last lines) creates <path> holding its pid
    and waits there until the file's content is "resume" (or a signal ends it).
RNNFLEET_FAULT_OOM_ATTEMPTS=<n>: train attempts 1..n raise torch.OutOfMemoryError, the
    error CUDA raises when a job exceeds its memory cap.
RNNFLEET_FAULT_TRAIN_CRASH=<glob>: the training of every dataset whose name matches <glob>
    fails with an internal error (a crash, not a problem in the data).
RNNFLEET_FAULT_PRETRAIN_CRASH=1: the fleet's pretrain job (train.init fleet) fails with an
    internal error.
RNNFLEET_FAULT_PACKED_JOB_EXIT=<code>: the Snakemake inside a packed SLURM job exits with
    <code> after all its jobs are done, as a job that fails at its very end.
RNNFLEET_FAULT_FULL_DISK=<glob>: every write to a file whose path matches <glob> (e.g.
    "models/*.pt") through checkpoint.atomic_write fails with ENOSPC, as on a full disk.
"""

from __future__ import annotations

import errno
import os
import sys
import time
from fnmatch import fnmatch

PAUSE_AT = "RNNFLEET_TEST_PAUSE_AT"
PAUSE_FILE = "RNNFLEET_TEST_PAUSE_FILE"
OOM_ATTEMPTS = "RNNFLEET_FAULT_OOM_ATTEMPTS"
FULL_DISK = "RNNFLEET_FAULT_FULL_DISK"
TRAIN_CRASH = "RNNFLEET_FAULT_TRAIN_CRASH"
PRETRAIN_CRASH = "RNNFLEET_FAULT_PRETRAIN_CRASH"
PACKED_JOB_EXIT = "RNNFLEET_FAULT_PACKED_JOB_EXIT"
RESUME = "resume"
MAX_PAUSE_SECONDS = 600.0


def pause_point(point: str) -> None:
    if os.environ.get(PAUSE_AT) != point:
        return
    marker = os.environ[PAUSE_FILE]
    try:
        descriptor = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return  # another job paused here already: pause once per marker
    os.write(descriptor, str(os.getpid()).encode())
    os.close(descriptor)
    print(f"test hook: paused at {point} (pid {os.getpid()})", file=sys.stderr, flush=True)
    deadline = time.monotonic() + MAX_PAUSE_SECONDS
    while time.monotonic() < deadline:
        with open(marker) as handle:
            if handle.read() == RESUME:
                return
        time.sleep(0.05)


def raise_injected_out_of_memory(attempt: int) -> None:
    failing_attempts = int(os.environ.get(OOM_ATTEMPTS) or 0)
    if attempt <= failing_attempts:
        import torch

        raise torch.OutOfMemoryError(f"test fault: {OOM_ATTEMPTS}={failing_attempts} fails attempt {attempt}")


def raise_injected_full_disk(path: str | os.PathLike) -> None:
    pattern = os.environ.get(FULL_DISK)
    if pattern and fnmatch(os.fspath(path), pattern):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def raise_injected_train_crash(dataset: str) -> None:
    pattern = os.environ.get(TRAIN_CRASH)
    if pattern and fnmatch(dataset, pattern):
        raise RuntimeError(f"test fault: {TRAIN_CRASH}={pattern} crashes this training")


def raise_injected_pretrain_crash() -> None:
    if os.environ.get(PRETRAIN_CRASH):
        raise RuntimeError(f"test fault: {PRETRAIN_CRASH} crashes the fleet's pretraining")


def exit_with_injected_code_at_end() -> None:
    code = os.environ.get(PACKED_JOB_EXIT)
    if code:
        import atexit

        atexit.register(os._exit, int(code))  # after Snakemake's own exit, whatever it was
