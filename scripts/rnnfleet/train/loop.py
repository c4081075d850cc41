"""The training loop: device-agnostic, whole dataset resident on the device, early stopping."""

from __future__ import annotations

import contextlib
import copy
import math
import platform
import time
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from rnnfleet import intervals
from rnnfleet.checkpoint import FORMAT_VERSION
from rnnfleet.data import PreparedArrays
from rnnfleet.errors import UserError, log, one_line
from rnnfleet.evaluation import window_losses
from rnnfleet.faults import pause_point
from rnnfleet.gaps import WindowNumbers, window_numbers
from rnnfleet.heads import Heads, heads_of_settings, pinball
from rnnfleet.model import DEFAULT_BUILDER, build_model
from rnnfleet.plugins import imported_sha256
from rnnfleet.precision import resolve_amp
from rnnfleet.targets import TARGETS, Target

AMP_DTYPES = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}
PROGRESS_EVERY_SECONDS = 30.0
EVAL_BATCH = 2048


@dataclass
class TrainingResult:
    model: nn.Module  # holds the best-validation weights
    # The first horizon's point forecast (the median with quantiles) on the validation
    # windows, in the target's own loss: the measure of the test period's test_loss.
    val_loss: float
    naive_val_loss: float  # the target's naive baseline (rnnfleet.targets) on the same windows
    best_epoch: int
    epochs_run: int
    train_seconds: float
    setup_seconds: float  # model, optimizer and data on the device, before the first step
    history: list[dict] = field(default_factory=list)
    val_accuracy: float | None = None  # classification targets only
    naive_val_accuracy: float | None = None
    # The baseline as a model output (rnnfleet.targets.Target.naive_output); with heads, one
    # per horizon and quantile (horizons, quantiles or 1): quantiles of the training targets.
    naive_output: float | np.ndarray = 0.0
    # The test windows (rnnfleet.gaps.WindowNumbers.test) and the best model's outputs on
    # them (heads.shaped), computed once training and the epoch choice are over.
    test_numbers: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    test_outputs: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    # The optimizer's state at the best epoch (an update starts from it), on the CPU.
    optimizer_state: dict | None = None
    start_val_loss: float | None = None  # an update: the validation loss of the weights it started from
    # The best model's sorted absolute errors on the validation windows, in the scaled
    # target's units: its forecast intervals' calibration (rnnfleet.intervals). Empty for
    # classification targets and fits without a validation part. With heads, one row per
    # horizon (horizons, n); with quantiles, the conformity scores of each quantile pair
    # (horizons, pairs, n) (rnnfleet.intervals.pair_scores).
    calibration: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    heads: Heads = Heads((1,))  # what the outputs are (rnnfleet.heads); the default: one point forecast
    # The training loss on the validation windows at the best epoch, which early stopping
    # compares (its name: objective_key), and the baseline's; for one point forecast the
    # same as val_loss and naive_val_loss.
    val_objective: float = math.nan
    naive_val_objective: float = math.nan

    @property
    def skill(self) -> float:
        return 1.0 - self.val_loss / self.naive_val_loss if self.naive_val_loss > 0 else float("nan")


def window_view(features: torch.Tensor, seq_len: int) -> torch.Tensor:
    """(rows, F) -> (rows - seq_len + 1, seq_len, F) view; window w covers bars w .. w+seq_len-1.
    No copy: indexing it with a batch of window numbers gathers just that batch."""
    return features.unfold(0, seq_len, 1).transpose(1, 2)


SINGLE = Heads((1,))


def outputs_of(model: nn.Module, windows: torch.Tensor, heads: Heads = SINGLE) -> torch.Tensor:
    """Float outputs as heads.shaped gives them: (batch,) for one forecast (a builder's model
    may return (batch, 1)), else (batch, horizons, quantiles or 1)."""
    return heads.shaped(model(windows).float())


