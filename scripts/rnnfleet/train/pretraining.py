"""The fleet's pretrained model (rule pretrain, `train.init: fleet`): one model of the
configured builder trained on the bars of every dataset it serves (the pretrain job).

What it promises:
- No look-ahead for any dataset it reads. The cutoff is a bar that follows the training
  part of every dataset it reads (the first bar of the embargo before its validation part:
  validation start less the embargo), chosen to serve the most datasets (the latest such
  bar among equals): a dataset whose own validation starts before it, or with too few bars
  before it, is left out with why and trains from scratch; one dataset of an older history
  does not move it back for everyone. The pretraining reads only windows whose inputs and
  targets lie strictly before it, and the model file records the cutoff and, per dataset,
  the first and last bar its windows touched.
- Bounded memory at any fleet size: per dataset at most pretrain.train_windows training and
  pretrain.val_windows validation windows, read as row slices of the array file (the
  features are memory-mapped, never loaded whole). Each dataset keeps its own
  normalisation, as its own training will.
- Its early stopping uses each dataset's latest windows before the cutoff (val_windows of
  them, an embargo before them): never a bar at or after the cutoff.
- The file (rnnfleet.train.fleet_start reads it) has beside it a JSON file of the same
  lineage, which the workflow reads while parsing (no torch there) to keep the datasets it
  serves frozen: a dataset added later starts from it without re-running it
  (rnnfleet.workflow.pretrain_plan).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass

import numpy as np

from rnnfleet.prep.arrays_file import UNREADABLE, ArraysHead, npz_rows, read_head
from rnnfleet.train.fleet_start import KIND, START_KEYS, iso

# A dataset with few bars before the cutoff validates on at most this share (1/VAL_SHARE) of them.
VAL_SHARE = 4
# Pretrain settings that say when it is redone (rnnfleet.workflow.pretrain_plan), not what it learns.
WHEN_KEYS = ("refresh",)


def pretrain_settings(model: dict, train_hparams: dict, columns: dict, pretrain: dict, preprocess: dict) -> dict:
    """What the pretraining learns from (the pretrain rule's params; its fingerprint): the
    model, the training settings but how a dataset's own fit starts, the pretrain section
    but when it is redone, and the preprocess settings (features, target, splits)."""
    return {
        "model_hparams": model,
        "train_hparams": {key: value for key, value in train_hparams.items() if key not in START_KEYS},
        "columns": columns,
        "pretrain": {key: value for key, value in pretrain.items() if key not in WHEN_KEYS},
        "preprocess": preprocess,
    }


def settings_fingerprint(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()


# ---- the cutoff and the windows read ---------------------------------------------------------


@dataclass(frozen=True)
class CutoffRange:
    """The cutoffs that serve one dataset (ns): from the first that leaves it a training and a
    validation window before it (earliest) to its own first embargo bar (latest)."""

    earliest: int
    latest: int


def cutoff_range(head: ArraysHead, seq_len: int) -> CutoffRange | None:
    """The cutoffs that serve this dataset (dataset_pieces' fewest rows: one validation
    window, an embargo, one training window); None when none does."""
    from rnnfleet.prep.split import embargo_rows

    latest = first_embargo_time(head)
    fewest = seq_len + embargo_rows(seq_len, head.horizon, head.warmup) + head.horizon + head.warmup
    if latest is None or len(head.row_times) < fewest:
        return None
    earliest = int(head.row_times[fewest - 1]) + 1  # strictly after the last bar it reads
    return CutoffRange(earliest, latest) if earliest <= latest else None


def best_cutoff(ranges: dict[str, CutoffRange]) -> int:
    """The cutoff inside the most datasets' ranges, the latest among equals (more bars read)."""
    candidates = sorted({served.latest for served in ranges.values()})
    return max(
        candidates,
        key=lambda cutoff: (sum(served.earliest <= cutoff <= served.latest for served in ranges.values()), cutoff),
    )


def first_embargo_time(head: ArraysHead) -> int | None:
    """The time (ns) of the dataset's first bar after its training part (validation start less
    the embargo); None when the array file records no bar times."""
    if len(head.row_times) <= head.train_end:
        return None
    return int(head.row_times[head.train_end])


@dataclass(frozen=True)
class Piece:
    """Window ends [first_end, last_end] of one dataset's part (feature rows)."""

    first_end: int
    last_end: int

    @property
    def windows(self) -> int:
        return max(0, self.last_end - self.first_end + 1)


def dataset_pieces(head: ArraysHead, cutoff_ns: int, seq_len: int, train_windows: int, val_windows: int):
    """(training piece, validation piece) of one dataset's windows before the cutoff: a
    window ending at row t reads bars t - seq_len + 1 .. t + horizon (its target), kept
    only when all are before the cutoff, with a margin of the features' warm-up; the
    validation windows are the latest (at most a quarter of them), an embargo before them,
    the training ones before that.
    None where no training window is left."""
    from rnnfleet.prep.split import embargo_rows

    before = int(np.searchsorted(head.row_times, cutoff_ns, side="left"))  # rows before the cutoff
    last_end = before - 1 - head.horizon - head.warmup
    val_windows = min(val_windows, max(1, (last_end - seq_len + 2) // VAL_SHARE))
    val = Piece(max(seq_len - 1, last_end - val_windows + 1), last_end)
    train_last = val.first_end - embargo_rows(seq_len, head.horizon, head.warmup)
    train = Piece(max(seq_len - 1, train_last - train_windows + 1), train_last)
    if train.windows < 1 or val.windows < 1:
        return None
    return train, val


@dataclass
class FleetRows:
    """The pieces of every dataset, one after another, each followed by blank rows and a gap
    (rnnfleet.prep.gaps): no window spans two pieces."""

    features: list
    targets: list
    gaps: list
    rows: int = 0

    def add(self, path: str, head: ArraysHead, piece: Piece, seq_len: int) -> None:
        self.append(head, piece_rows(path, head, piece, seq_len))

    def append(self, head: ArraysHead, rows: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        """Add one piece's rows (piece_rows)."""
        features, targets, gap_rows = rows
        own_gaps = gap_rows + self.rows
        pad = head.horizon + head.warmup
        self.features += [features, np.zeros((pad, features.shape[1]), features.dtype)]
        self.targets += [targets, np.zeros((pad, *targets.shape[1:]), targets.dtype)]
        self.rows += len(features) + pad
        self.gaps += [own_gaps, np.array([self.rows - 1], np.int64)]


def piece_rows(path: str, head: ArraysHead, piece: Piece, seq_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features, targets, gaps) of the rows a piece's windows read, the gaps counted from its first row."""
    from rnnfleet.prep.normalise import Normalisation, normalised_rows

    first_row, stop = piece.first_end - (seq_len - 1), piece.last_end + 1
    # Normalised with the dataset's own statistics, as its train job sees them.
    statistics = Normalisation(head.feature_mean, head.feature_std, head.target_mean, head.target_std).statistics
    features, targets = normalised_rows(
        npz_rows(path, "raw_features", first_row, stop), npz_rows(path, "raw_targets", first_row, stop), statistics
    )
    return features, targets, head.gap_bars[(head.gap_bars >= first_row) & (head.gap_bars < stop)] - first_row


def fleet_arrays(train: FleetRows, val: FleetRows, head: ArraysHead):
    """PreparedArrays of the pooled pieces: training pieces, then validation pieces; no test part."""
    from rnnfleet.prep.arrays import PreparedArrays

    features = np.concatenate(train.features + val.features).astype(np.float32, copy=False)
    targets = np.concatenate(train.targets + val.targets).astype(np.float32, copy=False)
    gaps = np.concatenate(train.gaps + [part + train.rows for part in val.gaps]).astype(np.int64)
    rows = len(features)
    return PreparedArrays(
        features=features,
        targets=targets,
        feature_mean=np.zeros(features.shape[1], np.float32),
        feature_std=np.ones(features.shape[1], np.float32),
        target_std=head.target_std,
        train_end=train.rows,
        val_start=train.rows,
        last_close=0.0,
        horizon=head.horizon,
        target=head.target,
        target_mean=head.target_mean,
        horizons=head.horizons,
        feature_names=head.feature_names,
        warmup=head.warmup,
        gap_bars=np.unique(gaps),
        val_end=rows,
        test_start=rows,
    )


# ---- the pretraining --------------------------------------------------------------------------


def pretrain(
    arrays_paths: dict[str, str], settings: dict, device, log=print, left_out: dict[str, str] | None = None
) -> tuple[dict, dict]:
    """(the model file's contents, its lineage) of the pretraining on these datasets'
    array files ({dataset: path}); settings: pretrain_settings() plus settings_sha256;
    left_out: {dataset: why} of datasets it serves that it was given no array file of (their
    preprocess failed). A dataset whose array file does not read is left out too, with why:
    one bad dataset never stops the pretraining of the others."""
    from rnnfleet.errors import UserError
    from rnnfleet.train.evaluate import train_and_evaluate
    from rnnfleet.train.loop import LoopSettings, on_cpu

    model_hparams, train_hparams = settings["model_hparams"], settings["train_hparams"]
    loop = LoopSettings.of(train_hparams)
    seq_len = loop.seq_len
    # First pass: the cutoffs that serve each dataset (one head in memory at a time: the bar
    # times of a thousand long histories would not be bounded by the windows read).
    left_out = dict(left_out or {})
    ranges, newest_bars = {}, {}
    for name, path in arrays_paths.items():
        try:
            head = read_head(path)
        except UNREADABLE as error:
            left_out[name] = f"its array file does not read: {path} ({error})"
            continue
        newest_bars[name] = int(head.row_times[-1]) if len(head.row_times) else None
        if first_embargo_time(head) is None:
            left_out[name] = "no bar times: its array file was written by an older rnnfleet; re-run preprocess"
        elif (served := cutoff_range(head, seq_len)) is None:
            left_out[name] = "too few bars before its own validation part for a training and a validation window"
        else:
            ranges[name] = served
    if not ranges:
        raise UserError("pretrain: no dataset ready to pretrain on" + left_out_text(left_out))
    cutoff_ns = best_cutoff(ranges)
    cutoff_dataset = min(name for name in ranges if ranges[name].latest == cutoff_ns)
    for name, served in ranges.items():
        if cutoff_ns > served.latest:
            left_out[name] = (
                f"its validation starts before the cutoff: at {iso(served.latest)} (less the embargo), before "
                f"{iso(cutoff_ns)}, the cutoff that serves the most datasets; it trains from scratch"
            )
        elif cutoff_ns < served.earliest:
            left_out[name] = "too few bars before the cutoff for a training and a validation window"
    timed = [name for name in ranges if name not in left_out]
    reference = read_head(arrays_paths[cutoff_dataset])
    log(
        f"pretrain: {len(timed)} of {len(arrays_paths)} dataset(s); cutoff {iso(cutoff_ns)} (the first bar after "
        f"{cutoff_dataset}'s training part, the cutoff that serves the most): only bars before it are read"
    )
    train_rows, val_rows, bars = FleetRows([], [], []), FleetRows([], [], []), {}
    for name in timed:
        try:
            head = read_head(arrays_paths[name])
        except UNREADABLE as error:
            left_out[name] = f"its array file does not read: {arrays_paths[name]} ({error})"
            continue
        same = (head.feature_names, head.target, head.horizons, head.horizon, head.warmup)
        if same != (reference.feature_names, reference.target, reference.horizons, reference.horizon, reference.warmup):
            left_out[name] = "its features, target or horizons differ from the fleet's"
            continue
        pieces = dataset_pieces(
            head,
            cutoff_ns,
            seq_len,
            int(settings["pretrain"]["train_windows"]),
            int(settings["pretrain"]["val_windows"]),
        )
        if pieces is None:
            left_out[name] = "too few bars before the cutoff for a training and a validation window"
            continue
        train, val = pieces
        path = arrays_paths[name]
        try:
            read = piece_rows(path, head, train, seq_len), piece_rows(path, head, val, seq_len)
        except UNREADABLE as error:
            left_out[name] = f"its array file does not read: {path} ({error})"
            continue
        train_rows.append(head, read[0])
        val_rows.append(head, read[1])
        first_bar = int(head.row_times[train.first_end - (seq_len - 1)])
        last_bar = int(head.row_times[val.last_end + head.horizon])
        bars[name] = {
            "first_bar": iso(first_bar),
            "last_bar": iso(last_bar),
            "first_bar_ns": first_bar,
            "last_bar_ns": last_bar,
            "train_windows": train.windows,
            "val_windows": val.windows,
        }
    for name, why in left_out.items():
        log(f"pretrain: {name} left out: {why}")
    if not bars:
        raise UserError(
            "pretrain: no dataset has enough bars before the cutoff " + iso(cutoff_ns) + left_out_text(left_out)
        )
    arrays = fleet_arrays(train_rows, val_rows, reference)
    log(f"pretrain: {len(bars)} dataset(s), {arrays.rows} rows read; training on {device}")
    result, evaluated = train_and_evaluate(arrays, model_hparams, loop, device)
    scores = {
        "val_loss": evaluated.val_loss,
        "naive_val_loss": evaluated.naive_val_loss,
        "skill": evaluated.skill,
        "best_epoch": result.best_epoch,
        "epochs_run": result.epochs_run,
        "train_seconds": result.train_seconds,
    }
    lineage = {
        "kind": KIND,
        "settings_sha256": settings["settings_sha256"],
        "datasets": sorted(arrays_paths),
        "trained_on": sorted(bars),
        "left_out": left_out,
        "cutoff": iso(cutoff_ns),
        "cutoff_ns": cutoff_ns,
        "cutoff_dataset": cutoff_dataset,
        # Each dataset's newest bar in the array file it was given: pretrain.refresh counts from them.
        "newest_bars_ns": {name: newest for name, newest in newest_bars.items() if newest is not None},
        "bars": bars,
        "scores": scores,
        "history": result.history,
        "settings": {key: value for key, value in settings.items() if key != "settings_sha256"},
        "made_at": time.time(),
    }
    checkpoint = {
        "kind": KIND,
        "state_dict": on_cpu(result.model.state_dict()),
        "model_hparams": model_hparams,
        "train_hparams": train_hparams,
        "feature_names": list(reference.feature_names),
        "target": reference.target,
        "horizons": list(reference.horizons or (reference.horizon,)),
        "lineage_json": json.dumps(lineage, sort_keys=True),
    }
    log(
        f"pretrain: best epoch {result.best_epoch} of {result.epochs_run}, val_loss {evaluated.val_loss:.5f} vs naive "
        f"{evaluated.naive_val_loss:.5f} (skill {evaluated.skill:+.4f})"
    )
    return checkpoint, lineage


def left_out_text(left_out: dict[str, str]) -> str:
    """The datasets left out and why, for the one line of a pretraining that cannot run."""
    return "".join(f"; {name} left out: {why}" for name, why in sorted(left_out.items()))
