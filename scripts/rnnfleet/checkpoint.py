"""Atomic file writes and safe model-file loading.

Every file a job writes goes through atomic_write: readers see the old file or the whole
new one, and a write that fails for a reason the user can fix (disk full, quota, read-only
folder, permission) raises errors.WriteError naming the file and the cause in plain words,
even where the library doing the writing (torch.save) hides the OSError behind its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from rnnfleet.errors import WRITE_CAUSES, UserError, write_error
from rnnfleet.faults import pause_point, raise_injected_full_disk

FORMAT_VERSION = 3  # 2: builder, feature definition and target recorded; 3: the split and test scores


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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
def atomic_write(path: str | os.PathLike) -> Iterator[IO[bytes]]:
    """Yield a binary handle to a hidden temporary file beside `path`; on success flush,
    fsync and rename it over `path`, so readers see the old file or the whole new one,
    never a part. On failure the temporary file is removed; a failure to write (see the
    module doc) raises WriteError."""
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
            os.fsync(handle.fileno())
        os.replace(handle.name, target)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(handle.name)
        if isinstance(error, OSError) and error.errno in WRITE_CAUSES:
            raise write_error(target, error) from None
        if isinstance(error, Exception) and recorder.write_failure is not None:
            raise write_error(target, recorder.write_failure) from None
        raise
    _sync_folder(target.parent)


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


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Load a model file without unpickling arbitrary objects (weights_only=True)."""
    import torch

    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ModelFileError(f"{path}: no such model file") from None
    except Exception as error:  # torch raises many kinds for truncated or foreign files
        if "Weights only load failed" in str(error):
            raise ModelFileError(refused_objects_message(path, str(error))) from None
        raise ModelFileError(
            f"{path}: not a readable rnnfleet model file ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else 'no detail'})"
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
    return checkpoint


def refused_objects_message(path: str | os.PathLike, torch_message: str) -> str:
    """One line for a file that holds pickled Python objects (torch's own message suggests
    loading it unsafely, which is the one thing never to do with a file of unknown origin)."""
    named = re.search(r"Unsupported global: GLOBAL (\S+)", torch_message)
    what = f" (it names {named.group(1)})" if named else ""
    return (
        f"{path}: refused: it holds pickled Python objects{what}, and loading those could run code; "
        "rnnfleet reads only tensors and plain data, as in the model files it writes"
    )
