"""Walk-forward (rolling-origin) evaluation: `evaluate.folds` re-fits on successive origins,
each scored on the period right after its training data, inside the dataset's train job.

Fold k of K (1 = the oldest) is the dataset's own split (rnnfleet.prep.split.SplitSettings) moved
back by (K - k) * step feature rows: a test period as long as the test part, starting at the
fold's origin; before it the embargo, a validation part as long as the validation part
(early stopping only), the embargo, and the training part. The training part starts at row
0 (`expanding`) or (k - 1) * step rows later (`sliding`: every fold as long as the oldest).
The latest expanding fold is the dataset's own split, so its scores are the scored model's:
K folds cost K - 1 trainings more. Each fold's rows are normalised again with its own
training part's statistics, so nothing after a fold's origin reaches its training.

A finished fold's scores are saved at once (atomically) in a fold file under
FOLDS_DIR/<dataset>/<key>/, the key a hash of everything its result depends on (the arrays,
the model and training hyper-parameters, the evaluate settings); a job that starts again
after a kill reads them back and trains only the folds without one.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import NamedTuple

import numpy as np

from rnnfleet.atomic_files import write_json
from rnnfleet.errors import SettingsError, UserError
from rnnfleet.faults import pause_point
from rnnfleet.prep.arrays import PreparedArrays
from rnnfleet.prep.gaps import SplitPoints, window_numbers
from rnnfleet.prep.normalise import Normalisation, denormalised, normalised_with
from rnnfleet.prep.split import embargo_rows

FOLDS_DIR = Path(".snakemake") / "rnnfleet-folds"
WINDOWS = ("expanding", "sliding")
# The evaluate settings that change a fold's scores (evaluate.production does not).
FOLD_SETTINGS = ("folds", "window", "step", "cost_bps", "block_bars", "bootstrap")


class Fold(NamedTuple):
    """Feature rows [first_row, end_row) of a dataset, split as `split` says (row numbers
    from first_row); its test period is [split.test_start, end_row - first_row)."""

    number: int  # 1 = the oldest origin
    first_row: int
    end_row: int
    split: SplitPoints


def fold_plan(
    rows: int,
    split: SplitPoints,
    folds: int,
    window: str,
    step: int,
    seq_len: int,
    horizon: int,
    warmup: int,
    name: str = "dataset",
) -> list[Fold]:
    """The `folds` folds of dataset `name` of `rows` feature rows split as `split`, oldest
    first; step 0: the test part's length (back-to-back test periods). DataError when the
    oldest fold leaves no training window; UserError without a test part."""
    test_rows = rows - split.test_start
    if test_rows <= 0:
        raise UserError("config key 'evaluate.folds' needs a test part: set preprocess.test_fraction above 0")
    if window not in WINDOWS:
        raise UserError(f"config key 'evaluate.window' = {window!r}; allowed: {' or '.join(WINDOWS)}")
    step = step or test_rows
    embargo = embargo_rows(seq_len, horizon, warmup)
    val_rows = split.val_end - split.val_start
    plan = []
    for number in range(1, folds + 1):
        origin = split.test_start - (folds - number) * step
        first_row = (number - 1) * step if window == "sliding" else 0
        test_start = origin - first_row
        val_end = test_start - embargo
        val_start = val_end - val_rows
        plan.append(
            Fold(
                number, first_row, origin + test_rows, SplitPoints(val_start - embargo, val_start, val_end, test_start)
            )
        )
    oldest = plan[0]
    if oldest.split.train_end - (seq_len - 1) < 1:
        raise SettingsError(
            f"{name}: evaluate.folds={folds} with a step of {step} rows: the oldest fold's test period would start at "
            f"feature row {oldest.first_row + oldest.split.test_start} and leave no training window; lower "
            "evaluate.folds or evaluate.step, or give this dataset more rows"
        )
    return plan


def is_own_split(fold: Fold, rows: int, split: SplitPoints) -> bool:
    """Whether the fold is the dataset's own split (the scored model's training)."""
    return fold.first_row == 0 and fold.end_row == rows and fold.split == split


def fold_arrays(arrays: PreparedArrays, fold: Fold) -> PreparedArrays:
    """The fold's rows of `arrays` with the fold's split, features and targets normalised
    with the fold's own training part's statistics (undoing the array file's first)."""
    rows = slice(fold.first_row, fold.end_row)
    raw_features, raw_targets = denormalised(arrays, rows)
    train_end = fold.split.train_end
    statistics = Normalisation.fit(raw_features[:train_end], raw_targets[:train_end], arrays.target).statistics
    fold_rows = fold.end_row - fold.first_row
    gap_bars = arrays.gap_bars - fold.first_row
    # A gap outside the fold's bars touches none of its windows (rnnfleet.prep.gaps.usable_window_ends).
    gap_bars = gap_bars[(gap_bars >= 0) & (gap_bars < fold_rows + arrays.warmup + arrays.horizon)]
    return normalised_with(
        arrays,
        raw_features,
        raw_targets,
        statistics,
        train_end=fold.split.train_end,
        val_start=fold.split.val_start,
        val_end=fold.split.val_end,
        test_start=fold.split.test_start,
        gap_bars=gap_bars,
        row_times=arrays.row_times[rows],
    )


def absolute_rows(fold: Fold) -> tuple[int, int, int, int, int, int]:
    """The fold's parts in the dataset's feature rows: train start and end, validation start
    and end, test start and end (each end exclusive)."""
    first, split = fold.first_row, fold.split
    return (
        first,
        first + split.train_end,
        first + split.val_start,
        first + split.val_end,
        first + split.test_start,
        fold.end_row,
    )


def fold_entry(fold: Fold, trained, evaluated) -> dict:
    """One fold's line of the metrics: where it lies (feature rows of the dataset), its
    training (rnnfleet.train.loop.Trained), its validation skill and its test period's scores
    (rnnfleet.train.evaluate.Evaluated; without the series the report draws: that is the
    dataset's own test period)."""
    train_start, train_end, val_start, val_end, test_start, test_end = absolute_rows(fold)
    return {
        "fold": fold.number,
        "train_start_row": train_start,
        "train_end_row": train_end,
        "val_start_row": val_start,
        "val_end_row": val_end,
        "test_end_row": test_end,
        "best_epoch": trained.best_epoch,
        "epochs_run": trained.epochs_run,
        "train_seconds": trained.train_seconds,
        "skill": evaluated.skill,
        **{name: value for name, value in evaluated.test_scores.items() if name != "test_series"},
        "test_start_row": test_start,
    }


def folds_key(arrays: PreparedArrays, model_hparams: dict, train_hparams: dict, evaluate: dict) -> str:
    """A hash of everything a fold's scores depend on: the arrays' numbers and split, the
    model's and the training's hyper-parameters (not train.device), the FOLD_SETTINGS."""
    digest = hashlib.sha256()
    for values in (arrays.features, arrays.targets, arrays.gap_bars):
        digest.update(np.ascontiguousarray(values).data)
    settings = {
        "split": list(arrays.split),
        "target": arrays.target,
        "model": model_hparams,
        "train": {key: value for key, value in train_hparams.items() if key != "device"},
        "evaluate": {key: evaluate[key] for key in FOLD_SETTINGS},
    }
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


def saved_entry(path: Path, fold: Fold) -> dict | None:
    """The fold's saved entry, or None when there is none that belongs to this fold."""
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    where = (
        (entry.get("fold"), entry.get("train_start_row"), entry.get("test_end_row")) if isinstance(entry, dict) else ()
    )
    return entry if where == (fold.number, fold.first_row, fold.end_row) else None


def check_fold_windows(arrays: PreparedArrays, fold: Fold, seq_len: int, name: str) -> None:
    """DataError when gaps leave one of the fold's parts without a window."""
    windows = window_numbers(arrays.rows, arrays.split, arrays.gap_bars, seq_len, arrays.horizon, arrays.warmup)
    for part, numbers in zip(("training", "validation", "test"), windows, strict=True):
        if not len(numbers):
            raise SettingsError(
                f"{name}: fold {fold.number} of evaluate.folds has no {part} window between the gaps "
                "(preprocess.max_gap); lower evaluate.folds or evaluate.step"
            )


def run_folds(
    plan: list[Fold], arrays: PreparedArrays, seq_len: int, folder: Path, train_and_score, log, name: str = "dataset"
) -> dict[int, dict]:
    """{fold number: fold_entry} of each fold of the plan: read back from folder/fold-<k>.json
    when an earlier attempt saved it, else train_and_score(fold's arrays) -> (Trained,
    Evaluated) and saved there before the next fold starts. Folders of this dataset's
    other keys (other settings or data) are removed first."""
    if folder.parent.is_dir():
        for other in folder.parent.iterdir():
            if other != folder:
                shutil.rmtree(other, ignore_errors=True)
    entries = {}
    for fold in plan:
        path = folder / f"fold-{fold.number}.json"
        entry = saved_entry(path, fold)
        if entry is not None:
            log(f"fold {fold.number}: scores read back from {path} (finished by an earlier attempt)")
        else:
            parts = absolute_rows(fold)
            log(
                f"fold {fold.number}: training on rows {parts[0]}-{parts[1]}, validation {parts[2]}-{parts[3]}, "
                f"test {parts[4]}-{parts[5]}"
            )
            arrays_of_fold = fold_arrays(arrays, fold)
            check_fold_windows(arrays_of_fold, fold, seq_len, name)
            entry = fold_entry(fold, *train_and_score(arrays_of_fold))
            write_json(entry, path)
            log(f"fold {fold.number}: test skill {entry['test_skill']:+.4f} -> {path}")
            pause_point("fold")
        entries[fold.number] = entry
    return entries


def folds_summary(entries: list[dict]) -> dict:
    """The folds' test skills in a few numbers: mean, standard deviation (n - 1; None for
    one fold), how many are above 0, and how many beat the baseline (interval above 0)."""
    skills = np.array([entry["test_skill"] for entry in entries], dtype=np.float64)
    return {
        "folds_skill_mean": float(np.mean(skills)),
        "folds_skill_sd": float(np.std(skills, ddof=1)) if len(skills) > 1 else None,
        "folds_positive": int(np.sum(skills > 0)),
        "folds_beat": int(sum(entry["test_skill_low"] > 0 for entry in entries)),
        "folds_scored": len(entries),
    }


def walk_forward(
    dataset: str,
    arrays: PreparedArrays,
    seq_len: int,
    model_hparams: dict,
    train_hparams: dict,
    evaluate: dict,
    train_and_score,
    log,
) -> tuple[list[Fold], dict[int, dict]]:
    """The fold plan of `evaluate` (folds, window, step) and the entries of its folds that are
    not the dataset's own split (run_folds); ([], {}) with folds 0. seq_len: train.seq_len,
    typed (rnnfleet.train.loop.LoopSettings); the sections as given key the fold files."""
    if not evaluate["folds"]:
        return [], {}
    plan = fold_plan(
        arrays.rows,
        arrays.split,
        int(evaluate["folds"]),
        evaluate["window"],
        int(evaluate["step"]),
        seq_len,
        arrays.horizon,
        arrays.warmup,
        dataset,
    )
    folder = FOLDS_DIR / dataset / folds_key(arrays, model_hparams, train_hparams, evaluate)
    others = [fold for fold in plan if not is_own_split(fold, arrays.rows, arrays.split)]
    log(f"{dataset}: walk-forward, {len(plan)} {evaluate['window']} fold(s)")
    entries = run_folds(others, arrays, seq_len, folder, train_and_score, log, dataset)
    for fold in plan:
        if fold not in others:
            log(f"fold {fold.number}: the dataset's own split, whose scores are the scored model's (trained next)")
    return plan, entries


def folds_metrics(plan: list[Fold], entries: dict[int, dict], scored) -> dict:
    """The metrics of the folds: each fold's entry (a fold of the plan without one in
    `entries` is the dataset's own split: the scored model's, `scored` (Trained, Evaluated)),
    and folds_summary."""
    every = [entries.get(fold.number) or fold_entry(fold, *scored) for fold in plan]
    return {"folds": every, **folds_summary(every)}
