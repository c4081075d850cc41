"""Atomic file writes and safe model-file loading.

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
import re
import struct
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from rnnfleet.errors import WRITE_CAUSES, UserError, WriteError, one_line, write_error
from rnnfleet.faults import pause_point, raise_injected_full_disk

FORMAT_VERSION = 3  # 2: builder, feature definition and target recorded; 3: the split and test scores


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


def save_checkpoint(checkpoint: dict, path: str | os.PathLike) -> None:
    import torch

    with atomic_write(path) as handle:
        torch.save(checkpoint, handle)
        handle.flush()
        pause_point("model-write")


class ModelFileError(UserError):
    """A model file that is missing, truncated, or not written by rnnfleet."""


# torch.save writes a zip archive with no archive comment: its last 22 bytes are the zip's
# end-of-central-directory record (zip64 files have a 20-byte locator just before it).
_ZIP_START = b"PK\x03\x04"
_END_RECORD = struct.Struct("<4sHHHHIIH")  # signature ... central directory size, offset, comment length
_END_SIGNATURE = b"PK\x05\x06"
_ZIP64_LOCATOR = struct.Struct("<4sIQI")  # signature, disk, offset of the zip64 end record, disks
_ZIP64_LOCATOR_SIGNATURE = b"PK\x06\x07"


def model_file_problem(path: str | os.PathLike) -> str | None:
    """Why the file at `path` cannot be a whole model file as torch.save writes it, from its
    size and its first and last bytes (no unpacking): empty, cut short, or not a zip archive;
    None if it looks whole. A cheap check, meant for thousands of files at every run: damage
    inside the archive, or a whole file of other contents, passes (load_checkpoint finds those)."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))  # no buffered file object: cheaper
    try:
        size = os.fstat(descriptor).st_size
        if size == 0:
            return "the file is empty (0 bytes)"
        tail_size = min(size, _END_RECORD.size + _ZIP64_LOCATOR.size)
        if hasattr(os, "pread"):
            start, tail = os.pread(descriptor, len(_ZIP_START), 0), os.pread(descriptor, tail_size, size - tail_size)
        else:  # Windows
            start = os.read(descriptor, len(_ZIP_START))
            os.lseek(descriptor, size - tail_size, os.SEEK_SET)
            tail = os.read(descriptor, tail_size)
    finally:
        os.close(descriptor)
    if start != _ZIP_START:
        return "it is not a file torch.save writes (not a zip archive)"
    if len(tail) < _END_RECORD.size or not _end_record_fits(tail, size):
        return f"it is cut short or damaged ({size} bytes, without the zip end record torch.save writes last)"
    return None


def _end_record_fits(tail: bytes, size: int) -> bool:
    """Whether `tail` (the file's last bytes) ends with an end record whose central
    directory lies inside the file before it."""
    end_offset = size - _END_RECORD.size
    signature, *_, directory_size, directory_offset, comment_length = _END_RECORD.unpack(tail[-_END_RECORD.size :])
    if signature != _END_SIGNATURE or comment_length != 0:
        return False
    locator = tail[: -_END_RECORD.size]
    if len(locator) == _ZIP64_LOCATOR.size and locator.startswith(_ZIP64_LOCATOR_SIGNATURE):
        return _ZIP64_LOCATOR.unpack(locator)[2] < end_offset - _ZIP64_LOCATOR.size
    return directory_offset + directory_size <= end_offset


