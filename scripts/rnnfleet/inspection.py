"""Look before training: one table row per dataset, from reading its file, training nothing.

Promise: `inspect_datasets` writes a CSV (results/inspect.csv by `snakemake inspect`) with,
for every dataset, how its file was read, its bars, first and last time, median bar
spacing, gaps (preprocess.max_gap), rows dropped and why, and the training, validation and
test windows the current train.seq_len leaves; a file that cannot be read gets its one-line
problem instead, and nothing that goes wrong with one dataset stops the table of the others.
Reading, cleaning, features, gaps and the split are the preprocess job's own code.
"""

from __future__ import annotations

import io
import sys

import numpy as np

from rnnfleet.data import bar_features, bars_label, features_for_bars, left_out_note, read_clean_bars, split_points
from rnnfleet.errors import UserError, one_line
from rnnfleet.gaps import find_gaps, window_numbers
from rnnfleet.joining import check_one_minute_bars

INSPECT_COLUMNS = (
    "dataset",
    "file",
    "status",
    "read_as",
    "bars",
    "first",
    "last",
    "median_spacing",
    "gaps",
    "longest_gap",
    "cleaning",
    "train_windows",
    "val_windows",
    "test_windows",
    "long_enough",
    "problem",
)


def inspect_dataset(dataset: str, path: str | list[str], settings: dict) -> dict:
    """One row of the table. settings: columns, read_format, max_bad_fraction, max_gap,
    seq_len, horizon, val_fraction, test_fraction, features (the preprocess job's params)."""

    row = {"dataset": dataset, "file": bars_label(path)}
    try:
        frame = read_clean_bars(path, settings["columns"], settings["max_bad_fraction"], settings["read_format"])
        # the checks preprocess makes on the numbers; the features' warm-up
        check_one_minute_bars(frame["timestamp"].array.asi8, row["file"])
        features, left_out = features_for_bars(frame, settings["features"], row["file"])
        warmup = bar_features(frame, features, row["file"]).warmup
    except UserError as error:  # a data error, or a features plug-in that fails on this file
        return {**row, "status": "unusable", "long_enough": False, "problem": str(error)}
    except Exception as error:  # a bug must not cost the other datasets their rows
        problem = f"{row['file']}: internal error {type(error).__name__}: {one_line(error)}"
        return {**row, "status": "unusable", "long_enough": False, "problem": problem}
    timestamps_ns = frame["timestamp"].array.asi8
    steps = np.diff(timestamps_ns)
    gap_bars = find_gaps(timestamps_ns, settings["max_gap"])
    seq_len, horizon = int(settings["seq_len"]), int(settings["horizon"])
    feature_rows = max(len(frame) - warmup - horizon, 0)
    test_fraction = settings["test_fraction"]
    split = split_points(feature_rows, seq_len, horizon, settings["val_fraction"], test_fraction, warmup)
    train, val, test = window_numbers(feature_rows, split, gap_bars, seq_len, horizon, warmup)
    long_enough = bool(len(train) and len(val) and (len(test) or not test_fraction))
    return {
        **row,
        "status": "ok" if long_enough else "too short",
        "read_as": frame.attrs["read_as"],
        "bars": len(frame),
        "first": frame["timestamp"].iloc[0],
        "last": frame["timestamp"].iloc[-1],
        "median_spacing": duration_text(int(np.median(steps))) if len(steps) else "",
        "gaps": len(gap_bars),
        "longest_gap": duration_text(int(steps[gap_bars].max())) if len(gap_bars) else "",
        "cleaning": "; ".join([*frame.attrs.get("notes", []), *([left_out_note(left_out)] if left_out else [])]),
        "train_windows": len(train),
        "val_windows": len(val),
        "test_windows": len(test),
        "long_enough": long_enough,
        "problem": ""
        if long_enough
        else f"too few bars for one training, one validation and one test window with train.seq_len={seq_len}"
        + (f" between gaps longer than preprocess.max_gap={settings['max_gap']}" if len(gap_bars) else ""),
    }


def inspect_datasets(
    files: dict[str, str | list[str]], settings: dict, table_path: str, dataset_settings: dict | None = None
) -> None:
    """The table of every dataset in `files` ({dataset: its path or paths}), written atomically;
    each read with `settings`, or with its own from dataset_settings ({dataset: settings}, the
    datasets sheet's overrides)."""
    dataset_settings = dataset_settings or {}
    import pandas as pd

    from rnnfleet.checkpoint import atomic_write

    rows = []
    for number, (dataset, path) in enumerate(files.items(), 1):
        rows.append(inspect_dataset(dataset, path, dataset_settings.get(dataset, settings)))
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
    print(
        f"{len(table)} dataset(s) inspected -> {table_path}; {len(not_ok)} not trainable as they are"
        + "".join(f"\n  {row.dataset}: {row.problem}" for row in not_ok.itertuples()),
        file=sys.stderr,
    )


def duration_text(nanoseconds: int) -> str:
    """'00:01:00', '2 days 00:01:00': a duration as people read it."""
    import pandas as pd

    return str(pd.Timedelta(nanoseconds)).removeprefix("0 days ")