def loss_of(heads: Heads, target: Target, device: torch.device):
    """The training loss of these heads, as loss(outputs, targets, reduction="mean"): the
    target's own (rnnfleet.targets) over every horizon, or the pinball loss over every
    horizon and quantile; targets (batch,) or (batch, horizons)."""
    if heads.single:
        return target.loss
    if not heads.quantiles:
        return lambda outputs, targets, reduction="mean": target.loss(
            outputs[..., 0], targets.reshape(len(targets), -1), reduction=reduction
        )
    quantiles = torch.tensor(heads.quantiles, device=device)
    return lambda outputs, targets, reduction="mean": pinball(
        outputs, targets.reshape(len(targets), -1), quantiles, reduction
    )


def objective_key(heads: Heads) -> str:
    """What the training loss is called in the history and the metrics (train_<key>,
    val_<key>): "loss" for one point forecast (the val_loss of the scores), "pinball" for
    quantile heads, "mean_loss" for the target's loss averaged over several horizons."""
    if heads.single:
        return "loss"
    return "pinball" if heads.quantiles else "mean_loss"


def objective_text(heads: Heads, target: Target) -> str:
    """The training loss in words, e.g. 'pinball loss (scaled), mean over horizons 1, 5 and
    quantiles 0.1, 0.5, 0.9': the loss curve's axis."""
    if heads.single:
        return target.loss_name
    horizons = ", ".join(map(str, heads.horizons))
    if heads.quantiles:
        quantiles = ", ".join(f"{q:g}" for q in heads.quantiles)
        return f"pinball loss (scaled), mean over horizons {horizons} and quantiles {quantiles}"
    return f"{target.loss_name}, mean over horizons {horizons}"


def first_point_losses(
    outputs: np.ndarray, naive_value: float | np.ndarray, targets: np.ndarray, heads: Heads, target: Target
) -> tuple[float, float]:
    """(model, baseline) mean loss of the first horizon's point forecast over windows whose
    outputs (outputs_of's) and targets these are, in the target's own loss, computed as the
    test period's (rnnfleet.evaluation.window_losses)."""
    point = outputs if heads.single else outputs[:, 0, heads.point]
    naive = naive_value if heads.single else np.asarray(naive_value)[0, heads.point]
    actual = targets.reshape(len(targets), -1)[:, 0]
    losses = window_losses(point, actual, target.classification)
    naive_losses = window_losses(np.full(len(actual), naive, np.float64), actual, target.classification)
    return float(losses.mean()), float(naive_losses.mean())


def point_of(outputs: torch.Tensor, heads: Heads) -> torch.Tensor:
    """The point forecasts among outputs: themselves for one forecast, else (batch, horizons)."""
    return outputs if heads.single else outputs[..., heads.point]


class Evaluation(NamedTuple):
    loss: float  # mean, as training measures it: over every window and head
    hit_share: float  # share of point forecasts on the target's side of 0 / 0.5
    outputs: np.ndarray  # float32, as window_outputs gives them: what the calibration reads


@torch.no_grad()
def evaluate(
    model: nn.Module,
    windows: torch.Tensor,
    targets: torch.Tensor,
    amp_dtype,
    target: Target,
    numbers: torch.Tensor,
    heads: Heads = SINGLE,
) -> Evaluation:
    """The model over the windows (and their targets) numbered `numbers`, in one pass."""
    model.eval()
    loss = loss_of(heads, target, targets.device)
    loss_sum = torch.zeros((), device=targets.device)
    hits = torch.zeros((), device=targets.device)
    outputs = []
    for start in range(0, len(numbers), EVAL_BATCH):
        batch = numbers[start : start + EVAL_BATCH]
        with _autocast(targets.device, amp_dtype):
            predictions = outputs_of(model, windows[batch], heads)
        batch_targets = targets[batch]
        loss_sum += loss(predictions, batch_targets, reduction="sum")
        points = point_of(predictions, heads)
        hits += ((points > 0) == (batch_targets.reshape(points.shape) > 0.5)).sum()
        outputs.append(predictions)
    return Evaluation(
        loss_sum.item() / (len(numbers) * heads.count),
        hits.item() / (len(numbers) * len(heads.horizons)),
        torch.cat(outputs).cpu().numpy() if outputs else no_outputs(heads),
    )