# What load_model and forecasts read from a model file (rnnfleet.train.loop.build_checkpoint).
REQUIRED_ENTRIES = {
    "state_dict": (),
    "model_config": ("input_size",),
    "normalisation": ("feature_mean", "feature_std", "target_mean", "target_std"),
    "features": ("definition", "warmup", "target", "horizon", "seq_len"),
}


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Load a model file without unpickling arbitrary objects (weights_only=True); any
    problem is a ModelFileError of one line naming the file."""
    import torch

    try:
        problem = model_file_problem(path)
    except FileNotFoundError:
        raise ModelFileError(f"{path}: no such model file") from None
    except OSError as error:
        raise ModelFileError(f"{path}: cannot be read ({error.strerror or error})") from None
    if problem:
        raise ModelFileError(f"{path}: not a readable rnnfleet model file: {problem}; train its dataset again")
    damaged = damaged_member(path)
    if damaged:
        raise ModelFileError(
            f"{path}: damaged: its part {damaged!r} does not match the checksum written with it (the file changed "
            "after it was written); train its dataset again"
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many kinds for damaged or foreign files
        if REFUSED_GLOBAL.search(str(error)):
            raise ModelFileError(refused_objects_message(path, str(error))) from None
        raise ModelFileError(
            f"{path}: not a readable rnnfleet model file ({type(error).__name__}: {torch_detail(str(error))})"
        ) from None
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != "rnnfleet":
        raise ModelFileError(f"{path}: not an rnnfleet model file (no 'format: rnnfleet' entry)")
    if checkpoint.get("format_version") != FORMAT_VERSION:
        older = isinstance(checkpoint.get("format_version"), int) and checkpoint["format_version"] < FORMAT_VERSION
        raise ModelFileError(
            f"{path}: model file format version {checkpoint.get('format_version')}, "
            f"this rnnfleet reads version {FORMAT_VERSION}"
            + (
                "; it was trained before the test period was held out: delete it and re-run to re-train"
                if older
                else ""
            )
        )
    missing = missing_entries(checkpoint)
    if missing:
        raise ModelFileError(
            f"{path}: an incomplete rnnfleet model file (no {', '.join(missing)}); it was changed after "
            "rnnfleet wrote it: train its dataset again"
        )
    return checkpoint


def missing_entries(checkpoint: dict) -> list[str]:
    """The entries of REQUIRED_ENTRIES that `checkpoint` lacks, as 'normalisation' or
    'features.seq_len'."""
    missing = []
    for entry, keys in REQUIRED_ENTRIES.items():
        value = checkpoint.get(entry)
        if not isinstance(value, dict):
            missing.append(repr(entry))
        else:
            missing += [repr(f"{entry}.{key}") for key in keys if key not in value]
    return missing


def torch_detail(message: str) -> str:
    """The part of one of torch's load errors that says what is wrong: the weights-only
    unpickler's own reason (its message first suggests unsafe loading), else the first line."""
    reason = re.search(r"WeightsUnpickler error:\s*(.+?)\s*(?:\n\n|$)", message, re.DOTALL)
    if reason:
        return one_line(reason.group(1))
    return message.splitlines()[0] if message else "no detail"


def damaged_member(path: str | os.PathLike) -> str | None:
    """The first part of the model file (a zip archive, as torch.save writes it) whose bytes
    no longer match the CRC-32 written with them, or None: every byte of the weights is read
    and checked before any is used. A file that is not a zip archive is left to torch.load's
    own error."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError):
        return None


# How torch's weights-only loader words an object it will not rebuild: a global it does not
# allow, or one whose module it blocks outright (os.system: "posix is blocked").
REFUSED_GLOBAL = re.compile(r"Unsupported global: GLOBAL (\S+)|unsupported GLOBAL (\S+) whose module \S+ is blocked")


def refused_objects_message(path: str | os.PathLike, torch_message: str) -> str:
    """One line for a file that names Python objects to rebuild (torch's own message suggests
    loading it unsafely, which is the one thing never to do with a file of unknown origin)."""
    named = REFUSED_GLOBAL.search(torch_message)
    what = f" (it names {named.group(1) or named.group(2)})" if named else ""
    return (
        f"{path}: refused: it holds pickled Python objects{what}, and loading those could run code; "
        "rnnfleet reads only tensors and plain data, as in the model files it writes"
    )
