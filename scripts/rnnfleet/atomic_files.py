"""Atomic file writes (the model file's own parts: rnnfleet.train.modelfile).

Every file a job writes goes through atomic_write: readers see the old file or the whole
new one, and a write that fails for a reason the user can fix (disk full, quota, read-only
folder, permission) raises errors.WriteError naming the file and the cause in plain words,
even where the library doing the writing (torch.save) hides the OSError behind its own.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from rnnfleet.errors import WRITE_CAUSES, WriteError, write_error
from rnnfleet.faults import raise_injected_full_disk


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _publish_as_finished(path: Path) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


_publish_guard: Callable[[Path], contextlib.AbstractContextManager] = _publish_as_finished

# Temporary files are created 0600; the finished file gets the permissions of a normal open().
FILE_MODE = 0o666 & ~_current_umask()


class _WriteRecorder:
    """The temporary file as atomic_write hands it out: it keeps the OSError of a failed
    write, which torch.save's zip writer replaces with an 'unexpected pos' RuntimeError."""

    def __init__(self, handle: IO[bytes], target: Path):
        self._handle, self._target = handle, target
        self.write_failure: OSError | None = None

    def write(self, data) -> int:
        try:
            raise_injected_full_disk(self._target)
            return self._handle.write(data)
        except OSError as error:
            self.write_failure = error
            raise

    def __getattr__(self, name: str):
        return getattr(self._handle, name)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, durable: bool = True) -> Iterator[IO[bytes]]:
    """Yield a binary handle to a hidden temporary file beside `path`; on success flush,
    fsync and rename it over `path`, so readers see the old file or the whole new one,
    never a part. On failure the temporary file is removed; a failure to write (see the
    module doc) raises WriteError. The rename happens inside the publish guard (see
    guard_publishing): in a job whose run is gone it renames nothing and raises.
    durable=False: neither the file nor its folder is synced to the disk, for files made
    again from others (the report's figures): after a power cut such a file may be empty."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle = tempfile.NamedTemporaryFile(
            dir=target.parent, prefix=f".{target.name}.", suffix=".partial", delete=False
        )
    except OSError as error:
        raise write_error(target, error) from None
    recorder = _WriteRecorder(handle, target)
    try:
        with handle:
            yield recorder  # type: ignore[misc]  # a file in all but name
            handle.flush()
            if hasattr(os, "fchmod"):  # not on Windows, where the file gets the folder's ACL anyway
                os.fchmod(handle.fileno(), FILE_MODE)
            if durable:
                os.fsync(handle.fileno())
        with _publish_guard(target):
            os.replace(handle.name, target)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(handle.name)
        if isinstance(error, OSError) and error.errno in WRITE_CAUSES:
            raise kept_or_not(write_error(target, error), target) from None
        if isinstance(error, Exception) and recorder.write_failure is not None:
            raise kept_or_not(write_error(target, recorder.write_failure), target) from None
        raise
    if durable:
        _sync_folder(target.parent)


def kept_or_not(failure: WriteError, target: Path) -> WriteError:
    """failure, saying that the file already at target is kept where there is one."""
    if target.is_file():
        return WriteError(f"{failure}; the previous {target.name} is kept")
    return failure


def guard_publishing(guard: Callable[[Path], contextlib.AbstractContextManager]) -> None:
    """Have every atomic_write of this process rename its file inside guard(path). The job
    runner sets one (rnnfleet.runner.orphans.publishing: nothing from a job whose run is
    gone); elsewhere files are renamed as they are finished."""
    global _publish_guard
    _publish_guard = guard


def _sync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable. Windows cannot open a folder as a file (and its
    renames need no such step)."""
    if os.name == "nt":
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def folder_write_problem(folder: str | os.PathLike) -> str | None:
    """Why this user cannot create or replace files in an existing `folder`, in the words
    of errors.WRITE_CAUSES; None if it can (or the folder is not there yet)."""
    if not os.path.isdir(folder) or os.access(folder, os.W_OK | os.X_OK):
        return None
    read_only = hasattr(os, "statvfs") and os.statvfs(folder).f_flag & os.ST_RDONLY
    return WRITE_CAUSES[errno.EROFS if read_only else errno.EACCES]


def write_json(payload: dict, path: str | os.PathLike) -> None:
    with atomic_write(path) as handle:
        handle.write((json.dumps(payload, indent=2, sort_keys=True) + "\n").encode())
