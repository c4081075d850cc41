"""The search: one worker's loop over the shared study, and a trial's score.

What it promises:
- A trial's value is the mean, over the sample's datasets, of the validation loss of a fit
  with the trial's settings relative to that dataset's naive baseline (val_loss /
  naive_val_loss: below 1 beats the baseline). The fit is a train job's (the loop, then
  the evaluation) on the arrays cut at their validation end (validation_only): the test
  period's rows are dropped before anything trains or is scored, so no value of the search
  depends on them.
- Several workers share one study through an Optuna journal file (open_study). Each asks,
  evaluates and tells one trial at a time until the budget is spent: `trials` trials that
  finished (COMPLETE or PRUNED) across all workers and runs, counting those running now, or
  `minutes` of this worker's wall time. A trial whose number comes after the budget was
  taken by others is told FAIL at once (so the budget is never overshot) and marked so.
- A worker that dies leaves at most its running trial RUNNING; the next worker of the same
  number (and worker 0 for numbers no longer used) tells it FAIL before it starts
  (fail_abandoned_trials): a failed trial never counts.
- A trial trains its sample's datasets in turns, an epoch each (validation_ratios): each fit
  is the one it would be alone, and after every round the trial reports the mean of their
  best validation losses so far relative to the baselines'. Pruning is Optuna's
  SuccessiveHalvingPruner on that mean, at epochs 1, 3, 9, ...: a trial not among the best
  third of the trials that have reached that epoch so far (the best, while fewer than three
  have) stops there, on every dataset at once.
- The sampler is TPE seeded from tune.seed, the worker's number and the trials already
  finished, so workers and resumed runs do not repeat each other's first draws.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import optuna

from rnnfleet.errors import UserError
from rnnfleet.prep.arrays import PreparedArrays
from rnnfleet.tune.space import fit_settings

if TYPE_CHECKING:  # torch and the train path load in the workers only, not in the report job
    import torch

    from rnnfleet.train.loop import EpochEnd, Parts, Trained

WORKER_ATTR = "worker"
SKIPPED_ATTR = "failed"  # why a trial was told FAIL (none: its worker stopped before it ended)
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
# A worker stops after this many failed trials in a row: settings that fail every fit
# should stop the search, not spend its budget.
FAILURES_IN_A_ROW = 3
# Successive halving: most of a search's time goes to trials that do not win, so each goes on
# past epoch 1 only among the best third of the trials there so far, and past epoch 3 only
# among the best third there. The risk, a slow starter pruned that would have won, is
# measured on a fleet where a too-high learning rate starts fast (bench/bench_tune.py).
PRUNER_GROWTH = 3


@dataclass(frozen=True)
class Budget:
    trials: int  # finished trials across all workers and runs
    minutes: float | None  # this worker's wall time; None: no limit


def validation_only(arrays: PreparedArrays) -> PreparedArrays:
    """The arrays without their test period: every row from the validation end on dropped,
    with whatever was computed from those rows (the latest window, the append state), so a
    fit and its evaluation cannot read them (no test windows: test scores stay empty).
    The windows of the training and validation parts are those of the uncut arrays."""
    end = arrays.split.val_end
    empty = np.zeros(0)
    return replace(
        arrays,
        features=arrays.features[:end],
        targets=arrays.targets[:end],
        raw_features=np.zeros((0, 0)),
        raw_targets=empty,
        gap_bars=arrays.gap_bars[arrays.gap_bars < end + arrays.warmup + arrays.horizon],
        val_end=-1,
        test_start=-1,
        row_digests=arrays.row_digests[:end],
        row_times=arrays.row_times[:end],
        latest_features=np.zeros((0, 0)),
        latest_time=-1,
        append_base={},
        tail_times=np.zeros(0, dtype=np.int64),
        tail_values=np.zeros((0, 0)),
        quality={},
    )


@dataclass
class RunningFit:
    """One sample dataset's fit within a trial, between its epochs."""

    arrays: PreparedArrays
    parts: Parts
    epochs: Generator[EpochEnd, None, Trained]
    naive_objective: float  # the baseline's training loss on the validation windows
    random_state: tuple | None = None  # torch's random state after its last epoch
    best_ratio: float = math.inf  # its best validation loss so far relative to the baseline's


def random_state(device: torch.device) -> tuple:
    """torch's global random state on the CPU and the device (dropout draws from it)."""
    import torch

    if device.type == "cuda":
        return torch.get_rng_state(), torch.cuda.get_rng_state(device)
    if device.type == "mps":
        return torch.get_rng_state(), torch.mps.get_rng_state()
    return torch.get_rng_state(), None


