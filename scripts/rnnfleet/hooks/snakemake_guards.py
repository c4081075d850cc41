"""Two moments where Snakemake 9.27.1 ends the whole run over one dataset's file, handed to
the job that reads the file instead (applied by rules/handlers.smk after discovery).

What it promises:
- On Snakemake 9.27.1 exactly, and only while the guarded functions' source is the source
  these guards were written against (SHA-256 below), for the datasets' own files (the paths
  given to `apply`) and no other file:
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
- On any other Snakemake version, or when a guarded function's source differs, nothing is
  replaced and one warning line says what that means.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from rnnfleet.hooks.snakemake_contract import stock_hashes
from rnnfleet.hooks.snakemake_speedups import _stock, source_differences, worth_a_warning

# SHA-256 of inspect.getsource() of each function the guards rely on, in Snakemake 9.27.1:
STOCK_SOURCE_SHA256 = stock_hashes("snakemake_guards")  # rnnfleet.hooks.snakemake_contract

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


def apply(dataset_files: Iterable[str], warn: bool = True) -> bool:
    """Guard `dataset_files` (paths as the rules name them as inputs); True when the guards
    are on. `warn`: print the one warning line when they do not fit this Snakemake."""
    global _dataset_files
    problems = source_differences(STOCK_SOURCE_SHA256)
    if problems:
        if warn and worth_a_warning(problems):
            print(
                f"rnnfleet: WARNING: guards for unusable dataset files are off ({'; '.join(problems)}); "
                "a dataset file deleted or made unreadable during a run ends the run for every dataset",
                file=sys.stderr,
            )
        return False
    import snakemake.io
    import snakemake.jobs

    _dataset_files = frozenset(map(str, dataset_files))
    wait_for_files.__rnnfleet_stock__ = _stock(snakemake.io.wait_for_files)
    snakemake.jobs.wait_for_files = wait_for_files  # the name Job.prepare looks up
    checksum.__rnnfleet_stock__ = _stock(snakemake.io._IOFile.checksum)
    snakemake.io._IOFile.checksum = checksum
    return True
