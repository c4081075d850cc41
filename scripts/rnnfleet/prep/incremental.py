"""A morning's preprocess job: the rows of the new bars appended to the previous arrays,
instead of the arrays made again from every bar.

Promises:
- prepared_arrays(files, arrays_path, settings) gives the arrays that rnnfleet.prep.prepare.prepare_dataset
  would make from every bar of `files` (the same numbers, split, statistics, digests, times,
  gaps, quality measures and read lines), reading only the files that the previous arrays at
  arrays_path were not made from, when all of these hold; else it makes them from every bar
  and says why on stderr:
  - the previous arrays are of this format and were made by this code (the modules that read,
    featurise, measure and split, numpy's and pandas' versions: code_key) with these settings;
  - their files are the first of `files`, in the same order, each unchanged since (its size
    and modification time, and its .CHECKSUM's, as rnnfleet.bars.bar_cache checks them), and every
    bar of the new files is later than their last bar;
  - every feature is a built-in one and the target one of APPENDABLE_TARGETS: values that a
    bar's own and its previous bar's numbers decide (a user's feature may look further back);
  - the rows recomputed from the kept last bars equal the stored ones (CHECK_ROWS of them), a
    check that the new rows are computed as the whole history would compute them.
- The features' statistics and the split come from all rows, as a full make gives them: the
  arrays hold raw values (rnnfleet.prep.prepare, format 2), so nothing normalised is appended.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from rnnfleet.errors import DataError
from rnnfleet.prep.arrays import PreparedArrays
from rnnfleet.prep.arrays_file import ARRAYS_FORMAT, arrays_format, load_arrays
from rnnfleet.prep.prepare import (
    CHECK_ROWS,
    FORMAT_DEFAULTS,
    MAX_BAD_FRACTION_KEY,
    FeatureColumns,
    arrays_of,
    bar_columns,
    bar_features,
    bars_label,
    code_key,
    prepare_dataset,
    read_files,
    versioned,
)
from rnnfleet.prep.split import DEFAULT_MAX_PART_BARS, DEFAULT_TEST_FRACTION
from rnnfleet.prep.targets import TARGETS


def base_path_for(arrays_path: str | os.PathLike) -> Path:
    """Where the previous arrays are kept for the next job to append to: beside the bars
    cache (rnnfleet.bars.bar_cache), as Snakemake deletes a job's output before the job runs."""
    from rnnfleet.bars.bar_cache import cache_path_for

    cached = cache_path_for(arrays_path)
    return cached.with_name(f"{Path(arrays_path).stem}.arrays.npz")


def keep_for_next_append(arrays_path: str | os.PathLike, arrays: PreparedArrays) -> None:
    """Keep the array file just written at base_path_for (a second name of the same file
    where the file system allows it); none where the arrays cannot be appended to."""
    import shutil

    base = base_path_for(arrays_path)
    base.unlink(missing_ok=True)
    if not arrays.append_base:
        return
    base.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(arrays_path, base)
    except OSError:
        shutil.copyfile(arrays_path, base)


def arrays_settings_sha256(settings: dict, timezone: str) -> str:
    """The settings hash an array file records (what an update checks they were made with)."""
    from rnnfleet.settings import settings_for_hash
    from rnnfleet.train.updating import settings_sha256

    return settings_sha256(settings_for_hash({**settings, "dataset": None}, timezone))


def prepared_arrays(data_files: list[str], arrays_path: str, settings: dict) -> tuple[PreparedArrays, list[str]]:
    """The dataset's arrays (see the module doc) with their settings hash, and the notes for
    the log. A DataError where the only bar the previous arrays lack was read from a cut last
    line and left out (refuse_cut_line_alone)."""
    from rnnfleet.bars.bar_cache import cache_path_for

    name = bars_label(data_files, settings.get("dataset", ""))
    previous, why = previous_arrays(base_path_for(arrays_path), data_files, settings)
    if previous is not None:
        appended, why = append_new_bars(previous, data_files, settings, name)
        if appended is not None:
            return appended
    if why:
        print(f"{name}: arrays made from every bar: {why}", file=sys.stderr)
    arrays, notes = prepare_dataset(data_files, **settings, bars_cache=cache_path_for(arrays_path))
    arrays = replace(arrays, settings_sha256=arrays_settings_sha256(settings, arrays.timezone))
    refuse_cut_line_alone(arrays, notes, base_path_for(arrays_path), name)
    return arrays, notes


