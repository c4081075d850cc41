"""Exclusive locks held through an open file, on Linux, macOS and Windows.

A lock taken here belongs to the open file: closing it releases the lock, and so does the
holder's exit however it exits (a kill, a crash, a power loss), so a lock can never go stale.
The primitive is the `filelock` package's: flock() on Unix, LockFileEx() on Windows. Where
the platform offers neither, os_locks_available() is False and each caller falls back to
behaviour that needs no lock (and says so); nothing here fails at import.
"""

from __future__ import annotations

import os
import time
from typing import IO

import filelock

POLL_SECONDS = 0.02


def os_locks_available() -> bool:
    """Whether the platform has a file lock the OS releases when its holder dies."""
    return os.name == "nt" or filelock.unix_has_fcntl


def try_lock(path: str | os.PathLike) -> IO | None:
    """The open file at `path` (created if missing), locked; or None when another open file
    holds the lock. Raises OSError when the platform has no such lock."""
    lock_file = open(path, "a")  # noqa: SIM115 - the lock lives as long as this file is open
    try:
        locked = filelock.lock_descriptor(lock_file.fileno(), blocking=False)
    except BaseException:
        lock_file.close()
        raise
    if not locked:
        lock_file.close()
        return None
    return lock_file


def wait_for_lock(path: str | os.PathLike) -> IO:
    """try_lock() until it succeeds; returns the open, locked file."""
    while (lock_file := try_lock(path)) is None:
        time.sleep(POLL_SECONDS)
    return lock_file


def held_elsewhere(path: str | os.PathLike) -> bool:
    """Whether another open file holds the lock on the file at `path`; False when there is
    no such file (none is created). Raises OSError when the platform has no such lock."""
    try:
        probe = open(path, "rb")  # noqa: SIM115 - closed below, after the unlock
    except FileNotFoundError:
        return False
    with probe:
        if not filelock.lock_descriptor(probe.fileno(), blocking=False):
            return True
        filelock.unlock_descriptor(probe.fileno())
        return False