@torch.no_grad()
def window_outputs(
    model: nn.Module, windows: torch.Tensor, amp_dtype, numbers: torch.Tensor, heads: Heads = SINGLE
) -> np.ndarray:
    """float32 outputs (outputs_of) of the windows numbered `numbers`, on the CPU."""
    model.eval()
    outputs = []
    for start in range(0, len(numbers), EVAL_BATCH):
        with _autocast(windows.device, amp_dtype):
            outputs.append(outputs_of(model, windows[numbers[start : start + EVAL_BATCH]], heads).cpu())
    return torch.cat(outputs).numpy() if outputs else no_outputs(heads)


def no_outputs(heads: Heads) -> np.ndarray:
    """The outputs of no window, shaped as those of some."""
    return np.zeros((0,) if heads.single else (0, len(heads.horizons), max(1, len(heads.quantiles))), np.float32)


@contextlib.contextmanager
def _autocast(device: torch.device, amp_dtype):
    """Autocast to amp_dtype (None: float32). A kernel that refuses that precision on this
    device (oneDNN's LSTM in bfloat16 on a CPU without native bfloat16) is a UserError
    naming train.amp, not an internal error."""
    if amp_dtype is None:
        yield
        return
    try:
        with torch.autocast(device_type=device.type, dtype=amp_dtype):
            yield
    except RuntimeError as error:
        if "could not create a primitive" not in str(error):
            raise
        precision = {torch.bfloat16: "bf16", torch.float16: "fp16"}[amp_dtype]
        raise UserError(
            f"config key 'train.amp' = {precision!r}: {device} cannot run this model in {precision} "
            f"({one_line(error)}); allowed here: auto (uses {precision} only where the hardware computes it) or off"
        ) from None


def progress_line(epoch: int, batch_number: int, n_batches: int, seconds: float, batch_size: int) -> str:
    """Where a long epoch is: batches done, rate, and the time the rest should take."""
    seconds = max(seconds, 1e-9)
    seconds_left = seconds / batch_number * (n_batches - batch_number)
    return (
        f"  epoch {epoch}: batch {batch_number}/{n_batches} ({batch_number / n_batches:.0%}), "
        f"{batch_number * batch_size / seconds:,.0f} samples/s, ~{seconds_left:.0f}s left in this epoch"
    )


def usable_windows(arrays: PreparedArrays, seq_len: int) -> WindowNumbers:
    """Training, validation and test window numbers: those that span no gap (rnnfleet.gaps)."""
    return window_numbers(arrays.rows, arrays.split, arrays.gap_bars, seq_len, arrays.horizon, arrays.warmup)


@dataclass(frozen=True)
class StartState:
    """Where an update starts (rnnfleet.train.updating): the previous model's weights and optimizer
    state; it trains only on the training windows ending at or after from_row. A fit from the
    fleet's pretrained model (rnnfleet.pretraining) has its weights, no optimizer state (a
    fresh optimizer) and from_row 0."""

    weights: dict
    optimizer_state: dict | None
    from_row: int