def refuse_cut_line_alone(arrays: PreparedArrays, notes: list[str], previous_path: Path, name: str) -> None:
    """A DataError naming the file when its cut last line (left out, rnnfleet.bars.formats.CUT_LINE)
    was the only bar new since the previous arrays (the same settings, rows and last bar):
    without it nothing is new, and a train job would train from scratch on the bars the model
    has seen ("no new bars") while the dry-run said "update". The previous model stays; the
    next run reads the file again once its line is complete."""
    from rnnfleet.bars.formats import CUT_LINE

    cut = [note for note in notes if CUT_LINE in note]
    if not cut or not previous_path.exists():
        return
    try:
        previous = load_arrays(previous_path, normalised=False)
    except DataError:
        return
    if (previous.settings_sha256, previous.rows, previous.latest_time) == (
        arrays.settings_sha256,
        arrays.rows,
        arrays.latest_time,
    ):
        where = cut[0].split(f": {CUT_LINE}")[0] if f": {CUT_LINE}" in cut[0] else name
        raise DataError(
            f"{where}: {CUT_LINE}, and that line is its only new bar: nothing new to train on, the model is kept; "
            "the next run reads the file again once the line is complete"
        )


def previous_arrays(
    arrays_path: str | os.PathLike, data_files: list[str], settings: dict
) -> tuple[PreparedArrays | None, str]:
    """(the previous arrays kept at arrays_path, "") when new bars may be appended to them,
    else (None, why not; "" where there are none)."""
    from rnnfleet.bars.bar_cache import file_version, same_bytes

    if not os.path.exists(arrays_path):
        return None, ""
    try:
        found = arrays_format(arrays_path)
        if found != ARRAYS_FORMAT:
            return None, f"the previous array file is of format {found}, not {ARRAYS_FORMAT}"
        previous = load_arrays(arrays_path, normalised=False)
    except (DataError, OSError, ValueError, KeyError):
        return None, "the previous array file does not load"
    base = previous.append_base
    if not base:
        return None, "the previous arrays cannot be appended to (a user's feature or target, or too few bars)"
    if base["code"] != code_key():
        return None, "the previous arrays were made by other code"
    if arrays_settings_sha256(settings, previous.timezone) != previous.settings_sha256:
        return None, "the previous arrays were made with other settings"
    earlier = {facts["path"] for facts in base["files"]}
    if not earlier <= set(data_files):
        return None, "a file of the previous arrays is no longer one of the dataset's"
    if len(earlier) == len(data_files):
        return None, "no new file"
    for facts in base["files"]:
        version = file_version(facts["path"])
        # A file written again with the same bytes (a new time) is unchanged, as for the bars cache.
        if version != facts["version"] and (version is None or not same_bytes(facts["path"], version, facts)):
            return None, f"{facts['path']} changed since the previous arrays were made"
    return previous, ""


