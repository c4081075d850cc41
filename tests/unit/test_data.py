"""Unit tests of the plain data functions: features, split, normalisation, array I/O."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TINY_ROWS

from rnnfleet.prep.arrays_file import ARRAYS_FORMAT, load_arrays, save_arrays
from rnnfleet.prep.prepare import DataError, compute_features, prepare_dataset, read_clean_bars, split_and_normalise
from rnnfleet.synthetic import write_synthetic_csv


def bars_table(prices, volume):
    """A bars table as read_clean_bars returns it, from (rows, 4) prices and (rows,) volume."""
    import pandas as pd

    prices = np.asarray(prices, dtype=float)
    timestamps = pd.date_range("2024-01-01", periods=len(prices), freq="min", tz="UTC")
    frame = pd.DataFrame(prices, columns=["open", "high", "low", "close"])
    return frame.assign(volume=np.asarray(volume, dtype=float), timestamp=timestamps)


def test_features_are_log_ratios_to_previous_close_and_target_looks_ahead():
    prices = np.array([[10, 11, 9, 10], [10, 12, 10, 11], [11, 11, 10, 10], [10, 13, 10, 12]], dtype=float)
    bars = bars_table(prices, [1.0, 2.0, 0.0, 3.0])
    features, targets, matrix, last_close = compute_features(bars, horizon=1)
    assert features.shape == (2, 5) and targets.shape == (2,) and matrix.warmup == 1
    np.testing.assert_allclose(features[0], np.log([10 / 10, 12 / 10, 10 / 10, 11 / 10, 1 + 2.0]))
    np.testing.assert_allclose(targets, np.log([10 / 11, 12 / 10]))  # close t -> close t+1
    assert last_close == 12
    features2, targets2, _, _ = compute_features(bars, horizon=2)
    assert len(features2) == len(targets2) == 1
    np.testing.assert_allclose(targets2, np.log([12 / 11]))


@pytest.mark.parametrize("bad_price", [0.0, -1.0])
def test_non_positive_prices_are_rejected_with_the_row(bad_price):
    prices = np.full((5, 4), 10.0)
    prices[3, 2] = bad_price
    with pytest.raises(DataError, match="data row 4"):
        compute_features(bars_table(prices, np.ones(5)), horizon=1, name="x.csv")


def test_split_is_chronological_and_statistics_come_from_training_rows_only():
    rng = np.random.default_rng(0)
    features, targets = rng.normal(size=(1000, 5)), rng.normal(size=1000)
    arrays = split_and_normalise(
        features, targets, seq_len=10, horizon=3, val_fraction=0.2, last_close=1.0, test_fraction=0.15
    )
    # test: the last 15% (from row 850); validation: the 20% before it (from row 650); an embargo
    # of seq_len + horizon + warm-up = 14 rows before each part
    assert tuple(arrays.split) == (636, 650, 836, 850)
    shifted = features.copy()
    shifted[636:] += 1000.0  # validation and test rows must not move the statistics
    arrays_shifted = split_and_normalise(shifted, targets, 10, 3, 0.2, 1.0, test_fraction=0.15)
    np.testing.assert_array_equal(arrays.feature_mean, arrays_shifted.feature_mean)
    np.testing.assert_allclose(arrays.features[:636].mean(axis=0), 0, atol=1e-5)
    assert arrays.features.dtype == np.float32 and arrays.features.flags.c_contiguous


def test_too_few_rows_is_a_clear_error():
    with pytest.raises(DataError, match="too few rows"):
        split_and_normalise(np.zeros((30, 5)), np.zeros(30), seq_len=60, horizon=1, val_fraction=0.2, last_close=1.0)


def test_arrays_round_trip_without_pickle(tmp_path):
    csv_path = write_synthetic_csv(tmp_path / "A_1m.csv", TINY_ROWS, 1)
    arrays, notes = prepare_dataset(csv_path, seq_len=16, horizon=1, val_fraction=0.2)
    assert notes == []
    save_arrays(arrays, tmp_path / "A.npz")
    loaded = load_arrays(tmp_path / "A.npz")
    np.testing.assert_array_equal(loaded.features, arrays.features)
    np.testing.assert_array_equal(loaded.targets, arrays.targets)
    assert (loaded.split, loaded.horizon) == (arrays.split, 1) and arrays.split.test_start < arrays.rows
    assert loaded.rows == TINY_ROWS - 2  # first bar has no previous close, last has no target
    # Stored once (rows x features and a target, raw float64, plus a digest and a time per
    # row, and the last bars for the next append), not as pre-cut windows.
    assert (tmp_path / "A.npz").stat().st_size < 2 * TINY_ROWS * 6 * 8 + TINY_ROWS * 16 + 8192


def test_array_file_with_pickled_objects_is_refused(tmp_path):
    np.savez(tmp_path / "evil.npz", features=np.array([object()], dtype=object))
    with pytest.raises(DataError, match="not a valid rnnfleet array file"):
        load_arrays(tmp_path / "evil.npz")


def test_each_feature_row_keeps_its_bars_time_and_the_test_chart_the_forecasts_times(tmp_path):
    import pandas as pd

    from rnnfleet.prep.targets import TARGETS
    from rnnfleet.train.evaluate import test_series

    csv_path = write_synthetic_csv(tmp_path / "A_1m.csv", TINY_ROWS, 1)
    bars = pd.read_csv(csv_path)
    arrays, _ = prepare_dataset(csv_path, seq_len=16, horizon=1, val_fraction=0.2)
    times = pd.to_datetime(bars["timestamp"], utc=True).astype("datetime64[ns, UTC]").array.asi8
    np.testing.assert_array_equal(arrays.row_times, times[arrays.warmup : arrays.warmup + arrays.rows])
    save_arrays(arrays, tmp_path / "A.npz")
    np.testing.assert_array_equal(load_arrays(tmp_path / "A.npz").row_times, arrays.row_times)

    numbers = np.arange(arrays.split.test_start, arrays.rows - 16)
    outputs = np.zeros(len(numbers), np.float32)
    series = test_series(numbers, outputs, outputs, TARGETS[arrays.target], arrays, 16)
    assert series["time"][0] == times[arrays.warmup + numbers[0] + 15] // 10**9  # the window's last bar


def test_parts_of_a_fixed_size_keep_their_size_whatever_the_history_and_need_the_fewest_rows():
    from rnnfleet.prep.split import SplitSettings, embargo_rows, part_sizes

    embargo = embargo_rows(30, 1, 1)
    for rows in (5_000, 10_000, 50_000):
        split = SplitSettings(30, 1, 0.2, 0.15, 1, val_bars=1_000, test_bars=500).points(rows)
        assert part_sizes(rows, split, 30)[1:] == (1_000, 500)
        assert split.test_start - split.val_end == split.val_start - split.train_end == embargo
    fixed = SplitSettings(30, 1, 0.2, 0.15, 1, 1_000, 500)
    fewest = fixed.rows_needed()
    assert fewest == 30 + embargo + 1_000 + embargo + 500  # one training window
    assert fixed.long_enough(fewest)
    assert not fixed.long_enough(fewest - 1)
    # Without them, the fractions as before.
    assert SplitSettings(30, 1, 0.2, 0.15, 1).points(1_000) == (618, 650, 818, 850)


def test_at_the_defaults_the_validation_and_test_parts_stop_growing_past_one_week_of_minute_bars():
    """The preprocess settings of the repo's config.yaml, as the preprocess job passes them: at
    30 days the parts are the fractions' exactly; at 90 and 180 days each holds its cap."""
    import yaml
    from conftest import REPO

    from rnnfleet.prep.split import DEFAULT_MAX_PART_BARS, SplitSettings, part_sizes
    from rnnfleet.settings import LATER_KEYS, preprocess_settings

    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())["properties"]["preprocess"]
    for key in ("val_max_bars", "test_max_bars"):
        assert schema["properties"][key]["default"] == LATER_KEYS[f"preprocess.{key}"] == DEFAULT_MAX_PART_BARS
    settings = preprocess_settings(yaml.safe_load((REPO / "config.yaml").read_text()))
    seq_len, horizon = settings["seq_len"], settings["horizon"]
    sizes = {}
    for days in (30, 90, 180):
        rows = days * 1440
        arrays = split_and_normalise(
            np.random.default_rng(days).normal(size=(rows, 2)),
            np.random.default_rng(days).normal(size=rows),
            seq_len,
            horizon,
            settings["val_fraction"],
            1.0,
            test_fraction=settings["test_fraction"],
            **{
                key: settings[key]
                for key in ("val_bars", "test_bars", "val_max_bars", "test_max_bars")
                if key in settings
            },
        )
        sizes[days] = part_sizes(rows, arrays.split, seq_len)[1:]
    fractions = SplitSettings(seq_len, horizon, settings["val_fraction"], settings["test_fraction"]).points(30 * 1440)
    assert sizes[30] == part_sizes(30 * 1440, fractions, seq_len)[1:]
    assert max(sizes[30]) < DEFAULT_MAX_PART_BARS
    assert sizes[90] == sizes[180] == (DEFAULT_MAX_PART_BARS, DEFAULT_MAX_PART_BARS)


