"""What the MLflow hook (rnnfleet.workflow.tracking) makes of the summary table's rows, in this
process: numbers as metrics, words as parameters, a failed dataset's empty cells as neither.
The real MLflow through the real snakemake: tests/workflow/test_tracking.py."""

from __future__ import annotations

import json
import math

from rnnfleet.workflow.tracking import dataset_metrics, dataset_words, fleet_metrics, loss_histories


def test_a_failed_datasets_empty_cells_count_as_no_score_and_no_nan_metric():
    good = {"dataset": "A_1m", "status": "ok", "made": "full", "test_skill": "0.02", "test_verdict": "beats"}
    failed = {"dataset": "B_1m", "status": "failed", "made": "", "test_skill": "", "test_verdict": "", "rows": "nan"}
    fleet = fleet_metrics([good, failed], {"A_1m"})
    assert fleet["scored"] == 1 and fleet["test_skill_mean"] == 0.02 and fleet["not_done"] == 1
    assert all(math.isfinite(value) for value in fleet.values())
    assert dataset_metrics(failed) == {} and dataset_words(failed) == {"status": "failed"}
    assert dataset_metrics(good) == {"test_skill": 0.02}
    assert dataset_words(good) == {"status": "ok", "made": "full", "test_verdict": "beats"}


def test_a_quantile_models_loss_curves_are_named_after_its_pinball_loss(tmp_path):
    """The per-epoch history names the training loss (rnnfleet.train.loop.objective_key): a
    model of quantiles has no val_loss curve, its pinball loss is epoch_*_pinball."""
    history = [{"epoch": e, "train_pinball": 0.5 / e, "val_pinball": 0.25 + e / 4, "seconds": 1.0} for e in (1, 2)]
    path = tmp_path / "Q.json"
    path.write_text(json.dumps({"history": history}))
    assert loss_histories(str(path)) == {
        "epoch_train_pinball": [(1, 0.5), (2, 0.25)],
        "epoch_val_pinball": [(1, 0.5), (2, 0.75)],
    }