def append_new_bars(
    previous: PreparedArrays, data_files: list[str], settings: dict, name: str
) -> tuple[tuple[PreparedArrays, list[str]] | None, str]:
    """((the arrays, notes), "") from the previous arrays and the bars of the new files, or
    (None, why they were not appended)."""
    import pandas as pd

    from rnnfleet.bars.joining import check_one_minute_bars, file_sha256, join_bars
    from rnnfleet.bars.quality import add_counts, bar_counts, check_measures, measures_of, measures_text
    from rnnfleet.prep.prepare import file_facts, left_out_note

    base = previous.append_base
    columns, read_format = settings.get("columns"), settings.get("read_format")
    max_bad_fraction = settings.get("max_bad_fraction", 0.01)
    earlier = {facts["path"] for facts in base["files"]}
    new_paths = [path for path in data_files if path not in earlier]
    # Read straight from the files, not through prep/bars/: keeping that cache would rewrite
    # every earlier file's bars each morning; a later full make reads the new files once.
    frames, _, read_sources = read_files(new_paths, columns, max_bad_fraction, read_format, MAX_BAD_FRACTION_KEY, None)
    new_bars = sum(len(part) for _, part in frames)
    for line in read_sources:
        print(line, file=sys.stderr)
    print(
        f"{name}: {len(frames)} file(s) read ({new_bars:,} bars), {len(earlier)} earlier file(s) not read: "
        f"their rows are those of the previous arrays",
        file=sys.stderr,
    )
    new = join_bars(frames)  # its notes name their files, as a join of every file does
    notes = list(new.attrs.get("notes", []))
    if previous.features_left_out:
        notes.append(left_out_note(previous.features_left_out))
    new.attrs["conflicting_duplicates"] = sum(part.attrs.get("conflicting_duplicates", 0) for _, part in frames)
    # In the dataset's order of files, as a join of every file names their ways of reading.
    # A file read without the bars cache (a dataset of one file until now) gets its hash once,
    # as the cache would have recorded it.
    facts_of = {
        facts["path"]: {**facts, "sha256": facts["sha256"] or file_sha256(facts["path"])} for facts in base["files"]
    } | {path: file_facts(path, part, file_sha256(path)) for path, part in frames}
    facts = [facts_of[path] for path in data_files]
    if len({fact["volume"] for fact in facts}) > 1 or bar_columns(new) != base["columns"]:
        return None, "the new files' columns are not those of the earlier ones"
    new_times = new["timestamp"].array.asi8
    if not len(new) or int(new_times[0]) <= previous.latest_time:
        return None, "the new files hold bars not later than the earlier ones"
    tail = pd.DataFrame(previous.tail_values, columns=base["columns"])
    tail.insert(0, "timestamp", pd.Series(previous.tail_times).astype("datetime64[ns]").dt.tz_localize("UTC"))
    bars = pd.concat([tail, new[["timestamp", *base["columns"]]]], ignore_index=True)
    kept, warmup, horizon = len(tail), previous.warmup, previous.horizon
    first_row = kept - horizon - CHECK_ROWS  # of `bars`: the first row computed again
    if first_row < 0 or previous.rows < CHECK_ROWS:
        return None, "too few earlier bars"
    matrix = bar_features(bars, previous.feature_definition, name)
    log_close = np.log(bars["close"].to_numpy(dtype=np.float64))
    end = len(bars) - horizon  # the first bar without a target
    target_values = [TARGETS[previous.target].values(log_close, h)[first_row:end] for h in previous.all_horizons]
    targets = np.column_stack(target_values) if previous.horizons else target_values[0]
    features = matrix.values[first_row:end]
    if first_row < matrix.warmup or not (
        np.array_equal(features[:CHECK_ROWS], previous.raw_features[-CHECK_ROWS:])
        and np.array_equal(targets[:CHECK_ROWS], previous.raw_targets[-CHECK_ROWS:])
    ):
        return None, "the rows computed again from the last earlier bars differ from the stored ones"
    features, targets = features[CHECK_ROWS:], targets[CHECK_ROWS:]
    all_features = np.concatenate([previous.raw_features, features])
    all_targets = np.concatenate([previous.raw_targets, targets])
    times = bars["timestamp"].array.asi8
    timestamps_ns = np.concatenate(
        [np.asarray(base["head_times"], np.int64), previous.row_times, times[kept - horizon :]]
    )
    counts = add_counts(base["counts"], bar_counts(new))
    if counts is None:
        return None, "the new files' columns are not those of the earlier ones"
    check_one_minute_bars(timestamps_ns, name)
    quality_row, warnings = check_measures(
        measures_of(counts, timestamps_ns, settings.get("max_gap")), settings.get("quality"), name
    )
    for line in warnings:
        print(line, file=sys.stderr)
    if measures_text(quality_row):
        print(f"{name}: data quality measured: {measures_text(quality_row)}", file=sys.stderr)
    quality_row.pop("quality_flags")
    split = (
        settings["val_fraction"],
        settings.get("test_fraction", DEFAULT_TEST_FRACTION),
        settings.get("val_bars"),
        settings.get("test_bars"),
        settings.get("val_max_bars", DEFAULT_MAX_PART_BARS),
        settings.get("test_max_bars", DEFAULT_MAX_PART_BARS),
    )
    feature_columns = FeatureColumns(previous.feature_definition, previous.feature_names, previous.features_left_out)
    arrays, gap_note = arrays_of(
        all_features,
        all_targets,
        timestamps_ns,
        warmup,
        settings["seq_len"],
        settings["horizon"],
        split,
        previous.target,
        settings.get("max_gap"),
        name,
        feature_columns,
    )
    read_as = "; ".join(dict.fromkeys(fact["read_as"] for fact in facts))
    timezone = "; ".join(dict.fromkeys(fact["timezone"] for fact in facts))
    tail_rows = len(previous.tail_times)
    values = bars[base["columns"]].to_numpy(dtype=np.float64)
    arrays = replace(
        arrays,
        quality=quality_row,
        read_format={**FORMAT_DEFAULTS, **(read_format or {})},
        timezone=timezone,
        read_as=f"{len(facts)} files joined: {read_as}",
        latest_features=np.array(matrix.values[-settings["seq_len"] :], dtype=np.float64),
        last_close=float(bars["close"].iloc[-1]),
        append_base={
            **base,
            "files": [versioned(fact) for fact in facts],
            "bars": base["bars"] + len(new),
            "counts": counts,
        },
        tail_times=np.ascontiguousarray(times[-tail_rows:], dtype=np.int64),
        tail_values=values[-tail_rows:],
        settings_sha256=arrays_settings_sha256(settings, timezone),
    )
    print(
        f"{name}: the rows of {len(new):,} new bars appended to the previous arrays' {previous.rows:,}", file=sys.stderr
    )
    return (arrays, notes + gap_note), ""
