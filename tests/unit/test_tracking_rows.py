"""What the MLflow hook (rnnfleet.workflow.tracking) makes of the summary table's rows, in this
process: numbers as metrics, words as parameters, a failed dataset's empty cells as neither.
The real MLflow through the real snakemake: tests/workflow/test_tracking.py."""

from __future__ import annotations

import json
import math

from rnnfleet.report.summary import metrics_row
from rnnfleet.scores.start_verdicts import FLEET_START_BETTER, FLEET_START_WORSE
from rnnfleet.workflow.tracking import dataset_metrics, dataset_words, fleet_metrics, loss_histories, pretrained_facts


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


def test_the_fleet_starts_columns_are_logged_and_the_pretrained_digest_is_a_word(tmp_path):
    """train.init fleet: a row's start and verdict, and the digest of the pretrained file its
    full fit was given (read from its lineage), as the other columns are; the fleet's run
    counts the starts and verdicts and gets the pretrained model's digest, cutoff and scores."""
    digest = "1234e5" + "0" * 58  # hex that reads as a number: still a word
    metrics_file = tmp_path / "A_1m.json"
    metrics_file.write_text(
        json.dumps(
            {
                "dataset": "A_1m",
                "init": "fleet",
                "init_note": f"from the fleet's pretrained model (sha256 {digest[:12]})",
                "init_fleet_test_skill": 0.03,
                "init_scratch_test_skill": 0.01,
                "init_seeds_pvalue": 0.01,
                "lineage": {"init": {"from": "fleet", "pretrained_sha256": digest}},
            }
        )
    )
    fleet_start = metrics_row(metrics_file) | {"init_verdict": FLEET_START_BETTER, "init_qvalue": 0.02}
    assert fleet_start["init_pretrained_sha256"] == digest
    words, numbers = dataset_words(fleet_start), dataset_metrics(fleet_start)
    assert words["init"] == "fleet" and words["init_pretrained_sha256"] == digest
    assert words["init_verdict"] == FLEET_START_BETTER and "init_pretrained_sha256" not in numbers
    assert (
        numbers["init_fleet_test_skill"] == 0.03
        and numbers["init_seeds_pvalue"] == 0.01
        and numbers["init_qvalue"] == 0.02
    )
    scratch = {
        "dataset": "B_1m",
        "status": "ok",
        "init": "scratch",
        "init_verdict": FLEET_START_WORSE,
        "init_fleet_test_skill": 0.01,
        "init_scratch_test_skill": 0.02,
    }
    fleet = fleet_metrics([fleet_start, scratch], {"A_1m", "B_1m"})
    assert (fleet["init_fleet"], fleet["init_scratch"], fleet["init_compared"]) == (1, 1, 2)
    assert (fleet["init_better_after_fleet_correction"], fleet["init_worse_after_fleet_correction"]) == (1, 1)
    # the fleet's own verdict, a sign test across the datasets compared
    assert (fleet["init_start_better"], fleet["init_start_worse"], fleet["init_start_sign_pvalue"]) == (1, 1, 1.0)
    assert abs(fleet["init_start_mean_difference"] - 0.005) < 1e-12
    assert "init_fleet" not in fleet_metrics([{"dataset": "C_1m", "status": "ok"}], set())  # no train.init fleet

    lineage = tmp_path / "pretrained.json"
    lineage.write_text(
        json.dumps(
            {
                "sha256": digest,
                "cutoff": "2024-01-01 04:40:00 UTC",
                "datasets": ["A_1m", "B_1m"],
                "trained_on": ["A_1m"],
                "left_out": {"B_1m": "too few bars before the cutoff"},
                "scores": {"skill": 0.04, "best_epoch": 3, "val_loss": float("nan")},
            }
        )
    )
    params, numbers = pretrained_facts(str(lineage))
    assert params == {
        "pretrained.sha256": digest,
        "pretrained.cutoff": "2024-01-01 04:40:00 UTC",
        "pretrained.left_out": '["B_1m"]',
    }
    assert numbers == {
        "pretrained_datasets": 2,
        "pretrained_trained_on": 1,
        "pretrained_left_out": 1,
        "pretrained_skill": 0.04,
        "pretrained_best_epoch": 3,
    }
    assert pretrained_facts(str(tmp_path / "none.json")) == ({}, {})
