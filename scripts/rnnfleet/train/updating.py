"""Updating a model with new bars instead of training it again from scratch.

A model file records its lineage (LINEAGE_KEYS): a fingerprint of the settings and code it was
trained with, how many feature rows (bars) it has seen and a hash of them, the full fit it
descends from and the scores of each fit since. When a dataset's new array file holds the same
rows plus newer ones (same fingerprint, same hash over the first `rows` rows), the train job
starts from the previous model's weights and optimizer state and trains on the training windows
it has not trained on plus `update.recent_bars` before them (plan_training); otherwise, and
after `update.full_every` updates, it trains from scratch. Nothing here trusts file times.

What the hash covers: one digest per feature row of the exact float64 values of its features
and target before normalisation (row_digests, computed by preprocessing), and the gaps among
the bars those rows use. Normalising with the new training part changes every stored value, so
the digests, not the stored arrays, tell whether the earlier bars are unchanged.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from importlib import metadata

import numpy as np

from rnnfleet.prep.arrays import PreparedArrays
from rnnfleet.prep.gaps import window_numbers
from rnnfleet.prep.normalise import Normalisation, denormalised, normalised_with
from rnnfleet.settings import RUNTIME_ONLY_TRAIN_KEYS, full_fit_due, updates_ruled_out

FULL, UPDATE = "full", "update"
NO_PREVIOUS_MODEL = "no previous model"


def rows_sha256(arrays: PreparedArrays, rows: int) -> str:
    """A hash of the first `rows` feature rows (their digests) and of the gaps among the bars
    they use (features from `warmup` bars before, targets `horizon` bars after). A gap at bar
    b is the step from bar b to b + 1: among those bars only when b + 1 is one of them, so
    the break before a morning's first new bar (a night, a weekend) is not among the bars a
    model saw, and new bars after it update the model."""
    bars_used = rows + arrays.warmup + arrays.horizon
    gaps = arrays.gap_bars[arrays.gap_bars + 1 < bars_used].astype(np.int64)
    digest = hashlib.sha256(np.ascontiguousarray(arrays.row_digests[:rows]).tobytes())
    digest.update(b"gaps")
    digest.update(gaps.tobytes())
    return digest.hexdigest()


def settings_sha256(settings: dict) -> str:
    """A hash of JSON-like settings (keys sorted)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()


def rnnfleet_version() -> str:
    try:
        return metadata.version("rnnfleet")
    except metadata.PackageNotFoundError:
        return "unknown"


def training_fingerprint(
    arrays: PreparedArrays,
    model_hparams: dict,
    train_hparams: dict,
    columns: dict | None,
    evaluate: dict,
    plugin_sha256: dict,
) -> str:
    """What a model is the product of, besides its bars: the preprocess settings (as the
    array file records them), the model and training settings, the code (rnnfleet's version
    and the content of each user file that ran). A model may be updated only by a job with
    the same fingerprint."""
    return settings_sha256(
        {
            "preprocess": arrays.settings_sha256,
            "model": model_hparams,
            "train": {key: value for key, value in train_hparams.items() if key not in RUNTIME_ONLY_TRAIN_KEYS},
            "columns": columns or {},
            "evaluate": evaluate,
            "code": {"rnnfleet": rnnfleet_version(), "plugins": plugin_sha256},
        }
    )


@dataclass(frozen=True)
class Plan:
    """What the train job does: kind FULL (from scratch) or UPDATE (from `previous`, the
    previous model file's contents), and why, in words for the log and the dry-run."""

    kind: str
    reason: str
    previous: dict | None = None

    @property
    def label(self) -> str:
        """'update: N new bars', 're-train: <why>', or 'full fit: no previous model'."""
        if self.kind == UPDATE:
            return f"update: {self.reason}"
        return f"{'full fit' if self.reason == NO_PREVIOUS_MODEL else 're-train'}: {self.reason}"


