"""rnnfleet.pretraining without snakemake: row slices of an array file, the frozen membership."""

from __future__ import annotations

import json

import numpy as np

from rnnfleet.pretraining import frozen_membership, npz_rows


def test_npz_rows_reads_the_same_rows_as_loading_the_whole_array(tmp_path):
    path = tmp_path / "arrays.npz"
    features = np.arange(5000 * 3, dtype=np.float32).reshape(5000, 3)
    targets = np.linspace(-1, 1, 5000)
    np.savez(path, scalar=np.int64(7), features=features, targets=targets, fortran=np.asfortranarray(features))
    assert np.array_equal(npz_rows(str(path), "features", 1234, 1300), features[1234:1300])
    assert np.array_equal(npz_rows(str(path), "targets", 4990, 6000), targets[4990:])
    assert np.array_equal(npz_rows(str(path), "fortran", 10, 20), features[10:20])
    compressed = tmp_path / "compressed.npz"
    np.savez_compressed(compressed, features=features)
    assert np.array_equal(npz_rows(str(compressed), "features", 3, 9), features[3:9])


def test_the_datasets_served_stay_frozen_while_the_settings_are_unchanged(tmp_path):
    lineage = tmp_path / "pretrained.json"
    assert frozen_membership(str(lineage), "abc", ["A", "B"]) == (["A", "B"], False)
    lineage.write_text(json.dumps({"settings_sha256": "abc", "datasets": ["A", "B", "GONE"]}))
    assert frozen_membership(str(lineage), "abc", ["A", "B", "NEW"]) == (["A", "B"], True)
    assert frozen_membership(str(lineage), "changed", ["A", "B", "NEW"]) == (["A", "B", "NEW"], False)


def test_pooled_pieces_give_exactly_their_windows_and_none_across_two(tmp_path):
    from rnnfleet.data import PreparedArrays, save_arrays, split_points
    from rnnfleet.pretraining import FleetRows, Piece, fleet_arrays, read_head
    from rnnfleet.training import usable_windows

    seq_len, rows = 8, 300
    split = split_points(rows, seq_len, 1, 0.15, 0.15)
    paths = []
    for number in range(2):
        path = tmp_path / f"d{number}.npz"
        # Feature value = dataset number * 1000 + row: a window's rows say where it came from.
        features = (number * 1000 + np.arange(rows, dtype=np.float32))[:, None].repeat(2, axis=1)
        save_arrays(
            PreparedArrays(
                features=features,
                targets=np.zeros(rows, np.float32),
                feature_mean=np.zeros(2, np.float32),
                feature_std=np.ones(2, np.float32),
                target_std=1.0,
                train_end=split.train_end,
                val_start=split.val_start,
                val_end=split.val_end,
                test_start=split.test_start,
                last_close=1.0,
                horizon=1,
                feature_names=("a", "b"),
                row_times=np.arange(rows, dtype=np.int64),
                raw_features=features.astype(np.float64),  # what the file holds: mean 0, std 1
                raw_targets=np.zeros(rows),
            ),
            path,
        )
        paths.append(str(path))
    train, val = FleetRows([], [], []), FleetRows([], [], [])
    pieces = [(Piece(20, 69), Piece(100, 119)), (Piece(7, 56), Piece(150, 159))]
    for path, (train_piece, val_piece) in zip(paths, pieces, strict=True):
        head = read_head(path)
        train.add(path, head, train_piece, seq_len)
        val.add(path, head, val_piece, seq_len)
    pooled = fleet_arrays(train, val, read_head(paths[0]))
    numbers = usable_windows(pooled, seq_len)
    assert len(numbers.train) == 50 + 50 and len(numbers.val) == 20 + 10 and not len(numbers.test)
    for number in np.concatenate([numbers.train, numbers.val]):
        window = pooled.features[number : number + seq_len, 0]
        assert np.all(np.diff(window) == 1), window  # consecutive rows of one dataset
    ends = pooled.features[numbers.train + seq_len - 1, 0]
    assert sorted(ends.tolist()) == [*range(20, 70), *range(1007, 1057)]