def test_an_array_file_holds_raw_values_and_one_of_the_older_format_is_refused(tmp_path):
    csv_path = write_synthetic_csv(tmp_path / "A_1m.csv", TINY_ROWS, 1)
    arrays, _ = prepare_dataset(csv_path, seq_len=16, horizon=1, val_fraction=0.2)
    save_arrays(arrays, tmp_path / "A.npz")
    raw_features, raw_targets, _, _ = compute_features(read_clean_bars(csv_path, None, 0.01), horizon=1)
    with np.load(tmp_path / "A.npz") as stored:
        assert "features" not in stored.files and int(stored["arrays_format"]) == ARRAYS_FORMAT == 2
        np.testing.assert_array_equal(stored["raw_features"], raw_features, strict=True)
        np.testing.assert_array_equal(stored["raw_targets"], raw_targets, strict=True)
        older = {name: stored[name] for name in stored.files if name != "arrays_format"}
    np.savez(tmp_path / "older.npz", **older, features=arrays.features)  # format 1: no format number
    with pytest.raises(DataError, match="older.npz: an array file of format 1, not 2"):
        load_arrays(tmp_path / "older.npz")


@pytest.mark.parametrize(
    ("features", "target", "horizon", "max_gap"),
    [
        (
            ["ohlc_returns", "log_volume", "hl_range", "volume_change", "time_of_day", "day_of_week"],
            "direction",
            [1, 5],
            "15min",
        ),
        (["ohlc_returns"], "abs_log_return", 3, "off"),
    ],
)
def test_appended_arrays_are_those_of_every_bar_member_by_member(tmp_path, capsys, features, target, horizon, max_gap):
    from rnnfleet.runner.jobs import preprocess_one
    from rnnfleet.synthetic import synthetic_bars

    bars = synthetic_bars(4 * 300, 3)
    bars = bars.drop(index=range(340, 400))  # an hour missing: a gap at 15min
    data = tmp_path / "data"
    data.mkdir()
    paths = []
    for day in range(4):
        paths.append(str(data / f"A-{day}.csv"))
        bars.iloc[day * 285 : (day + 1) * 285].to_csv(paths[-1], index=False, float_format="%.6f")
    settings = dict(seq_len=8, horizon=horizon, val_fraction=0.2, features=features, target=target, max_gap=max_gap)
    preprocess_one(paths[:3], str(tmp_path / "morning" / "A.npz"), **settings, dataset="A")
    capsys.readouterr()
    preprocess_one(paths, str(tmp_path / "morning" / "A.npz"), **settings, dataset="A")
    assert "the rows of 285 new bars appended to the previous arrays'" in capsys.readouterr().err
    preprocess_one(paths, str(tmp_path / "full" / "A.npz"), **settings, dataset="A")
    with np.load(tmp_path / "morning" / "A.npz") as appended, np.load(tmp_path / "full" / "A.npz") as every:
        assert appended.files == every.files
        for member in every.files:
            np.testing.assert_array_equal(appended[member], every[member], err_msg=member, strict=True)
