"""A weekend gap in a real run (tests/layouts.py): the series is split there and the windows
that span it are left out of training and validation, as the log says.
"""

from __future__ import annotations

import json

from layouts import SEQ_LEN, preprocess_log

from rnnfleet.prep.arrays_file import load_arrays


def test_no_window_spans_a_weekend_gap(layouts_run):
    workdir, _ = layouts_run
    log = preprocess_log(workdir, "WEEKEND_1m")
    assert "1 gap(s) longer than preprocess.max_gap=15min split the series (longest 2 days 00:01:00 after" in log
    arrays = load_arrays(workdir / "prep" / "WEEKEND_1m.npz")
    assert arrays.gap_bars.tolist() == [199]
    # Brute force: a window ending at feature row t touches the steps t-seq_len+1 .. t+horizon.
    ends = range(SEQ_LEN - 1, arrays.rows)
    clean = [t for t in ends if not (t - SEQ_LEN + 1 <= 199 <= t + arrays.horizon)]
    split = arrays.split
    train = [t for t in clean if t < split.train_end]
    val = [t for t in clean if split.val_start <= t < split.val_end]
    test = [t for t in clean if t >= split.test_start]
    metrics = json.loads((workdir / "metrics" / "WEEKEND_1m.json").read_text())
    assert (metrics["train_windows"], metrics["val_windows"], metrics["test_windows"]) == (
        len(train),
        len(val),
        len(test),
    )
    assert len(train) < split.train_end - (SEQ_LEN - 1)  # windows were left out
    every_window = split.train_end - (SEQ_LEN - 1) + split.val_end - split.val_start + arrays.rows - split.test_start
    lost = every_window - len(train) - len(val) - len(test)
    assert f"{lost} window(s) spanning them are not used" in log
