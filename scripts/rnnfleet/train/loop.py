"""The training loop: device-agnostic, whole dataset resident on the device, early stopping.

What it promises: train() trains a model on a dataset's training windows (on_device puts them
on the device once), early-stops on its validation windows and returns what training made
(Trained: the best epoch's weights and optimizer state, the history, the best epoch's
validation pass), nothing else: the baseline, the test outputs, the calibration and the
scores are the evaluation's (rnnfleet.train.evaluate), after it. It reads no test window.
Its settings are one LoopSettings, typed once from the `train:` section; a variant (an
update's epochs and learning rate, a refit's epochs) is a dataclasses.replace of it.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from rnnfleet.errors import UserError, log, one_line
from rnnfleet.faults import pause_point
from rnnfleet.heads import Heads, heads_of_settings, pinball, with_outputs
from rnnfleet.precision import resolve_amp
from rnnfleet.prep.arrays import PreparedArrays
from rnnfleet.prep.gaps import WindowNumbers, window_numbers
from rnnfleet.prep.targets import TARGETS, Target
from rnnfleet.train.models import build_model

AMP_DTYPES = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}
PROGRESS_EVERY_SECONDS = 30.0
EVAL_BATCH = 2048


@dataclass(frozen=True)
class LoopSettings:
    """The training settings the loop reads, typed once (LoopSettings.of the `train:` section).
    The section's dict stays where it is recorded (the model file, the fingerprints)."""

    seq_len: int
    batch_size: int
    lr: float  # Adam's learning rate
    epochs: int  # at most
    patience: int  # early stop after this many epochs without a better validation loss
    seed: int
    amp: str = "auto"  # train.amp, as given (precision.resolve_amp reads it for a device)
    quantiles: tuple[float, ...] = ()  # train.quantiles; () for point forecasts

    @classmethod
    def of(cls, train: Mapping) -> LoopSettings:
        """The settings of a `train:` section (its other keys are left to their readers);
        KeyError for a missing seq_len, batch_size, lr, epochs, patience or seed."""
        return cls(
            seq_len=int(train["seq_len"]),
            batch_size=int(train["batch_size"]),
            lr=float(train["lr"]),
            epochs=int(train["epochs"]),
            patience=int(train["patience"]),
            seed=int(train["seed"]),
            amp=train.get("amp", "auto"),
            quantiles=tuple(float(q) for q in train.get("quantiles") or ()),
        )


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
    target's own (rnnfleet.prep.targets) over every horizon, or the pinball loss over every
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


def point_of(outputs: torch.Tensor, heads: Heads) -> torch.Tensor:
    """The point forecasts among outputs: themselves for one forecast, else (batch, horizons)."""
    return outputs if heads.single else outputs[..., heads.point]


class Evaluation(NamedTuple):
    loss: float  # mean, as training measures it: over every window and head
    hit_share: float  # share of point forecasts on the target's side of 0 / 0.5
    outputs: np.ndarray  # float32, as window_outputs gives them: what the calibration reads