def on_cpu(state):
    """A copy of a (nested) state dict with every tensor on the CPU."""
    if isinstance(state, torch.Tensor):
        return state.detach().cpu().clone()
    if isinstance(state, dict):
        return {key: on_cpu(value) for key, value in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(on_cpu(value) for value in state)
    return copy.copy(state)


def train_model(
    arrays: PreparedArrays,
    model_hparams: dict,
    train_hparams: dict,
    device: torch.device,
    start: StartState | None = None,
) -> TrainingResult:
    """Train on the training windows; early-stop on (and keep the best epoch of) the
    validation windows; then, with the best weights, compute the outputs on the test
    windows, which nothing before that step reads. Windows that span a gap are left out.
    Without validation windows (a re-fit on all rows) every epoch runs and the last is kept.
    From a start (an update): the same loop from its weights and optimizer state, on its
    windows only, the start itself being epoch 0 (kept when no epoch improves on it); the
    naive baseline still comes from every training window, as in a full fit."""
    entered = time.perf_counter()
    seq_len, batch_size = int(train_hparams["seq_len"]), int(train_hparams["batch_size"])
    amp_dtype = AMP_DTYPES[resolve_amp(train_hparams.get("amp", "auto"), device)]
    torch.manual_seed(int(train_hparams["seed"]))
    generator = torch.Generator(device=device).manual_seed(int(train_hparams["seed"]))

    features = torch.from_numpy(arrays.features).to(device)
    targets = torch.from_numpy(arrays.targets).to(device)
    windows, window_targets = window_view(features, seq_len), targets[seq_len - 1 :]
    numbers = usable_windows(arrays, seq_len)
    all_train_numbers, val_numbers = (torch.from_numpy(part).to(device) for part in (numbers.train, numbers.val))
    train_numbers = all_train_numbers
    if start is not None:
        train_numbers = all_train_numbers[all_train_numbers + (seq_len - 1) >= start.from_row]
    n_train = len(train_numbers)
    validating = len(val_numbers) > 0  # else a re-fit on all rows: every epoch runs, the last is kept

    target = TARGETS[arrays.target]
    heads = heads_of_arrays(arrays, train_hparams)
    model = build_model(with_outputs(model_hparams, heads), features.shape[1], seq_len).to(device)
    loss_function = loss_of(heads, target, device)
    objective = objective_key(heads)
    optimizer = torch.optim.Adam(model.parameters(), lr=float(train_hparams["lr"]))
    if start is not None:
        model.load_state_dict(start.weights)
        if start.optimizer_state is not None:
            optimizer.load_state_dict(start.optimizer_state)
        for group in optimizer.param_groups:
            group["lr"] = float(train_hparams["lr"])
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype is torch.float16)
    val_targets = window_targets[val_numbers]
    naive_value = naive_outputs(heads, target, window_targets[all_train_numbers])
    naive_output = naive_batch(naive_value, heads, val_targets)
    naive_val_objective = loss_function(naive_output, val_targets).item() if validating else math.nan
    best_val_loss, best_epoch, best_state, best_optimizer, history = math.inf, 0, None, None, []
    # The best epoch's validation pass: its outputs calibrate the intervals (no pass of their own).
    best_pass = start_val_loss = None
    if start is not None and validating:
        best_pass = evaluate(model, windows, window_targets, amp_dtype, target, val_numbers, heads)
        start_val_loss = best_val_loss = best_pass.loss
        best_state, best_optimizer = on_cpu(model.state_dict()), on_cpu(optimizer.state_dict())
        log(f"epoch   0  val_{objective} {start_val_loss:.5f}  (the weights it started from)")
    n_batches = math.ceil(n_train / batch_size)
    started = time.perf_counter()

    for epoch in range(1, int(train_hparams["epochs"]) + 1):
        epoch_started = last_progress = time.perf_counter()
        model.train()
        order = train_numbers[torch.randperm(n_train, device=device, generator=generator)]
        loss_sum = torch.zeros((), device=device)  # summed on the device: no sync per step
        for batch_number, start in enumerate(range(0, n_train, batch_size), 1):
            batch = order[start : start + batch_size]
            with _autocast(device, amp_dtype):
                predictions = outputs_of(model, windows[batch], heads)
            loss = loss_function(predictions, window_targets[batch])
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            loss_sum += loss.detach() * len(batch)
            if time.perf_counter() - last_progress > PROGRESS_EVERY_SECONDS:
                last_progress = time.perf_counter()
                log(progress_line(epoch, batch_number, n_batches, last_progress - epoch_started, batch_size))
        train_loss = loss_sum.item() / n_train
        val_pass = (
            evaluate(model, windows, window_targets, amp_dtype, target, val_numbers, heads) if validating else None
        )
        val_loss = val_pass.loss if val_pass else math.nan
        seconds = time.perf_counter() - epoch_started
        history.append(
            {"epoch": epoch, f"train_{objective}": train_loss, f"val_{objective}": val_loss, "seconds": seconds}
        )
        log(
            f"epoch {epoch:3d}  train_{objective} {train_loss:.5f}  val_{objective} {val_loss:.5f}  "
            f"{seconds:.2f}s  {n_train / seconds:,.0f} samples/s"
        )
        pause_point("epoch")
        if not math.isfinite(train_loss):
            raise FloatingPointError(f"training diverged at epoch {epoch} (train loss {train_loss})")
        if not validating or val_loss < best_val_loss:
            best_val_loss, best_epoch, best_pass = val_loss, epoch, val_pass
            best_state, best_optimizer = on_cpu(model.state_dict()), on_cpu(optimizer.state_dict())
        elif epoch - best_epoch >= int(train_hparams["patience"]):
            log(f"early stop: no val_{objective} improvement for {train_hparams['patience']} epochs")
            break

    model.load_state_dict(best_state)
    model.eval()
    accuracies = {}
    if target.classification and validating:
        accuracies["val_accuracy"] = best_pass.hit_share
        naive_points = point_of(naive_output, heads)
        naive_hits = (naive_points > 0) == (val_targets.reshape(naive_points.shape) > 0.5)
        accuracies["naive_val_accuracy"] = naive_hits.float().mean().item()
    test_outputs = window_outputs(model, windows, amp_dtype, torch.from_numpy(numbers.test).to(device), heads)
    val_loss, naive_val_loss = best_val_loss, naive_val_objective
    if validating and not heads.single:
        val_loss, naive_val_loss = first_point_losses(
            best_pass.outputs, naive_value, val_targets.cpu().numpy(), heads, target
        )
    calibration = np.zeros(0, dtype=np.float32)
    if validating and not target.classification:
        calibration = intervals.head_calibration(best_pass.outputs, val_targets.cpu().numpy(), heads)
    return TrainingResult(
        model=model,
        val_loss=val_loss,
        naive_val_loss=naive_val_loss,
        best_epoch=best_epoch,
        epochs_run=len(history),
        train_seconds=time.perf_counter() - started,
        setup_seconds=started - entered,
        history=history,
        **accuracies,
        naive_output=naive_value,
        test_numbers=numbers.test,
        test_outputs=test_outputs,
        optimizer_state=best_optimizer,
        start_val_loss=start_val_loss,
        calibration=calibration,
        heads=heads,
        val_objective=best_val_loss,
        naive_val_objective=naive_val_objective,
    )


