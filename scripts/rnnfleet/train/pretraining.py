"""The fleet's pretrained model (rule pretrain, `train.init: fleet`): one model of the
configured builder trained on the bars of every dataset it serves, and the start it gives
each dataset's own training.

What it promises:
- No look-ahead across datasets. The cutoff is the earliest bar, among the datasets served,
  that follows a training part (the first bar of the embargo before its validation part:
  validation start less the embargo). The pretraining reads only windows whose inputs and
  targets lie strictly before it, and the model file records the cutoff and, per dataset,
  the first and last bar its windows touched.
- Bounded memory at any fleet size: per dataset at most pretrain.train_windows training and
  pretrain.val_windows validation windows, read as row slices of the array file (the
  features are memory-mapped, never loaded whole). Each dataset keeps its own
  normalisation, as its own training will.
- Its early stopping uses each dataset's latest windows before the cutoff (val_windows of
  them, an embargo before them): never a bar at or after the cutoff.
- The file (torch.save of tensors and plain values, written atomically) loads with
  weights_only=True; beside it a JSON file holds the same lineage, which the workflow reads
  while parsing (no torch there) to keep the datasets it serves frozen: a dataset added
  later starts from it without re-running it (rules/pretrain.smk).
- fleet_start() decides, per dataset, whether its training may start from it: only when
  every bar the pretraining saw precedes that dataset's own first embargo bar and the model
  is the same (builder, settings, features, target, heads); otherwise it trains from
  scratch and says why in one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rnnfleet.bars.joining import file_sha256
from rnnfleet.errors import ERROR_PREFIX
from rnnfleet.prep.arrays_file import UNREADABLE, ArraysHead, npz_rows, read_head

# The folder of the fleet's files under paths.models: a dataset name never starts with a
# dot (rnnfleet.bars.discovery.DATASET_NAME), so no dataset's model can clash with them.
FLEET_FOLDER = ".fleet"
MODEL_NAME = "pretrained.pt"
LINEAGE_NAME = "pretrained.json"
KIND = "rnnfleet fleet pretrained model"
# A dataset with few bars before the cutoff validates on at most this share (1/VAL_SHARE) of them.
VAL_SHARE = 4
# Train settings that say how a dataset's own fit starts, not what the pretraining learns.
START_KEYS = ("init", "finetune_lr", "compare_init")
# Pretrain settings that say when it is redone (rnnfleet.workflow.pretrain_plan), not what it learns.
WHEN_KEYS = ("refresh",)


def pretrained_paths(models_folder: str) -> tuple[str, str]:
    """(the pretrained model file, its lineage JSON) under paths.models."""
    folder = f"{models_folder}/{FLEET_FOLDER}"
    return f"{folder}/{MODEL_NAME}", f"{folder}/{LINEAGE_NAME}"


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


def pretrain_settings_of(config: dict) -> dict:
    """pretrain_settings() of a complete configuration, with their fingerprint
    (settings_sha256): what the pretrain job gets and its lineage records."""
    from rnnfleet.settings import preprocess_settings, train_hyper_parameters

    settings = pretrain_settings(
        config["model"],
        train_hyper_parameters(config),
        config["columns"],
        config["pretrain"],
        preprocess_settings(config),
    )
    return {**settings, "settings_sha256": settings_fingerprint(settings)}


def frozen_membership(lineage_path: str, fingerprint: str, datasets: list[str]) -> tuple[list[str], bool]:
    """(the datasets the pretraining serves, whether they are frozen): those its lineage file
    names (still present) when it was made with these settings; else every dataset, not frozen."""
    try:
        with open(lineage_path) as handle:
            lineage = json.load(handle)
    except (OSError, ValueError):
        return list(datasets), False
    if not isinstance(lineage, dict) or lineage.get("settings_sha256") != fingerprint:
        return list(datasets), False
    present = set(datasets)
    return [name for name in lineage.get("datasets", []) if name in present], True


def fleet_members(datasets: list[str], arrays: list[str], logs: list[str], ready: list[str]) -> dict:
    """What the pretrain job is given (rules/pretrain.smk, from the inputs it runs with): of the
    datasets it serves (their array files and preprocess logs, in the same order), {"arrays":
    {dataset: array file} of those whose array file is among its inputs (ready), "left_out":
    {dataset: why} of the others: the job making their array file failed
    (rnnfleet.hooks.past_failed_inputs), in the words of its log's last ERROR line."""
    from rnnfleet.errors import last_marked_line

    ready_files = {str(path) for path in ready}
    members: dict = {"arrays": {}, "left_out": {}}
    for name, path, log_path in zip(datasets, arrays, logs, strict=True):
        if path in ready_files:
            members["arrays"][name] = path
            continue
        line = last_marked_line(log_path) or ""
        members["left_out"][name] = "its preprocess failed" + (
            f": {line.removeprefix('ERROR: ')}" if line else f" (see {log_path})"
        )
    return members


# ---- the cutoff and the windows read ---------------------------------------------------------


def first_embargo_time(head: ArraysHead) -> int | None:
    """The time (ns) of the dataset's first bar after its training part (validation start less
    the embargo); None when the array file records no bar times."""
    if len(head.row_times) <= head.train_end:
        return None
    return int(head.row_times[head.train_end])


def iso(nanoseconds: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(nanoseconds / 1e9, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


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
    # First pass: each dataset's first embargo bar (one head in memory at a time: the bar
    # times of a thousand long histories would not be bounded by the windows read).
    left_out = dict(left_out or {})
    embargo_times, newest_bars = {}, {}
    for name, path in arrays_paths.items():
        try:
            head = read_head(path)
            embargo_times[name] = first_embargo_time(head)
            newest_bars[name] = int(head.row_times[-1]) if len(head.row_times) else None
        except UNREADABLE as error:
            left_out[name] = f"its array file {path} does not read ({error})"
            continue
        if embargo_times[name] is None:
            left_out[name] = "its array file records no bar times (written by an older rnnfleet): re-run preprocess"
    timed = [name for name in arrays_paths if name not in left_out]
    if not timed:
        raise UserError("pretrain: no dataset ready to pretrain on" + left_out_text(left_out))
    cutoff_dataset = min(timed, key=lambda name: embargo_times[name])
    cutoff_ns = embargo_times[cutoff_dataset]
    reference = read_head(arrays_paths[cutoff_dataset])
    log(
        f"pretrain: {len(timed)} dataset(s); cutoff {iso(cutoff_ns)} (the first bar after {cutoff_dataset}'s "
        "training part): only bars before it are read"
    )
    train_rows, val_rows, bars = FleetRows([], [], []), FleetRows([], [], []), {}
    for name in timed:
        try:
            head = read_head(arrays_paths[name])
        except UNREADABLE as error:
            left_out[name] = f"its array file {arrays_paths[name]} does not read ({error})"
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
            left_out[name] = f"its array file {path} does not read ({error})"
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
        "newest_bars_ns": {name: newest_bars[name] for name in timed},
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


# ---- a dataset's start -------------------------------------------------------------------------


def load_pretrained(path: str) -> dict:
    """The pretrained model file's contents (weights_only=True: no code runs) and its lineage."""
    import torch

    from rnnfleet.errors import UserError

    try:
        contents = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - any failure to load is one line naming the file
        raise UserError(f"{path}: the fleet's pretrained model does not load ({error}); re-run rule pretrain") from None
    if not isinstance(contents, dict) or contents.get("kind") != KIND:
        raise UserError(f"{path}: not a pretrained model file of rnnfleet; re-run rule pretrain")
    return {**contents, "lineage": json.loads(contents["lineage_json"])}


@dataclass(frozen=True)
class FleetStart:
    """What a dataset's training knows of the fleet's pretrained model: its weights (None:
    this dataset trains from scratch), its digest and path, and the one line that says which."""

    weights: dict | None
    sha256: str
    path: str
    note: str


def fleet_start(path: str, arrays, model_hparams: dict, train_hparams: dict) -> FleetStart:
    """Whether this dataset's fit may start from the pretrained model at path (see the module
    doc), with the one line its log and table give."""
    contents = load_pretrained(path)
    lineage, sha256 = contents["lineage"], file_sha256(path)
    own_start = int(arrays.row_times[arrays.train_end]) if len(arrays.row_times) > arrays.train_end else None
    wanted = {key: value for key, value in train_hparams.items() if key not in (*START_KEYS, "device")}
    differs = [
        what
        for what, mine, theirs in (
            ("model", model_hparams, contents["model_hparams"]),
            ("train settings", wanted, contents["train_hparams"]),
            ("features", list(arrays.feature_names), contents["feature_names"]),
            ("target", arrays.target, contents["target"]),
            ("horizons", list(arrays.all_horizons), contents["horizons"]),
        )
        if json.dumps(mine, sort_keys=True, default=str) != json.dumps(theirs, sort_keys=True, default=str)
    ]
    if own_start is None:
        note = "from scratch: its array file records no bar times to check the pretraining's cutoff against"
    elif own_start < int(lineage["cutoff_ns"]):
        note = (
            f"from scratch: its validation (less the embargo) starts at {iso(own_start)}, before the fleet "
            f"pretraining's cutoff {lineage['cutoff']}: the pretrained model saw bars of that period"
        )
    elif differs:
        note = f"from scratch: its {', '.join(differs)} differ from the fleet's pretrained model's"
    else:
        note = f"from the fleet's pretrained model {path} (sha256 {sha256[:12]}, cutoff {lineage['cutoff']})"
        return FleetStart(contents["state_dict"], sha256, str(Path(path)), note)
    return FleetStart(None, sha256, str(Path(path)), note)


def failed_fleet_start(path: str, log_path: str | None) -> FleetStart:
    """A dataset's start when the fleet's pretrain job failed (its model file is not there):
    from scratch, with the pretrain log's last error line as the reason."""
    errors = []
    if log_path and os.path.exists(log_path):
        with open(log_path, errors="replace") as log_file:
            errors = [line.strip() for line in log_file if line.startswith(ERROR_PREFIX)]
    why = errors[-1].removeprefix(ERROR_PREFIX) if errors else f"no error line in {log_path}"
    return FleetStart(None, "", str(Path(path)), f"from scratch: the fleet's pretraining failed: {why}")


# ---- train.compare_init: the fleet's start against scratch, per dataset and for the fleet -----

# The metrics (and table columns) of a comparison: the kept model's start is `init`.
COMPARE_COLUMNS = (
    "init_fleet_test_skill",  # the fit from the pretrained model
    "init_scratch_test_skill",  # the fit from scratch
    "init_pretrained_test_skill",  # the pretrained model itself: one model for all, a forward pass
    "init_dm_stat",  # Diebold-Mariano on the test windows, fleet start - scratch (< 0: the fleet start's loss is lower)
    "init_dm_pvalue",
    "init_fleet_seconds",
    "init_scratch_seconds",
    "init_verdict",  # over the fleet: the same correction as fleet_verdict (the `fleet:` settings)
    "init_qvalue",
)
FLEET_START_BETTER, FLEET_START_WORSE, NO_DIFFERENCE = (
    "the fleet's start beat scratch (fleet-corrected)",
    "the fleet's start was worse than scratch (fleet-corrected)",
    "no difference after the fleet's correction",
)


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


def init_verdicts(rows: list[dict], method: str, fdr: float) -> list[dict]:
    """The table's rows with init_qvalue and init_verdict over the datasets compared (status
    ok, an init_dm_pvalue): their p-values adjusted as fleet_verdict's (rnnfleet.scores.multiple_testing)."""
    import math

    from rnnfleet.scores.multiple_testing import adjusted_p_values, as_number

    p_values = [as_number(row.get("init_dm_pvalue")) if row.get("status", "ok") == "ok" else math.nan for row in rows]
    if all(math.isnan(value) for value in p_values):
        return rows
    filled = []
    for row, q_value in zip(rows, adjusted_p_values(p_values, method), strict=True):
        statistic = as_number(row.get("init_dm_stat"))
        verdict = ""
        if not math.isnan(q_value) and not math.isnan(statistic):
            verdict = NO_DIFFERENCE
            if q_value <= fdr:
                verdict = FLEET_START_BETTER if statistic < 0 else FLEET_START_WORSE
        filled.append({**row, "init_qvalue": "" if math.isnan(q_value) else q_value, "init_verdict": verdict})
    return filled


def init_headline(rows: list[dict]) -> str:
    """The report's first line with train.compare_init (rnnfleet.report.start_page.write_start_page): how
    often the fleet's start beat scratch after the fleet's correction, was worse, how often
    one model for all beat both, and the fits' training time; '' without a comparison."""
    from rnnfleet.scores.multiple_testing import as_number

    compared = [row for row in rows if row.get("init_verdict")]
    if not compared:
        return ""
    better = sum(row["init_verdict"] == FLEET_START_BETTER for row in compared)
    worse = sum(row["init_verdict"] == FLEET_START_WORSE for row in compared)
    one_model = sum(
        as_number(row.get("init_pretrained_test_skill"))
        > max(as_number(row.get("init_fleet_test_skill")), as_number(row.get("init_scratch_test_skill")))
        for row in compared
    )
    seconds = {
        start: sum(as_number(row.get(f"init_{start}_seconds")) for row in compared) for start in ("fleet", "scratch")
    }
    return (
        f"**The fleet's start.** It beat scratch on {better} of {len(compared)} datasets after the fleet's "
        f"correction, was worse on {worse}; one model for all beat both on {one_model}; training time "
        f"{seconds['fleet']:.0f} s from the fleet's start against {seconds['scratch']:.0f} s from scratch "
        "(the pretraining not included)."
    )
