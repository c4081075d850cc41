"""Atomic file writes and safe model-file loading."""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from rnnfleet.errors import UserError
from rnnfleet.faults import pause_point

FORMAT_VERSION = 2  # 2: builder, feature definition and target recorded


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# Temporary files are created 0600; the finished file gets the permissions of a normal open().
FILE_MODE = 0o666 & ~_current_umask()


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[IO[bytes]]:
    """Yield a binary handle to a hidden temporary file beside `path`; on success flush,
    fsync and rename it over `path`, so readers see the old file or the whole new one,
    never a part. On failure the temporary file is removed."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.", suffix=".partial", delete=False)
    try:
        with handle:
            yield handle
            handle.flush()
            if hasattr(os, "fchmod"):  # not on Windows, where the file gets the folder's ACL anyway
                os.fchmod(handle.fileno(), FILE_MODE)
            os.fsync(handle.fileno())
        os.replace(handle.name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(handle.name)
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
        raise ModelFileError(
            f"{path}: model file format version {checkpoint.get('format_version')}, "
            f"this rnnfleet reads version {FORMAT_VERSION}"
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