def heads_of_arrays(arrays: PreparedArrays, train_hparams: dict) -> Heads:
    """The heads of a model of these arrays (their horizons) and train.quantiles."""
    return heads_of_settings(
        {"horizons": list(arrays.all_horizons), "quantiles": train_hparams.get("quantiles") or []},
        TARGETS[arrays.target],
    )


def with_outputs(model_hparams: dict, heads: Heads) -> dict:
    """The model's settings asking the builder for one output per head (rnnfleet.model);
    unchanged for a single forecast."""
    return model_hparams if heads.single else {**model_hparams, "outputs": heads.count}


def naive_outputs(heads: Heads, target: Target, train_targets: torch.Tensor) -> float | np.ndarray:
    """The naive baseline as outputs, from the training windows' targets: one number for a
    single forecast (Target.naive_output); else (horizons, quantiles or 1): each horizon's
    Target.naive_output, or with quantiles the training targets' empirical quantiles."""
    if heads.single:
        return target.naive_output(train_targets)
    columns = train_targets.reshape(len(train_targets), -1).double()
    if heads.quantiles:
        quantiles = torch.tensor(heads.quantiles, dtype=torch.float64, device=columns.device)
        return torch.quantile(columns, quantiles, dim=0).T.cpu().numpy()
    return np.array([[target.naive_output(column)] for column in columns.T])


def naive_batch(naive_value: float | np.ndarray, heads: Heads, like: torch.Tensor) -> torch.Tensor:
    """The naive outputs for as many windows as `like` (targets) holds, shaped as outputs_of's."""
    if heads.single:
        return torch.full_like(like, naive_value)
    value = torch.tensor(naive_value, dtype=torch.float32, device=like.device)
    return value.expand(len(like), *value.shape)


def all_rows_train(arrays: PreparedArrays) -> PreparedArrays:
    """The arrays with every row in the training part: no validation or test part."""
    rows = arrays.rows
    return replace(arrays, train_end=rows, val_start=rows, val_end=rows, test_start=rows)


