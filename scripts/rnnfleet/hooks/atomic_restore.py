"""A model being replaced stays whole at its path, also while Snakemake puts it back.

The train rule's outputs are flagged update(): Snakemake leaves the model and metrics at their
paths while the job runs (the job renames its new files over them), copies them aside first
and, when the job fails, copies them back with shutil.copy, which truncates the file and
writes it again in place: a forecast reading it at that moment would see part of a file.

What it promises:
- Putting a file back is atomic: a file identical to its backup (the job failed before renaming anything
  over it) is left as it is, any other is replaced by a whole copy in one rename. Either way
  the backup is removed and True returned, as the stock code does.
- A folder (the loss curves) is put back as a copy made beside it and swapped in by two
  renames: it is never deleted before its replacement exists (the stock code deletes it,
  then copies). Without a backup, and for a folder that cannot be renamed (a mount point),
  the stock code runs.
- Keeping the copy aside before the job (backup_output) fails on a full disk, a quota, a
  read-only or unwritable .snakemake/: what was copied is removed, and the run stops with one
  line naming the backup folder, the output and what was not done (no traceback). The output
  itself is untouched.
- Applied by rnnfleet.hooks.apply alone, behind its one gate (the supported release, the
  replaced functions' source as in snakemake_contract.CONTRACT).

A job whose update() outputs were put back is recorded by Snakemake as if it had written
them (its params, its inputs' checksums). Here the record of each output put back is the one
it had when it was copied aside: the kept model is recorded with the settings it was trained
with (a dry-run's "settings changed" words compare with those, not with the failed attempt's),
and a table put back stays older than its new inputs. forget_records drops the records of
tables and figures that the run itself could not write afterwards.
"""

from __future__ import annotations

import contextlib
import errno
import filecmp
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from rnnfleet.errors import WRITE_CAUSES
from rnnfleet.hooks.snakemake_contract import _stock

# Snakemake's record of each output copied aside (None: it had none), by the output's key,
# and the outputs put back: a failed job's record of them is replaced by the one from before.
_RECORDS_BEFORE: dict[str, object] = {}
_PUT_BACK: set[str] = set()


def put_back(backup: Path, path: Path) -> None:
    """path holds backup's bytes, replaced in one rename unless it already does."""
    if path.is_file() and filecmp.cmp(backup, path, shallow=False):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".restoring")
    os.close(handle)
    try:
        shutil.copy2(backup, staging)
        os.replace(staging, path)
    except BaseException:
        Path(staging).unlink(missing_ok=True)
        raise


def restore_output(self, path: Path) -> bool:
    """FileBackupMixin.restore_output, atomic for files (see the module doc)."""
    backup = self._get_backup_path(path)
    if backup.is_dir() and Path(path).is_dir():
        if not put_back_folder(backup, Path(path)):
            return restore_output.__rnnfleet_stock__(self, path)
        shutil.rmtree(backup)
    elif backup.is_file():
        put_back(backup, Path(path))
        backup.unlink()
    else:
        return restore_output.__rnnfleet_stock__(self, path)
    _PUT_BACK.add(str(path))
    return True


def put_back_folder(backup: Path, path: Path) -> bool:
    """path (a folder) holds a copy of backup's files: the copy is made beside it, then swapped
    in by two renames (the folder is missing only between them, not while files are copied; a
    copy that fails leaves path as it was). False where path cannot be renamed (a mount
    point): nothing done."""
    staging = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".restoring"))
    aside = staging.with_suffix(".replaced")
    try:
        shutil.copytree(backup, staging, dirs_exist_ok=True)
        shutil.copystat(backup, staging)
        os.rename(path, aside)
    except OSError as error:
        shutil.rmtree(staging, ignore_errors=True)
        if error.errno in (errno.EBUSY, errno.EXDEV, errno.EPERM):
            return False
        raise
    os.rename(staging, path)
    shutil.rmtree(aside, ignore_errors=True)
    return True


async def finished(self, job) -> None:
    """PersistenceBase.finished, then, for a job whose outputs were put back (it failed), the
    records from before for those, and none for its outputs that are not there (its metrics,
    deleted before it ran): a failed job leaves no record of its own."""
    await finished.__rnnfleet_stock__(self, job)
    keys = [self._get_key(output) for output in job.output]
    if not _PUT_BACK.intersection(keys):
        return
    self._clear_cache()
    for output, key in zip(job.output, keys, strict=True):
        put_back = key in _PUT_BACK
        _PUT_BACK.discard(key)
        before = _RECORDS_BEFORE.pop(key, None) if put_back else None
        if before is not None:
            self._write_record(key, before)
        elif put_back or not os.path.exists(output):
            self._delete_record(key)
    self._clear_cache()


def backup_output(self, path: Path) -> None:
    """FileBackupMixin.backup_output, ending in one line where the copy cannot be written."""
    try:
        backup_output.__rnnfleet_stock__(self, path)
        if hasattr(self, "_read_record"):  # a whole persistence, not its backup part alone
            record = self._read_record(str(path))
            _RECORDS_BEFORE[str(path)] = None if record is None else record.model_copy(deep=True)
    except OSError as error:
        if error.errno not in WRITE_CAUSES:
            raise
        from snakemake.exceptions import WorkflowError

        backup = self._get_backup_path(path)
        with contextlib.suppress(OSError):
            shutil.rmtree(backup) if backup.is_dir() else backup.unlink(missing_ok=True)
        raise WorkflowError(backup_failure_line(self._backup_path, Path(path), error)) from None


def backup_failure_line(backup_folder: Path, path: Path, error: OSError) -> str:
    """What a backup that could not be written says: the folder, why, and what was not done."""
    import logging

    logging.raiseExceptions = False  # Snakemake's log file may sit on that full disk too
    return (
        f"{Path(backup_folder).absolute()}: cannot be written: {WRITE_CAUSES[error.errno]}; Snakemake keeps there "
        f"the copy of {path} it puts back if the job that replaces it fails, so the run stopped before that job: "
        f"{path} is untouched and was not made again, and the jobs not started yet were not run"
    )


def forget_records(persistence, paths: Iterable[str]) -> None:
    """Drop Snakemake's records of these output paths (the keys of its metadata: paths as
    the rules name them): the next run compares their inputs by time alone, and an output
    kept from before its inputs changed is written again. Only deletes files, so it works on
    a full disk; does nothing where this Snakemake's persistence has no such records."""
    delete_record = getattr(persistence, "_delete_record", None)
    if delete_record is None:
        return
    getattr(persistence, "_clear_cache", lambda: None)()
    for path in paths:
        with contextlib.suppress(OSError):
            delete_record(str(path))


def apply() -> None:
    """Replace the restore, the copy aside and the records after a job (see the module doc)."""
    from snakemake.persistence import FileBackupMixin, PersistenceBase

    restore_output.__rnnfleet_stock__ = _stock(FileBackupMixin.restore_output)
    FileBackupMixin.restore_output = restore_output
    backup_output.__rnnfleet_stock__ = _stock(FileBackupMixin.backup_output)
    FileBackupMixin.backup_output = backup_output
    finished.__rnnfleet_stock__ = _stock(PersistenceBase.finished)
    PersistenceBase.finished = finished