def set_random_state(device: torch.device, state: tuple) -> None:
    import torch

    cpu, on_device_state = state
    torch.set_rng_state(cpu)
    if device.type == "cuda":
        torch.cuda.set_rng_state(on_device_state, device)
    elif device.type == "mps":
        torch.mps.set_rng_state(on_device_state)


def one_more_epoch(fit: RunningFit, device: torch.device) -> Trained | None:
    """The fit's next epoch, in its own random state (so that fits run in turns are each the
    fit it would be alone); its Trained when that epoch ended it, else None."""
    if fit.random_state is not None:
        set_random_state(device, fit.random_state)
    try:
        fit.best_ratio = next(fit.epochs).best_val_objective / fit.naive_objective
        return None
    except StopIteration as stop:
        return stop.value
    finally:
        fit.random_state = random_state(device)


def finished_ratio(name: str, fit: RunningFit, trained: Trained) -> float:
    """val_loss / naive_val_loss of a finished fit (evaluate); ValueError naming the dataset
    when it is not a finite number (no validation windows, a zero baseline)."""
    from rnnfleet.train.evaluate import evaluate

    evaluated = evaluate(trained, fit.parts, fit.arrays)
    ratio = evaluated.val_loss / evaluated.naive_val_loss if evaluated.naive_val_loss > 0 else math.nan
    if not math.isfinite(ratio):
        raise ValueError(
            f"{name}: validation loss {evaluated.val_loss} against the baseline's {evaluated.naive_val_loss}"
        )
    return ratio


def validation_ratios(
    fits: Mapping[str, tuple[PreparedArrays, Mapping, Mapping]],
    device: torch.device,
    after_epoch: Callable[[int, float], None] = lambda epoch, mean_ratio: None,
) -> dict[str, float]:
    """Each dataset's val_loss / naive_val_loss of a fit of its arrays (already cut:
    validation_only) with its settings ({dataset: (arrays, train, model)}). The fits run in
    turns, an epoch each, every one the fit it would be alone (train_and_evaluate's result);
    after each round that leaves a fit to go on, after_epoch(epoch, the mean over the datasets
    of their best validation loss so far relative to the baseline's), which may raise to stop
    them all (a trial whose fits have all ended is not pruned)."""
    from rnnfleet.train.evaluate import naive_val_objective
    from rnnfleet.train.loop import LoopSettings, epochs_of_training, on_device

    running = {}
    for name, (arrays, train, model) in fits.items():
        settings = LoopSettings.of(train)
        parts = on_device(arrays, settings, device)
        naive_objective = naive_val_objective(parts)
        if not naive_objective > 0:  # NaN: no validation window
            raise ValueError(f"{name}: the baseline's validation loss is {naive_objective}: nothing to score against")
        epochs = epochs_of_training(parts, dict(model), settings)
        running[name] = RunningFit(arrays, parts, epochs, naive_objective)
    ratios: dict[str, float] = {}
    epoch = 0
    while running:
        epoch += 1
        for name, fit in list(running.items()):
            trained = one_more_epoch(fit, device)
            if trained is not None:
                ratios[name] = finished_ratio(name, fit, trained)
                del running[name]
        if running:
            after_epoch(epoch, float(np.mean([*ratios.values(), *(fit.best_ratio for fit in running.values())])))
    return {name: ratios[name] for name in fits}


def make_objective(
    datasets: Mapping[str, PreparedArrays],
    train: Mapping,
    model: Mapping,
    own: Mapping[str, Mapping],
    epochs: int,
    device,
    log: Callable,
) -> Callable[[optuna.Trial, dict], float]:
    """The trial's score (see the module doc), given its settings {"train.lr": ...}; own:
    {dataset: its settings of its own (a datasets sheet)}, over the trial's for its fits."""

    def objective(trial: optuna.Trial, flat: dict) -> float:
        fits = {}
        for name, arrays in datasets.items():
            trial_train, trial_model = fit_settings(train, model, flat, own.get(name, {}))
            fits[name] = (arrays, {**trial_train, "epochs": epochs}, trial_model)

        def after_epoch(epoch: int, mean_ratio: float) -> None:
            log(f"  trial {trial.number}: epoch {epoch}, mean best val_loss/naive so far {mean_ratio:.5f}")
            trial.report(mean_ratio, epoch)
            if trial.should_prune():
                raise optuna.TrialPruned()

        ratios = validation_ratios(fits, device, after_epoch)
        for name, ratio in ratios.items():
            log(f"  trial {trial.number}: {name} val_loss/naive {ratio:.5f}")
        return float(np.mean(list(ratios.values())))

    return objective


