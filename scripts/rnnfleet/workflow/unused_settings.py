"""Settings that cannot change a dataset's arrays, left out of what re-runs its jobs.

`format.timezone` says the zone of times written without one. A dataset whose files give
their times as epoch numbers (UTC by definition) or with their zone reads the same bars
whatever it is, so adding, changing or removing it must re-run nothing for that dataset.
The preprocess job records the zone its times were read in (PreparedArrays.timezone); where
every file's times were zone-free, the setting is given as its default ("auto") in the
dataset's params (here, while the workflow is read: one small read of the array file per
dataset, and only while format.timezone is set) and in the array file's settings hash (the
job, rnnfleet.runner.jobs), so neither the rules' params nor the model's fingerprint change.
"""

from __future__ import annotations

import os

from rnnfleet.settings import DEFAULT_ZONE, times_zone_free

SHOWN_DATASETS = 5


def recorded_zones(arrays_path: str) -> str:
    """The zone(s) an array file says its times were read in; '' where it cannot be read."""
    from rnnfleet.prep.arrays_file import recorded_timezone

    return recorded_timezone(arrays_path) if os.path.exists(arrays_path) else ""


def zone_free_datasets(zones: dict[str, str], arrays_path_of, files_of=None) -> list[str]:
    """Of {dataset: its format.timezone}, the datasets whose zone is set (not auto) and
    whose array file records zone-free times (sorted). files_of(dataset): (its files, its
    `columns:`, its `format:`), for a dataset without an array file yet: zone-free when the
    first lines of every file give epoch times or times with their zone (rnnfleet.bars.formats.
    head_times_zone_free), so that its first run records the default zone as well and a zone
    removed later re-runs nothing either."""
    from rnnfleet.bars.formats import head_times_zone_free

    def zone_free(dataset: str) -> bool:
        arrays_path = arrays_path_of(dataset)
        if os.path.exists(arrays_path) or files_of is None:
            return times_zone_free(recorded_zones(arrays_path))
        paths, columns, read_format = files_of(dataset)
        return bool(paths) and all(head_times_zone_free(path, columns, read_format) for path in paths)

    return sorted(dataset for dataset, zone in zones.items() if zone != DEFAULT_ZONE and zone_free(dataset))


def unused_zone_note(datasets: list[str], zones: dict[str, str]) -> str:
    """The note that says for which datasets format.timezone is unused."""
    named = ", ".join(datasets[:SHOWN_DATASETS]) + (
        f" and {len(datasets) - SHOWN_DATASETS} more" if len(datasets) > SHOWN_DATASETS else ""
    )
    zone_text = ", ".join(sorted({repr(zones[dataset]) for dataset in datasets}))
    return (
        f"note: format.timezone {zone_text} is not used by {len(datasets)} dataset(s) whose files give their times "
        f"as epoch numbers or with their zone: {named}; nothing is re-run for it"
    )
