"""Every layout through the real snakemake (one run, tests/layouts.py): identical arrays,
each odd case failing alone naming its problem, and a layout or gap setting change
re-preprocessing.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import pending_jobs, snakemake
from layouts import ODD_CASES, preprocess_log

from rnnfleet.prep.arrays_file import load_arrays


def test_every_layout_gives_identical_arrays_through_snakemake(every_layout, layouts_run):
    workdir, _ = layouts_run
    expected = every_layout[1]
    reference = load_arrays(workdir / "prep" / "COMMA_1m.npz")
    for dataset, read_as in expected.items():
        arrays = load_arrays(workdir / "prep" / f"{dataset}.npz")
        for field in ("features", "targets", "feature_mean", "feature_std", "gap_bars"):
            np.testing.assert_array_equal(getattr(arrays, field), getattr(reference, field), err_msg=dataset)
        assert (arrays.split, arrays.target_std) == (reference.split, reference.target_std)
        read_lines = [line for line in preprocess_log(workdir, dataset).splitlines() if ": read as " in line]
        assert len(read_lines) == 1 and read_as in read_lines[0], (dataset, read_lines)
    assert "epoch timestamps switch unit (ms and us; first at data row 201)" in preprocess_log(workdir, "MIXED_1m")


@pytest.mark.parametrize("dataset", sorted(ODD_CASES))
def test_a_31_bar_day_short_pieces_and_a_zero_price_fail_alone_naming_the_problem(layouts_run, dataset):
    workdir, result = layouts_run
    error_lines = [line for line in preprocess_log(workdir, dataset).splitlines() if line.startswith("ERROR")]
    assert len(error_lines) == 1 and ODD_CASES[dataset] in error_lines[0], error_lines
    assert not (workdir / "prep" / f"{dataset}.npz").exists()
    assert (workdir / "models" / "COMMA_1m.pt").exists() and result.returncode != 0


@pytest.mark.parametrize("change", ['format={"timezone": "Europe/Berlin"}', 'preprocess={"max_gap": "1h"}'])
def test_a_format_or_gap_setting_change_re_preprocesses(layouts_run, change):
    workdir, _ = layouts_run
    result = snakemake(workdir, "-n", "prep/COMMA_1m.npz", "--config", change)
    assert "Params have changed" in pending_jobs(result.stdout, "preprocess")["COMMA_1m"]
