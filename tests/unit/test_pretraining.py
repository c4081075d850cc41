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
