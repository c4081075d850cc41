"""Two moments where Snakemake 9.27.1 ends the whole run over one dataset's file, handed to
the job that reads the file instead (applied by rnnfleet.hooks.apply, after discovery).

What it promises:
- For the datasets' own files (the paths given to `apply`) and no other file:
  1. A file that is gone when its job starts (deleted during the run) is not waited for.
     Stock Snakemake waits --latency-wait seconds, then raises "Missing files after 5
     seconds" out of the scheduler: the run ends for every dataset, without the onerror
     handler (so no summary). Here the job starts and fails alone, with the line its read
     gives ("cannot be read (No such file or directory)").
  2. A file that cannot be read (no read permission) gets no checksum in Snakemake's
     metadata. Stock Snakemake records checksums of inputs up to 1 MB even for a job that
     failed, and its PermissionError ends the run ("Error recording metadata for finished
     job"). Without a checksum Snakemake tells a changed file by its mtime, as it does for
     every file over 1 MB.
- Nothing else changes: other files, and these files while they are there and readable,
  are handled by the stock code.
- Applied by rnnfleet.hooks.apply alone, behind its one gate (the supported release, the
  guarded functions' source as in snakemake_contract.CONTRACT).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from rnnfleet.hooks.snakemake_contract import _stock

_dataset_files: frozenset[str] = frozenset()


def is_gone_dataset_file(path) -> bool:
    return str(path) in _dataset_files and not os.path.exists(path)


async def wait_for_files(files, *args, **kwargs):
    """snakemake.io.wait_for_files, without waiting for a dataset file that is gone."""
    await wait_for_files.__rnnfleet_stock__([path for path in files if not is_gone_dataset_file(path)], *args, **kwargs)


async def checksum(self, *args, **kwargs):
    """_IOFile.checksum; None for a dataset file that cannot be read."""
    try:
        return await checksum.__rnnfleet_stock__(self, *args, **kwargs)
    except PermissionError:
        if str(self) in _dataset_files:
            return None
        raise


def apply(dataset_files: Iterable[str]) -> None:
    """Guard `dataset_files` (paths as the rules name them as inputs)."""
    global _dataset_files
    import snakemake.io
    import snakemake.jobs

    _dataset_files = frozenset(map(str, dataset_files))
    wait_for_files.__rnnfleet_stock__ = _stock(snakemake.io.wait_for_files)
    snakemake.jobs.wait_for_files = wait_for_files  # the name Job.prepare looks up
    checksum.__rnnfleet_stock__ = _stock(snakemake.io._IOFile.checksum)
    snakemake.io._IOFile.checksum = checksum