def plan_training(
    previous: dict | None,
    previous_problem: str | None,
    arrays: PreparedArrays,
    fingerprint: str,
    update: dict,
    evaluate: dict,
) -> Plan:
    """UPDATE when the previous model's lineage has this fingerprint, fewer rows than the
    arrays and the same hash over them, and fewer than update.full_every updates since its
    full fit; else FULL with the first reason that rules the update out (the rows' hash is
    compared before their count)."""
    if previous is None:
        return Plan(FULL, previous_problem or NO_PREVIOUS_MODEL)
    lineage = previous.get("lineage")
    ruled_out = updates_ruled_out(update, evaluate)
    if ruled_out:
        return Plan(FULL, ruled_out)
    if not isinstance(lineage, dict) or "optimizer_state" not in previous:
        return Plan(FULL, "the previous model records no lineage (trained before updates existed)")
    if not len(arrays.row_digests):
        return Plan(FULL, "the array file has no row digests (written before updates existed)")
    if lineage["settings_sha256"] != fingerprint:
        return Plan(FULL, "settings or code changed")
    seen = int(lineage["rows"])
    if arrays.rows < seen:
        return Plan(FULL, "fewer bars than the model has seen")
    # The digests before the count: a bar the model has seen that changed (a repaired last
    # line) is a change, not "no new bars".
    if rows_sha256(arrays, seen) != lineage["rows_sha256"]:
        return Plan(FULL, "earlier bars changed")
    if arrays.rows == seen:
        return Plan(FULL, "no new bars")
    due = full_fit_due(int(lineage["updates"]), update)
    if due:
        return Plan(FULL, due)
    return Plan(UPDATE, f"{arrays.rows - seen} new bars", previous)


def with_normalisation(arrays: PreparedArrays, normalisation: dict) -> PreparedArrays:
    """The arrays normalised with a model file's statistics instead of their own (the
    model's inputs keep the meaning they had when it was first fitted)."""
    statistics = Normalisation.from_record(normalisation).statistics
    return normalised_with(arrays, *denormalised(arrays), statistics)


def update_from_row(previous: dict, recent_bars: int) -> int:
    """The first feature row an update's training windows may end on: update.recent_bars
    before the end of the previous fit's training part."""
    return max(0, int(previous["split"]["train_end"]) - recent_bars)


def update_windows(arrays: PreparedArrays, seq_len: int, from_row: int) -> np.ndarray:
    """The training windows of an update: those of the arrays' training part ending at or after from_row."""
    train = window_numbers(arrays.rows, arrays.split, arrays.gap_bars, seq_len, arrays.horizon, arrays.warmup).train
    return train[train + (seq_len - 1) >= from_row]


def fit_record(made: str, arrays: PreparedArrays, metrics: dict, seconds: float, new_rows: int) -> dict:
    """One entry of a lineage's history: how the fit was made, on how many rows, its scores."""
    return {
        "made": made,
        "rows": arrays.rows,
        "new_rows": new_rows,
        "skill": metrics.get("skill"),
        "test_skill": metrics.get("test_skill"),
        "train_seconds": seconds,
        "at": time.time(),
    }


def next_lineage(plan: Plan, arrays: PreparedArrays, fingerprint: str, record: dict) -> dict:
    """The lineage the new model file records: a full fit starts one, an update extends its
    previous model's (the full fit it descends from stays)."""
    if plan.kind == FULL:
        return {
            "settings_sha256": fingerprint,
            "rows": arrays.rows,
            "rows_sha256": rows_sha256(arrays, arrays.rows),
            "updates": 0,
            "full_fit": record,
            "history": [record],
        }
    lineage = plan.previous["lineage"]
    return {
        **lineage,
        "rows": arrays.rows,
        "rows_sha256": rows_sha256(arrays, arrays.rows),
        "updates": int(lineage["updates"]) + 1,
        "history": [*lineage["history"], record],
    }


def skill_drop(update_metrics: dict, full_fit: dict, margin: float) -> str | None:
    """Why an update's validation or test skill is too far below its full fit's (more than
    `margin`), in words; None when neither is."""
    for key, name in (("skill", "validation"), ("test_skill", "test")):
        now, then = update_metrics.get(key), full_fit.get(key)
        if isinstance(now, float) and isinstance(then, float) and now < then - margin:
            return (
                f"the update's {name} skill {now:+.4f} is more than update.max_skill_drop ({margin}) "
                f"below the full fit's {then:+.4f}"
            )
    return None


def made_label(lineage: dict) -> str:
    """How a model was made, for the summary table: 'full' or 'update N'."""
    return "full" if not lineage["updates"] else f"update {lineage['updates']}"