def suggest(trial: optuna.Trial, space: Mapping) -> dict:
    """The trial's settings drawn from the space ({"train.lr": 0.003, ...})."""
    flat = {}
    for name, values in space.items():
        if isinstance(values, list):
            flat[name] = trial.suggest_categorical(name, values)
        elif all(isinstance(values[bound], int) for bound in ("low", "high")):
            flat[name] = trial.suggest_int(name, values["low"], values["high"], log=values.get("log", False))
        else:
            flat[name] = trial.suggest_float(
                name, float(values["low"]), float(values["high"]), log=values.get("log", False)
            )
    return flat


def storage_of(journal_path: str) -> optuna.storages.JournalStorage:
    from optuna.storages.journal import JournalFileBackend

    return optuna.storages.JournalStorage(JournalFileBackend(journal_path))


def open_study(journal_path: str, name: str, sampler=None) -> optuna.Study:
    """The study `name` in the journal (made if new), minimising, with successive halving."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        storage=storage_of(journal_path),
        study_name=name,
        direction="minimize",
        load_if_exists=True,
        sampler=sampler,
        pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=PRUNER_GROWTH),
    )


def fail_abandoned_trials(study: optuna.Study, worker: int, workers: int) -> list[int]:
    """Tell FAIL the RUNNING trials a dead worker left: those of worker number `worker`, and
    (for worker 0) those of numbers `workers` and above. Returns their numbers."""
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        owner = trial.user_attrs.get(WORKER_ATTR)
        if owner == worker or (worker == 0 and (owner is None or owner >= workers)):
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
            failed.append(trial.number)
    return failed


def spent_before(study: optuna.Study, number: int | None = None) -> int:
    """Trials that take budget (finished or running) numbered below `number` (None: all)."""
    taking = (*FINISHED, optuna.trial.TrialState.RUNNING)
    return sum(
        1 for trial in study.get_trials(deepcopy=False, states=taking) if number is None or trial.number < number
    )


def run_worker(
    study: optuna.Study, worker: int, space: Mapping, objective: Callable, budget: Budget, log: Callable
) -> list[dict]:
    """Ask, evaluate and tell trials until the budget is spent (see the module doc); one
    log line per trial. Returns what this worker did: {number, state, value, params} each.
    UserError after FAILURES_IN_A_ROW failed trials in a row."""
    started, done, failures = time.monotonic(), [], 0
    while True:
        if budget.minutes is not None and time.monotonic() - started >= budget.minutes * 60:
            log(f"tune worker {worker}: tune.minutes ({budget.minutes:g}) spent")
            break
        if spent_before(study) >= budget.trials:
            break
        trial = study.ask()
        trial.set_user_attr(WORKER_ATTR, worker)
        if spent_before(study, trial.number) >= budget.trials:
            trial.set_user_attr(SKIPPED_ATTR, "the budget was taken by other workers")
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            break
        flat = suggest(trial, space)
        log(f"tune worker {worker}: trial {trial.number} {flat}")
        try:
            value = objective(trial, flat)
        except optuna.TrialPruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            done.append({"number": trial.number, "state": "PRUNED", "value": None, "params": flat})
            log(f"tune worker {worker}: trial {trial.number} pruned")
            continue
        except (ValueError, RuntimeError, FloatingPointError) as error:
            trial.set_user_attr(SKIPPED_ATTR, " ".join(str(error).split()))
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            log(f"tune worker {worker}: trial {trial.number} failed: {error}")
            failures += 1
            if failures >= FAILURES_IN_A_ROW:
                raise UserError(
                    f"tune: {failures} trials in a row failed, the search stops; the last: {error}"
                ) from None
            continue
        failures = 0
        study.tell(trial, value)
        done.append({"number": trial.number, "state": "COMPLETE", "value": value, "params": flat})
        log(f"tune worker {worker}: trial {trial.number} -> {value:.6f}")
    log(f"tune worker {worker}: {len(done)} trial(s) run; the study has {spent_before(study)} of {budget.trials}")
    return done


def seeded_sampler(seed: int, worker: int, finished: int) -> optuna.samplers.TPESampler:
    """TPE with a seed of its own for this worker and point of the study (see the module doc)."""
    return optuna.samplers.TPESampler(seed=seed * 1_000_003 + worker * 1_009 + finished)
