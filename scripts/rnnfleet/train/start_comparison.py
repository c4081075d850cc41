"""train.compare_init: one dataset's fit from the fleet's start against its fit from
scratch, on the same test windows (rnnfleet.scores.start_verdicts gives the fleet's verdicts)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np


def first_horizon_losses(arrays, result, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(the model's, the naive baseline's) loss on each test window, of the first horizon's
    point forecast; result: a fit's evaluation (rnnfleet.train.evaluate.Evaluated)."""
    from rnnfleet.prep.targets import TARGETS
    from rnnfleet.scores.test_period import window_losses
    from rnnfleet.train.evaluate import horizon_arrays, horizon_outputs

    if result.heads.single:
        numbers, point, naive, own = result.test_numbers, result.test_outputs, float(result.naive_output), arrays
    else:
        outputs = horizon_outputs(result, 0)
        numbers, point, naive, own = outputs.numbers, outputs.point, outputs.naive, horizon_arrays(arrays, 0)
    actual = own.targets[numbers + (seq_len - 1)]
    classification = TARGETS[arrays.target].classification
    return (
        window_losses(point, actual, classification),
        window_losses(np.full(len(actual), naive), actual, classification),
    )


def pretrained_outputs(weights: dict, arrays, model_hparams: dict, result, seq_len: int) -> np.ndarray:
    """The pretrained model's own outputs on the result's test windows (no training)."""
    import torch

    from rnnfleet.heads import with_outputs
    from rnnfleet.train.loop import window_outputs, window_view
    from rnnfleet.train.models import build_model

    model = build_model(with_outputs(model_hparams, result.heads), arrays.features.shape[1], seq_len)
    model.load_state_dict(weights)
    windows = window_view(torch.from_numpy(arrays.features), seq_len)
    return window_outputs(model, windows, None, torch.from_numpy(result.test_numbers), result.heads)


def early_stopping_loss(fit) -> float:
    """The validation loss the fit's early stopping compared (the training objective's, with heads)."""
    objective = fit.trained.val_objective
    return fit.evaluated.val_loss if objective != objective else objective


def compare_starts(
    arrays, fleet_fits: list, scratch_fits: list, weights: dict, model_hparams: dict, seq_len: int
) -> tuple[int, dict]:
    """(the number of the fit kept, the comparison's metrics) of one dataset's fits from the
    fleet's start and from scratch (each a rnnfleet.train.evaluate.Fit, one per seed, the
    first at train.seed). The kept fit is one
    from the fleet's start, as train.init asks: of its seeds, the one with the lowest
    validation loss. A choice between the starts by one dataset's short validation part is
    noise (docs/model.md: on a real fleet it kept scratch where the start scored higher on the
    test periods); the fleet's verdict across datasets is the evidence for train.init. The
    test windows (the same for all) give each fit's test skill; the starts' means and, with
    two seeds or more each, the permutation test across seeds
    (rnnfleet.scores.start_verdicts.seeds_p_value)."""
    from rnnfleet.scores.start_verdicts import seeds_p_value
    from rnnfleet.scores.test_period import skill

    kept_number = min(range(len(fleet_fits)), key=lambda number: early_stopping_loss(fleet_fits[number]))
    first_fleet, first_scratch = fleet_fits[0], scratch_fits[0]
    metrics = {
        "init_fleet_val_loss": early_stopping_loss(first_fleet),
        "init_scratch_val_loss": early_stopping_loss(first_scratch),
        "init_fleet_best_epoch": first_fleet.trained.best_epoch,
        "init_fleet_epochs": first_fleet.trained.epochs_run,
        "init_scratch_epochs": first_scratch.trained.epochs_run,
        "init_fleet_seconds": sum(fit.trained.train_seconds for fit in fleet_fits),
        "init_scratch_seconds": sum(fit.trained.train_seconds for fit in scratch_fits),
        "init_seeds": len(fleet_fits),
    }
    if not len(first_fleet.evaluated.test_numbers):
        return kept_number, metrics

    def test_skills(start_fits: list) -> list[float]:
        return [skill(*first_horizon_losses(arrays, fit.evaluated, seq_len)) for fit in start_fits]

    fleet_skills, scratch_skills = test_skills(fleet_fits), test_skills(scratch_fits)
    one_for_all = replace(
        first_fleet.evaluated,
        test_outputs=pretrained_outputs(weights, arrays, model_hparams, first_fleet.evaluated, seq_len),
    )
    metrics |= {
        "init_fleet_test_skill": float(np.mean(fleet_skills)),
        "init_scratch_test_skill": float(np.mean(scratch_skills)),
        "init_pretrained_test_skill": skill(*first_horizon_losses(arrays, one_for_all, seq_len)),
    }
    if len(fleet_fits) >= 2:
        metrics["init_seeds_pvalue"] = seeds_p_value(fleet_skills, scratch_skills)
    return kept_number, metrics