def refit_on_all_rows(
    arrays: PreparedArrays,
    model_hparams: dict,
    train_hparams: dict,
    device: torch.device,
    epochs: int,
    start: StartState | None = None,
) -> TrainingResult:
    """The production model of `evaluate.production: refit`: the same hyper-parameters and
    seed trained for `epochs` epochs (the scored model's best epoch) on every window of the
    dataset, test part included, without early stopping. The normalisation stays the
    training part's (the array file's), so forecasts see the inputs training saw."""
    return train_model(all_rows_train(arrays), model_hparams, {**train_hparams, "epochs": epochs}, device, start)


def library_versions() -> dict:
    return {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "numpy": str(np.__version__),
    }


def build_checkpoint(
    dataset: str,
    result: TrainingResult,
    arrays: PreparedArrays,
    model_hparams: dict,
    train_hparams: dict,
    metrics: dict,
    columns: dict | None = None,
    product: str = "scored",
    lineage: dict | None = None,
) -> dict:
    """Everything needed to rebuild the model and use it on new bars (columns: the CSV's
    column names, as the config maps them); loads with weights_only=True. product: which
    model `result` is (evaluate.production: "scored", trained on the training part and
    early-stopped on validation, or "refit" on all rows); split and metrics are the scored
    model's in both cases, the scores the product descends from. plugin_sha256:
    the content hash of each user file the model and its features ran (rnnfleet.plugins:
    forecasts import such a file from the working folder only with that content).
    optimizer_state and lineage: what an update of this model starts from and checks
    (rnnfleet.train.updating; lineage None: none recorded, the model is never updated)."""
    return {
        "format": "rnnfleet",
        "format_version": FORMAT_VERSION,
        "dataset": dataset,
        "product": product,
        "state_dict": {key: value.detach().cpu() for key, value in result.model.state_dict().items()},
        "model_config": {
            "builder": DEFAULT_BUILDER,
            **with_outputs(model_hparams, result.heads),
            "input_size": int(arrays.features.shape[1]),
        },
        "train_config": dict(train_hparams),
        "normalisation": {
            "feature_mean": arrays.feature_mean.tolist(),
            "feature_std": arrays.feature_std.tolist(),
            # One per horizon with several (a list), as rnnfleet.data keeps them.
            "target_mean": np.asarray(arrays.target_mean).tolist(),
            "target_std": np.asarray(arrays.target_std).tolist(),
        },
        "features": {
            "definition": list(arrays.feature_definition),
            "left_out": list(arrays.features_left_out),  # default features the file could not give
            "names": list(arrays.feature_names),
            "warmup": arrays.warmup,
            "target": arrays.target,
            "horizon": arrays.horizon,
            # The heads (rnnfleet.heads): absent for a single point forecast.
            **(
                {"horizons": list(result.heads.horizons), "quantiles": list(result.heads.quantiles)}
                if not result.heads.single
                else {}
            ),
            "seq_len": int(train_hparams["seq_len"]),
            "columns": dict(columns or {}),
        },
        # How the training bars were read: forecasts read new bars the same way (rnnfleet.predict).
        # Absent from a model trained on an array file of an older rnnfleet.
        **(
            {"read": {"format": arrays.read_format, "timezone": arrays.timezone, "read_as": arrays.read_as}}
            if arrays.read_format
            else {}
        ),
        "plugin_sha256": plugin_hashes(arrays, model_hparams),
        # Feature rows of the array file; the test part (from test_start) never reached the
        # scored model's training (a refit's trained on every row).
        "split": {**arrays.split._asdict(), "rows": arrays.rows},
        "metrics": metrics,
        "versions": library_versions(),
        **({"optimizer_state": result.optimizer_state, "lineage": lineage} if lineage is not None else {}),
    }


def plugin_hashes(arrays: PreparedArrays, model_hparams: dict) -> dict[str, str]:
    """{user file: sha256} of the feature files (as preprocessing ran them) and the model's builder."""
    builder = str(model_hparams.get("builder", DEFAULT_BUILDER))
    return {**arrays.feature_sha256, **imported_sha256([builder])}


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
