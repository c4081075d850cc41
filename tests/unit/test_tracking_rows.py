"""What the MLflow hook (rnnfleet.hooks.tracking) makes of the summary table's rows, in this
process: numbers as metrics, words as parameters, a failed dataset's empty cells as neither.
The real MLflow through the real snakemake: tests/workflow/test_tracking.py."""

from __future__ import annotations

import math

from rnnfleet.hooks.tracking import dataset_metrics, dataset_words, fleet_metrics


def test_a_failed_datasets_empty_cells_count_as_no_score_and_no_nan_metric():
    good = {"dataset": "A_1m", "status": "ok", "made": "full", "test_skill": "0.02", "test_verdict": "beats"}
    failed = {"dataset": "B_1m", "status": "failed", "made": "", "test_skill": "", "test_verdict": "", "rows": "nan"}
    fleet = fleet_metrics([good, failed], {"A_1m"})
    assert fleet["scored"] == 1 and fleet["test_skill_mean"] == 0.02 and fleet["not_done"] == 1
    assert all(math.isfinite(value) for value in fleet.values())
    assert dataset_metrics(failed) == {} and dataset_words(failed) == {"status": "failed"}
    assert dataset_metrics(good) == {"test_skill": 0.02}
    assert dataset_words(good) == {"status": "ok", "made": "full", "test_verdict": "beats"}
