"""Look before training: one table row per dataset, from reading its file, training nothing.

Promise: `inspect_datasets` writes a CSV (results/inspect.csv by `snakemake inspect`) with,
for every dataset, how its file was read, its bars, first and last time, median bar
spacing, the zone its times were read in ("UTC (assumed)" beside the read line's "naive
times read as UTC (set format.timezone)" when nothing gave one), gaps (preprocess.max_gap),
rows dropped and why, the training, validation and test windows the current train.seq_len
leaves, and its data-quality flags (rnnfleet.bars.quality: the measures, and in quality_flags those
warned of); a file that cannot be read, or whose quality fails a `quality:` threshold, gets its
one-line problem instead, and nothing that goes wrong with one dataset stops the table of the
others. Reading, cleaning, features, gaps and the split are the preprocess job's own code.
"""

from __future__ import annotations

import io
import sys

import numpy as np

from rnnfleet.bars.formats import NAIVE_AS_UTC, TIMEZONE_ASSUMED
from rnnfleet.bars.joining import check_one_minute_bars
from rnnfleet.bars.quality import QUALITY_COLUMNS, check_quality, measure_quality
from rnnfleet.errors import UserError, one_line
from rnnfleet.prep.gaps import duration_text, find_gaps, window_numbers
from rnnfleet.prep.prepare import (
    bar_features,
    bars_label,
    features_for_bars,
    left_out_note,
    longest_horizon,
    read_clean_bars,
)
from rnnfleet.prep.split import SplitSettings

INSPECT_COLUMNS = (
    "dataset",
    "file",
    "status",
    "read_as",
    "timezone",
    "bars",
    "first",
    "last",
    "gaps",
    "longest_gap",
    "cleaning",
    "train_windows",
    "val_windows",
    "test_windows",
    "long_enough",
    *QUALITY_COLUMNS,
    "problem",
)


def inspect_dataset(dataset: str, path: str | list[str], settings: dict) -> dict:
    """One row of the table. settings: columns, read_format, max_bad_fraction, max_gap,
    seq_len, horizon, val_fraction, test_fraction, features, quality (the preprocess job's params)."""

    row = {"dataset": dataset, "file": bars_label(path)}
    frame = None
    try:
        frame = read_clean_bars(path, settings["columns"], settings["max_bad_fraction"], settings["read_format"])
        # the checks preprocess makes on the numbers; the features' warm-up
        check_one_minute_bars(frame["timestamp"].array.asi8, row["file"])
        quality_row, _ = check_quality(frame, settings["max_gap"], settings.get("quality"), row["file"])
        features, left_out = features_for_bars(frame, settings["features"], row["file"])
        warmup = bar_features(frame, features, row["file"]).warmup
    except UserError as error:  # a data error, or a features plug-in that fails on this file
        # The measures of bars that were read, so the table shows what a failing flag found.
        measured = measure_quality(frame, settings["max_gap"]) if frame is not None and len(frame) else {}
        return {**row, **measured, "status": "unusable", "long_enough": False, "problem": str(error)}
    except Exception as error:  # a bug must not cost the other datasets their rows
        problem = f"{row['file']}: internal error {type(error).__name__}: {one_line(error)}"
        return {**row, "status": "unusable", "long_enough": False, "problem": problem}
    timestamps_ns = frame["timestamp"].array.asi8
    steps = np.diff(timestamps_ns)
    gap_bars = find_gaps(timestamps_ns, settings["max_gap"])
    seq_len, horizon = int(settings["seq_len"]), longest_horizon(settings["horizon"])
    feature_rows = max(len(frame) - warmup - horizon, 0)
    test_fraction, test_bars = settings["test_fraction"], settings.get("test_bars")
    split = SplitSettings.of(settings, seq_len, horizon, warmup).points(feature_rows)
    train, val, test = window_numbers(feature_rows, split, gap_bars, seq_len, horizon, warmup)
    long_enough = bool(len(train) and len(val) and (len(test) or not (test_fraction or test_bars)))
    return {
        **row,
        "status": "ok" if long_enough else "too short",
        "read_as": frame.attrs["read_as"],
        "timezone": frame.attrs["timezone"],
        "bars": len(frame),
        "first": frame["timestamp"].iloc[0],
        "last": frame["timestamp"].iloc[-1],
        "gaps": len(gap_bars),
        "longest_gap": duration_text(int(steps[gap_bars].max())) if len(gap_bars) else "",
        "cleaning": "; ".join([*frame.attrs.get("notes", []), *([left_out_note(left_out)] if left_out else [])]),
        "train_windows": len(train),
        "val_windows": len(val),
        "test_windows": len(test),
        "long_enough": long_enough,
        **quality_row,
        "problem": ""
        if long_enough
        else f"too few bars for one training, one validation and one test window with train.seq_len={seq_len}"
        + (f" between gaps longer than preprocess.max_gap={settings['max_gap']}" if len(gap_bars) else ""),
    }


def inspect_datasets(
    files: dict[str, str | list[str]],
    settings: dict,
    table_path: str,
    dataset_settings: dict | None = None,
    quality_thresholds: dict | None = None,
    dataset_quality: dict | None = None,
) -> None:
    """The table of every dataset in `files` ({dataset: its path or paths}), written atomically;
    each read with `settings`, or with its own from dataset_settings ({dataset: settings}, the
    datasets sheet's overrides); quality flags judged with its own from dataset_quality
    ({dataset: its `quality:`}), else with quality_thresholds (warn and fail; None: the
    settings' own)."""
    dataset_settings, dataset_quality = dataset_settings or {}, dataset_quality or {}
    import pandas as pd

    from rnnfleet.atomic_files import atomic_write

    rows = []
    for number, (dataset, path) in enumerate(files.items(), 1):
        own_settings = dataset_settings.get(dataset, settings)
        thresholds = dataset_quality.get(dataset, quality_thresholds)
        if thresholds is not None:
            own_settings = {**own_settings, "quality": thresholds}
        rows.append(inspect_dataset(dataset, path, own_settings))
        print(f"{number}/{len(files)} {dataset}: {rows[-1]['status']}", file=sys.stderr)
    table = pd.DataFrame(rows, columns=list(INSPECT_COLUMNS))
    # Counts stay whole numbers when an unusable file leaves them empty.
    table = table.astype(
        {column: "Int64" for column in ("bars", "gaps", "train_windows", "val_windows", "test_windows")}
    )
    text = io.StringIO()
    table.to_csv(text, index=False)
    with atomic_write(table_path) as handle:
        handle.write(text.getvalue().encode())
    not_ok = table[table["status"] != "ok"]
    assumed_utc = table.loc[table["timezone"] == TIMEZONE_ASSUMED, "dataset"].tolist()
    print(
        f"{len(table)} dataset(s) inspected -> {table_path}; {len(not_ok)} not trainable as they are"
        + "".join(f"\n  {row.dataset}: {row.problem}" for row in not_ok.itertuples())
        + (f"\n{len(assumed_utc)} dataset(s): {NAIVE_AS_UTC}: {', '.join(assumed_utc)}" if assumed_utc else ""),
        file=sys.stderr,
    )