@torch.no_grad()
def evaluate_windows(
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
    """Training, validation and test window numbers: those that span no gap (rnnfleet.prep.gaps)."""
    return window_numbers(arrays.rows, arrays.split, arrays.gap_bars, seq_len, arrays.horizon, arrays.warmup)


@dataclass(frozen=True)
class StartState:
    """Where an update starts (rnnfleet.train.updating): the previous model's weights and optimizer
    state; it trains only on the training windows ending at or after from_row. A fit from the
    fleet's pretrained model (rnnfleet.train.fleet_start) has its weights, no optimizer state (a
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


@dataclass(frozen=True)
class Parts:
    """A dataset's windows on the device, as the loop and the evaluation read them: window
    w covers feature rows w .. w + seq_len - 1 and its target is targets[w]; the usable
    window numbers of each part (rnnfleet.prep.gaps: none spans a gap); the test numbers stay on
    the CPU, read by the evaluation alone."""

    windows: torch.Tensor
    targets: torch.Tensor
    train: torch.Tensor  # every usable training window (an update trains on the latest only)
    val: torch.Tensor
    test: np.ndarray
    heads: Heads
    target: Target
    amp_dtype: torch.dtype | None
    input_size: int
    seq_len: int
    seconds: float  # what putting them on the device took

    @property
    def validating(self) -> bool:
        """False for a re-fit on all rows: every epoch runs, the last is kept."""
        return len(self.val) > 0


def on_device(arrays: PreparedArrays, settings: LoopSettings, device: torch.device) -> Parts:
    """The arrays' windows on `device` (moved there once) with their heads and precision."""
    started = time.perf_counter()
    seq_len = settings.seq_len
    features = torch.from_numpy(arrays.features).to(device)
    targets = torch.from_numpy(arrays.targets).to(device)
    numbers = usable_windows(arrays, seq_len)
    return Parts(
        windows=window_view(features, seq_len),
        targets=targets[seq_len - 1 :],
        train=torch.from_numpy(numbers.train).to(device),
        val=torch.from_numpy(numbers.val).to(device),
        test=numbers.test,
        heads=heads_of_arrays(arrays, settings),
        target=TARGETS[arrays.target],
        amp_dtype=AMP_DTYPES[resolve_amp(settings.amp, device)],
        input_size=features.shape[1],
        seq_len=seq_len,
        seconds=time.perf_counter() - started,
    )


@dataclass
class Trained:
    """What training made, and nothing else."""

    model: nn.Module  # holds the best-validation weights, in eval mode
    heads: Heads  # what its outputs are (rnnfleet.heads)
    best_epoch: int
    epochs_run: int
    history: list[dict]
    # The training loss on the validation windows at the best epoch, which early stopping
    # compares (its name: objective_key); NaN without validation windows.
    val_objective: float
    # The best epoch's validation pass (its outputs calibrate the intervals: no pass of
    # their own); None without validation windows.
    best_pass: Evaluation | None
    optimizer_state: dict | None  # the optimizer's state at the best epoch (an update starts from it), on the CPU
    start_val_loss: float | None  # an update: the validation loss of the weights it started from
    train_seconds: float
    setup_seconds: float  # model, optimizer and data on the device, before the first step


def model_and_optimizer(
    parts: Parts, model_hparams: dict, lr: float, start: StartState | None
) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The model on the parts' device and its Adam optimizer at learning rate lr: freshly
    built (random weights from torch's seeded generator), or from a start's weights and
    optimizer state (its learning rate replaced by lr)."""
    model = build_model(with_outputs(model_hparams, parts.heads), parts.input_size, parts.seq_len)
    model = model.to(parts.targets.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    if start is not None:
        model.load_state_dict(start.weights)
        if start.optimizer_state is not None:
            optimizer.load_state_dict(start.optimizer_state)
        for group in optimizer.param_groups:
            group["lr"] = lr
    return model, optimizer


class Step(NamedTuple):
    """What one optimizer step uses besides the model and the batch."""

    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    loss_function: Callable


def one_epoch(model: nn.Module, parts: Parts, order: torch.Tensor, step: Step, epoch: int, batch_size: int) -> float:
    """One pass over the training windows numbered `order`, in that order, a step a batch:
    their mean training loss (summed on the device: no sync per step). A long epoch logs
    where it is every PROGRESS_EVERY_SECONDS."""
    device, heads = parts.targets.device, parts.heads
    model.train()
    started = last_progress = time.perf_counter()
    n_batches = math.ceil(len(order) / batch_size)
    loss_sum = torch.zeros((), device=device)
    for batch_number, first in enumerate(range(0, len(order), batch_size), 1):
        batch = order[first : first + batch_size]
        with _autocast(device, parts.amp_dtype):
            predictions = outputs_of(model, parts.windows[batch], heads)
        loss = step.loss_function(predictions, parts.targets[batch])
        step.optimizer.zero_grad(set_to_none=True)
        step.scaler.scale(loss).backward()
        step.scaler.step(step.optimizer)
        step.scaler.update()
        loss_sum += loss.detach() * len(batch)
        if time.perf_counter() - last_progress > PROGRESS_EVERY_SECONDS:
            last_progress = time.perf_counter()
            log(progress_line(epoch, batch_number, n_batches, last_progress - started, batch_size))
    return loss_sum.item() / len(order)


def train(parts: Parts, model_hparams: dict, settings: LoopSettings, start: StartState | None = None) -> Trained:
    """Train on the training windows; early-stop on (and keep the best epoch of) the
    validation windows. Windows that span a gap are left out. Without validation windows
    (a re-fit on all rows) every epoch runs and the last is kept. From a start (an update):
    the same loop from its weights and optimizer state, on its windows only, the start
    itself being epoch 0 (kept when no epoch improves on it)."""
    return to_the_end(epochs_of_training(parts, model_hparams, settings, start))


class EpochEnd(NamedTuple):
    """Where a training stands after an epoch that did not end it."""

    epoch: int
    best_val_objective: float  # the best epoch's so far (NaN without validation windows)


def epochs_of_training(
    parts: Parts, model_hparams: dict, settings: LoopSettings, start: StartState | None = None
) -> Generator[EpochEnd, None, Trained]:
    """train() an epoch at a time: an EpochEnd after each epoch that does not end the
    training, then Trained as the generator's value. Several trainings can so run in turns
    (the settings search scores a trial's datasets epoch by epoch); each run alone is train()."""
    entered = time.perf_counter()
    device, heads, target, amp_dtype = parts.targets.device, parts.heads, parts.target, parts.amp_dtype
    batch_size, lr = settings.batch_size, settings.lr
    torch.manual_seed(settings.seed)
    generator = torch.Generator(device=device).manual_seed(settings.seed)
    windows, window_targets, val_numbers = parts.windows, parts.targets, parts.val
    train_numbers = parts.train
    if start is not None:
        train_numbers = train_numbers[train_numbers + (parts.seq_len - 1) >= start.from_row]
    n_train = len(train_numbers)
    validating = parts.validating

    model, optimizer = model_and_optimizer(parts, model_hparams, lr, start)
    loss_function = loss_of(heads, target, device)
    objective = objective_key(heads)
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype is torch.float16)
    best_val_loss, best_epoch, best_state, best_optimizer, history = math.inf, 0, None, None, []
    best_pass = start_val_loss = None
    if start is not None and validating:
        best_pass = evaluate_windows(model, windows, window_targets, amp_dtype, target, val_numbers, heads)
        start_val_loss = best_val_loss = best_pass.loss
        best_state, best_optimizer = on_cpu(model.state_dict()), on_cpu(optimizer.state_dict())
        log(f"epoch   0  val_{objective} {start_val_loss:.5f}  (the weights it started from)")
    started = time.perf_counter()

    for epoch in range(1, settings.epochs + 1):
        epoch_started = time.perf_counter()
        order = train_numbers[torch.randperm(n_train, device=device, generator=generator)]
        train_loss = one_epoch(model, parts, order, Step(optimizer, scaler, loss_function), epoch, batch_size)
        val_pass = (
            evaluate_windows(model, windows, window_targets, amp_dtype, target, val_numbers, heads)
            if validating
            else None
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
        elif epoch - best_epoch >= settings.patience:
            log(f"early stop: no val_{objective} improvement for {settings.patience} epochs")
            break
        if epoch < settings.epochs:
            yield EpochEnd(epoch, best_val_loss)

    model.load_state_dict(best_state)
    model.eval()
    return Trained(
        model=model,
        heads=heads,
        best_epoch=best_epoch,
        epochs_run=len(history),
        history=history,
        val_objective=best_val_loss,
        best_pass=best_pass,
        optimizer_state=best_optimizer,
        start_val_loss=start_val_loss,
        train_seconds=time.perf_counter() - started,
        setup_seconds=parts.seconds + started - entered,
    )


def to_the_end(steps: Generator[EpochEnd, None, Trained]) -> Trained:
    """The value of an epochs_of_training generator run to its end."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value


def heads_of_arrays(arrays: PreparedArrays, settings: LoopSettings) -> Heads:
    """The heads of a model of these arrays (their horizons) and train.quantiles."""
    return heads_of_settings(
        {"horizons": list(arrays.all_horizons), "quantiles": list(settings.quantiles)},
        TARGETS[arrays.target],
    )


def all_rows_train(arrays: PreparedArrays) -> PreparedArrays:
    """The arrays with every row in the training part: no validation or test part."""
    rows = arrays.rows
    return replace(arrays, train_end=rows, val_start=rows, val_end=rows, test_start=rows)


def refit_on_all_rows(
    arrays: PreparedArrays,
    model_hparams: dict,
    settings: LoopSettings,
    device: torch.device,
    epochs: int,
    start: StartState | None = None,
) -> Trained:
    """The production model of `evaluate.production: refit`: the same hyper-parameters and
    seed trained for `epochs` epochs (the scored model's best epoch) on every window of the
    dataset, test part included, without early stopping. The normalisation stays the
    training part's (the array file's), so forecasts see the inputs training saw."""
    refit = replace(settings, epochs=epochs)
    return train(on_device(all_rows_train(arrays), refit, device), model_hparams, refit, start)
