"""train.compare_init: one dataset's fit from the fleet's start against its fit from
scratch, on the same test windows (rnnfleet.scores.start_verdicts gives the fleet's verdicts)."""

from __future__ import annotations

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


def compare_starts(arrays, fleet_fit, scratch_fit, weights: dict, model_hparams: dict, seq_len: int, block_bars: int):
    """(which fit validation prefers, "fleet" or "scratch", and the comparison's metrics) of
    two fits of one dataset, each a rnnfleet.train.evaluate.Fit. The choice reads the
    validation losses only; the test windows (the same for both) give the paired difference."""
    from dataclasses import replace

    from rnnfleet.scores.test_period import bootstrap_block, diebold_mariano, skill

    fleet_result, scratch_result = fleet_fit.evaluated, scratch_fit.evaluated
    fleet_val, scratch_val = early_stopping_loss(fleet_fit), early_stopping_loss(scratch_fit)
    kept = "fleet" if fleet_val <= scratch_val else "scratch"
    metrics = {
        "init_fleet_val_loss": fleet_val,
        "init_scratch_val_loss": scratch_val,
        "init_fleet_epochs": fleet_fit.trained.epochs_run,
        "init_scratch_epochs": scratch_fit.trained.epochs_run,
        "init_fleet_seconds": fleet_fit.trained.train_seconds,
        "init_scratch_seconds": scratch_fit.trained.train_seconds,
    }
    if not len(fleet_result.test_numbers):
        return kept, metrics
    fleet_losses, naive_losses = first_horizon_losses(arrays, fleet_result, seq_len)
    scratch_losses, _ = first_horizon_losses(arrays, scratch_result, seq_len)
    one_for_all = replace(
        fleet_result, test_outputs=pretrained_outputs(weights, arrays, model_hparams, fleet_result, seq_len)
    )
    pretrained_losses, _ = first_horizon_losses(arrays, one_for_all, seq_len)
    statistic, p_value = diebold_mariano(fleet_losses, scratch_losses, bootstrap_block(block_bars, len(fleet_losses)))
    return kept, metrics | {
        "init_fleet_test_skill": skill(fleet_losses, naive_losses),
        "init_scratch_test_skill": skill(scratch_losses, naive_losses),
        "init_pretrained_test_skill": skill(pretrained_losses, naive_losses),
        "init_dm_stat": statistic,
        "init_dm_pvalue": p_value,
    }
