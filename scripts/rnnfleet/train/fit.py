"""The decisions of a train job, top to bottom: which fit (an update of the previous model or
a full fit), the walk-forward folds, the scored model and its test-period scores, the refit
for production, the metrics and the model file's contents. Each fit is the loop
(rnnfleet.train.loop) then its evaluation (rnnfleet.train.evaluate); the model file's
contents are rnnfleet.train.modelfile's.

What it promises: fit_dataset() takes the dataset's arrays, the previous model file's
contents (or why there is none) and complete settings (the schema's defaults filled in, as
the workflow's config is) and returns the model file's contents, the metrics, the model
they hold and the lines that end the job's log. It makes no forecast: the forecast at the
last bar is the caller's to ask rnnfleet.forecast.predict for, after the fit (rnnfleet.runner.jobs).
It claims no device and takes no lock, and reads and writes no file but the walk-forward
folds' (`evaluate.folds`: each finished fold saved under .snakemake/rnnfleet-folds and read
back by a retried job, rnnfleet.train.walkforward): rnnfleet.runner.jobs does the rest
around it. Progress goes to the job's log as it happens.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from rnnfleet.errors import log
from rnnfleet.plugins import DEFAULT_BUILDER
from rnnfleet.prep.arrays import PreparedArrays
from rnnfleet.prep.targets import TARGETS
from rnnfleet.train.evaluate import Fit, Scoring, train_and_evaluate
from rnnfleet.train.loop import (
    LoopSettings,
    StartState,
    all_rows_train,
    objective_key,
    objective_text,
    refit_on_all_rows,
    usable_windows,
)
from rnnfleet.train.modelfile import build_checkpoint, calibration_record, plugin_hashes
from rnnfleet.train.updating import (
    FULL,
    UPDATE,
    Plan,
    fit_record,
    made_label,
    next_lineage,
    plan_training,
    settings_sha256,
    skill_drop,
    training_fingerprint,
    update_from_row,
    update_windows,
    with_normalisation,
)
from rnnfleet.train.walkforward import folds_metrics, walk_forward

if TYPE_CHECKING:
    from torch import nn

    from rnnfleet.train.fleet_start import FleetStart


# train.finetune_lr null: a fit from the fleet's start learns at this share of train.lr (docs/model.md:
# at train.lr, fine-tunes of the real fleet's short histories lost most of what the start gained).
FINETUNE_LR_SHARE = 5
# A fit from the fleet's start whose best epoch is 0: validation kept the weights it started from.
KEPT_AS_IS = "best epoch 0: the pretrained weights kept unchanged"


@dataclass(frozen=True)
class Settings:
    """One dataset's training settings, each section complete (the schema's defaults filled
    in), built once at the job's start; what a fit reads of them typed there once (loop,
    finetune_lr, compare_init, scoring). The dicts stay as given: the model file and the
    fingerprints record them."""

    model: dict
    train: dict
    evaluate: dict
    update: dict
    columns: dict | None = None
    loop: LoopSettings = field(init=False)  # the loop's settings (train.seq_len, lr, epochs, ...)
    finetune_lr: float | None = field(init=False)  # a fit from the fleet's weights; None: train.lr / FINETUNE_LR_SHARE
    compare_init: bool = field(init=False)
    compare_init_seeds: int = field(init=False)  # fits per start of a comparison
    scoring: Scoring = field(
        init=False
    )  # the test period's scoring (evaluate.cost_bps, block_bars, bootstrap; train.seed)

    def __post_init__(self) -> None:
        finetune_lr = self.train.get("finetune_lr")
        object.__setattr__(self, "loop", LoopSettings.of(self.train))
        object.__setattr__(self, "finetune_lr", float(finetune_lr) if finetune_lr is not None else None)
        object.__setattr__(self, "compare_init", bool(self.train.get("compare_init")))
        object.__setattr__(self, "compare_init_seeds", int(self.train.get("compare_init_seeds") or 1))
        object.__setattr__(self, "scoring", Scoring.of(self.evaluate, self.train["seed"]))


@dataclass(frozen=True)
class Fitted:
    checkpoint: dict  # the model file's contents
    metrics: dict  # the metrics JSON (the checkpoint holds the same dict)
    test_scores: dict  # the scored model's test-period scores ({}: no test period)
    folds: int  # walk-forward folds run
    refitted: bool  # the checkpoint holds the refit on all rows, not the scored model
    model: nn.Module  # the model the checkpoint holds, on the device it trained on

    def add_metrics(self, entries: dict) -> None:
        """Entries made after the fit (the forecast at the last bar) added to the metrics,
        which the model file holds too (the same dict)."""
        self.metrics.update(entries)

    def summary(self, model_path: str) -> list[str]:
        """The lines that end the job's log once the files are written: the test period's
        verdict, the folds' summary and the best epoch's line (the log's last)."""
        metrics, test_scores, dataset = self.metrics, self.test_scores, self.metrics["dataset"]
        lines = []
        if test_scores:
            lines.append(
                f"{dataset}: test period ({test_scores['test_windows']} windows): test skill "
                f"{test_scores['test_skill']:+.4f}, 95% interval [{test_scores['test_skill_low']:+.4f}, "
                f"{test_scores['test_skill_high']:+.4f}]: {test_scores['test_verdict']}"
            )
        notes = [
            (entry["horizon"], entry["interval_note"])
            for entry in test_scores.get("horizons", [])
            if "interval_note" in entry
        ]
        if "interval_note" in test_scores and not notes:
            notes = [(None, test_scores["interval_note"])]
        for horizon, note in notes:
            at = f" at horizon {horizon}" if horizon is not None else ""
            lines.append(f"{dataset}: no forecast interval{at}: {note}")
        if self.folds:
            sd = metrics["folds_skill_sd"]
            lines.append(
                f"{dataset}: walk-forward over {self.folds} fold(s): test skill mean {metrics['folds_skill_mean']:+.4f}"
                + (f", sd {sd:.4f}" if sd is not None else "")
                + f"; {metrics['folds_positive']} above 0, {metrics['folds_beat']} beat the baseline"
            )
        lines.append(
            f"{dataset}: best epoch {metrics['best_epoch']} of {metrics['epochs_run']}, val_loss "
            f"{metrics['val_loss']:.5f} vs naive ({metrics['baseline']}) {metrics['naive_val_loss']:.5f} "
            f"(skill {metrics['skill']:+.4f}) -> {model_path}"
            + (" (re-fitted on all rows: evaluate.production refit)" if self.refitted else "")
            + (f" ({metrics['made']} since the full fit)" if metrics["made"] != "full" else "")
        )
        return lines


def fit_dataset(
    dataset: str,
    arrays: PreparedArrays,
    previous: tuple[dict | None, str | None],
    settings: Settings,
    device,
    job_facts: dict,
    fleet: FleetStart | None = None,
) -> Fitted:
    """See the module doc. previous: (the previous model file's contents, None) or (None,
    why there is none to update). job_facts: what the runner knows of the job (device, amp,
    threads, process, timings), recorded in the metrics. fleet (train.init fleet): the
    fleet's pretrained model; a full fit (and its refit) starts from its weights where it
    allows (rnnfleet.train.fleet_start.fleet_start), with a fresh optimizer at train.finetune_lr;
    the walk-forward folds train from scratch (the pretraining may have seen their test bars)."""
    model_hparams, train_hparams, evaluate, seq_len = (
        settings.model,
        settings.train,
        settings.evaluate,
        settings.loop.seq_len,
    )
    fingerprint = training_fingerprint(
        arrays, model_hparams, train_hparams, settings.columns, evaluate, plugin_hashes(arrays, model_hparams)
    )
    full_start, full_loop = None, settings.loop
    if fleet is not None:  # another pretrained model: another fit, not an update of this one
        fingerprint = settings_sha256({"fit": fingerprint, "pretrained": fleet.sha256})
        if fleet.weights is not None:
            full_start = StartState(fleet.weights, None, 0)
            full_loop = replace(settings.loop, lr=settings.finetune_lr or settings.loop.lr / FINETUNE_LR_SHARE)
    fit_plan = plan_training(*previous, arrays, fingerprint, settings.update, evaluate)
    log(f"{dataset}: {fit_plan.label}")

    def train_and_score(part: PreparedArrays, loop: LoopSettings = settings.loop, start=None) -> Fit:
        return train_and_evaluate(part, model_hparams, loop, device, start, settings.scoring)

    folds, fold_entries = walk_forward(
        dataset, arrays, seq_len, model_hparams, train_hparams, evaluate, train_and_score, log
    )
    update_metrics = {}
    if fit_plan.kind == UPDATE:
        fit_plan, update_metrics, updated = update_model(dataset, fit_plan, arrays, settings, train_and_score)
        if updated:
            arrays, scored = updated
    comparison = {}
    if fit_plan.kind == FULL:
        if fleet is not None:
            log(f"{dataset}: trains {fleet.note}")
        scored = train_and_score(arrays, full_loop, full_start)
        if full_start is not None and settings.compare_init:
            scored, full_loop, comparison = compare_init(
                dataset, arrays, scored, full_loop, full_start, settings, train_and_score
            )
        if full_start is not None and scored.trained.best_epoch == 0:
            log(f"{dataset}: {KEPT_AS_IS}")

    trained, test_scores = scored.trained, scored.evaluated.test_scores
    metrics = scored_metrics(dataset, arrays, scored, model_hparams, seq_len) | job_facts | comparison
    if folds:
        metrics |= folds_metrics(folds, fold_entries, scored)
    metrics["product"] = evaluate["production"]
    metrics |= update_metrics
    made = "full" if fit_plan.kind == FULL else "update"
    record = fit_record(made, arrays, metrics, trained.train_seconds, update_metrics.get("new_rows", 0))
    lineage = next_lineage(fit_plan, arrays, fingerprint, record)
    if fit_plan.kind == FULL and fleet is not None:
        lineage["init"] = {
            "from": "scratch" if full_start is None else "fleet",
            "note": fleet.note
            + (f"; {KEPT_AS_IS}" if full_start is not None and scored.trained.best_epoch == 0 else ""),
            "pretrained": fleet.path,
            "pretrained_sha256": fleet.sha256,
            "pretraining": fleet.coverage,
        }
    if "init" in lineage:  # an update keeps its full fit's
        start = lineage["init"]
        metrics |= {"init": start["from"], "init_note": start["note"], "init_pretraining": start.get("pretraining", "")}
    metrics |= {"made": made_label(lineage), "made_reason": fit_plan.label, "lineage": lineage}

    product = trained
    if evaluate["production"] == "refit":
        log(f"{dataset}: refit for production: {trained.best_epoch} epoch(s) (the scored model's best) on all rows")
        loop, start = (full_loop, full_start) if fit_plan.kind == FULL else (settings.loop, None)
        product = refit_on_all_rows(arrays, model_hparams, loop, device, trained.best_epoch, start)
        metrics |= {"refit_epochs": product.epochs_run, "refit_seconds": product.train_seconds}
        metrics["refit_train_windows"] = len(usable_windows(all_rows_train(arrays), seq_len).train)
    checkpoint = build_checkpoint(
        dataset,
        product,
        arrays,
        model_hparams,
        train_hparams,
        metrics,
        settings.columns,
        product=evaluate["production"],
        lineage=lineage,
    )
    checkpoint["calibration"] = calibration_record(scored.evaluated)  # the forecasts' intervals
    return Fitted(checkpoint, metrics, test_scores, len(folds or []), product is not trained, product.model)


def compare_init(
    dataset: str,
    arrays: PreparedArrays,
    fleet_fit: Fit,
    fleet_loop: LoopSettings,
    fleet_start: StartState,
    settings: Settings,
    train_and_score,
) -> tuple[Fit, LoopSettings, dict]:
    """train.compare_init: the same fit from scratch (and with train.compare_init_seeds, each
    start's fits at the next seeds), compared with the fit from the fleet's start
    (rnnfleet.train.start_comparison.compare_starts): (the fit from the fleet's start kept,
    the loop settings it trained with, the comparison's metrics)."""
    from rnnfleet.train.start_comparison import compare_starts

    seeds = settings.compare_init_seeds
    log(f"{dataset}: train.compare_init: the same fit from scratch, to compare ({seeds} seed(s) each)")
    fleet_loops = [replace(fleet_loop, seed=fleet_loop.seed + number) for number in range(seeds)]
    scratch_loops = [replace(settings.loop, seed=settings.loop.seed + number) for number in range(seeds)]
    fleet_fits = [fleet_fit] + [train_and_score(arrays, loop, fleet_start) for loop in fleet_loops[1:]]
    scratch_fits = [train_and_score(arrays, loop) for loop in scratch_loops]
    kept, metrics = compare_starts(
        arrays, fleet_fits, scratch_fits, fleet_start.weights, settings.model, settings.loop.seq_len
    )
    log(
        f"{dataset}: validation loss from the fleet's start {metrics['init_fleet_val_loss']:.5f}, from scratch "
        f"{metrics['init_scratch_val_loss']:.5f}; keeps the fit from the fleet's start"
        + (f" (seed {kept + settings.loop.seed}, its lowest validation loss)" if seeds > 1 else "")
        + ", as train.init asks: the fleet's verdict across datasets says whether that helps"
    )
    return fleet_fits[kept], fleet_loops[kept], metrics


def scored_metrics(dataset: str, arrays: PreparedArrays, scored: Fit, model_hparams: dict, seq_len: int) -> dict:
    """The scored model's metrics: validation and test scores, what it is, how it trained.
    val_loss, naive_val_loss and skill measure what test_loss, naive_test_loss and test_skill
    do (the first horizon's point forecast, in `loss`); with heads, the training loss that
    early stopping compared is val_<objective key> (val_pinball, val_mean_loss) beside them,
    named by `early_stopping` and described by `objective`."""
    windows = usable_windows(arrays, seq_len)
    trained, evaluated = scored
    key = objective_key(trained.heads)
    metrics = {
        "dataset": dataset,
        "val_loss": evaluated.val_loss,
        "naive_val_loss": evaluated.naive_val_loss,
        "skill": evaluated.skill,
        **(
            {f"val_{key}": trained.val_objective, f"naive_val_{key}": evaluated.naive_val_objective}
            if key != "loss"
            else {}
        ),
        **evaluated.test_scores,
        **describe_training(arrays, model_hparams),
        "early_stopping": f"val_{key}",
        "objective": objective_text(trained.heads, TARGETS[arrays.target]),
        "best_epoch": trained.best_epoch,
        "epochs_run": trained.epochs_run,
        "train_seconds": trained.train_seconds,
        "rows": arrays.rows,
        **arrays.quality,  # the data-quality flags (rnnfleet.bars.quality)
        "train_windows": len(windows.train),
        "val_windows": len(windows.val),
        "setup_seconds": trained.setup_seconds,
        "history": trained.history,
    }
    if evaluated.val_accuracy is not None:
        metrics |= {"val_accuracy": evaluated.val_accuracy, "naive_val_accuracy": evaluated.naive_val_accuracy}
    return metrics


def model_label(model_hparams: dict) -> str:
    """The model in a few words, for the summary table: e.g. 'lstm 2x64' or 'my/file.py:build'."""
    builder = model_hparams.get("builder", DEFAULT_BUILDER)
    if builder != DEFAULT_BUILDER:
        return str(builder)
    return f"{model_hparams['cell']} {model_hparams['num_layers']}x{model_hparams['hidden_size']}"


def describe_training(arrays: PreparedArrays, model_hparams: dict) -> dict:
    """Which model, features and target a dataset used, what its skill is measured against,
    and the zone its times were read in."""
    target = TARGETS[arrays.target]
    return {
        "model": model_label(model_hparams),
        "features": " + ".join(arrays.feature_definition)
        + (f" ({', '.join(arrays.features_left_out)} left out: no volume)" if arrays.features_left_out else ""),
        "target": f"{arrays.target} over {', '.join(map(str, arrays.all_horizons))} bar(s)",
        "baseline": target.baseline,
        "loss": target.loss_name,
        "timezone": arrays.timezone,
    }


def update_model(dataset: str, plan: Plan, arrays: PreparedArrays, settings: Settings, train_and_score):
    """The training of an UPDATE plan (rnnfleet.train.updating): (the plan, the update's metrics,
    (the arrays it trained on, its Fit)). Where no training window
    ends after update_from_row, or the update's skill falls more than update.max_skill_drop
    below its full fit's, the plan returned is FULL and the last item None."""
    previous, update = plan.previous, settings.update
    if not update["refit_normalisation"]:
        arrays = with_normalisation(arrays, previous["normalisation"])
    from_row = update_from_row(previous, update["recent_bars"])
    train_windows = len(update_windows(arrays, settings.loop.seq_len, from_row))
    if not train_windows:
        plan = Plan(FULL, f"no training window ends after row {from_row} (update.recent_bars)")
        log(f"{dataset}: {plan.label}")
        return plan, {}, None
    log(
        f"{dataset}: update {previous['lineage']['updates'] + 1}: from the previous model's weights and "
        f"optimizer state, {train_windows} training window(s) ending at or after row {from_row}, "
        f"at most {update['epochs']} epoch(s)"
    )
    loop = replace(settings.loop, epochs=int(update["epochs"]), lr=float(update["lr"] or settings.loop.lr))
    start = StartState(previous["state_dict"], previous["optimizer_state"], from_row)
    fit = train_and_score(arrays, loop, start)
    trained, evaluated = fit
    update_metrics = {
        "new_rows": arrays.rows - int(previous["lineage"]["rows"]),
        f"update_start_val_{objective_key(trained.heads)}": trained.start_val_loss,
        "update_train_windows": train_windows,
        "update_seconds": trained.train_seconds,
    }
    dropped = skill_drop(
        {"skill": evaluated.skill, **evaluated.test_scores}, previous["lineage"]["full_fit"], update["max_skill_drop"]
    )
    if dropped:
        plan = Plan(FULL, dropped)
        log(f"{dataset}: {plan.label}")
        return plan, {"discarded_update": update_metrics}, None
    return plan, update_metrics, (arrays, fit)
