"""The training loop: device-agnostic, whole dataset resident on the device, early stopping."""

from __future__ import annotations

import contextlib
import math
import platform
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from rnnfleet.data import FEATURE_NAMES, TARGET_NAME, PreparedArrays
from rnnfleet.faults import pause_point
from rnnfleet.model import SequenceRegressor, build_model
from rnnfleet.precision import resolve_amp

AMP_DTYPES = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}
PROGRESS_EVERY_SECONDS = 30.0
EVAL_BATCH = 2048


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class TrainingResult:
    model: SequenceRegressor  # holds the best-validation weights
    val_loss: float
    naive_val_loss: float
    best_epoch: int
    epochs_run: int
    train_seconds: float
    setup_seconds: float  # model, optimizer and data on the device, before the first step
    history: list[dict] = field(default_factory=list)

    @property
    def skill(self) -> float:
        return 1.0 - self.val_loss / self.naive_val_loss if self.naive_val_loss > 0 else float("nan")


def window_view(features: torch.Tensor, seq_len: int) -> torch.Tensor:
    """(rows, F) -> (rows - seq_len + 1, seq_len, F) view; window w covers bars w .. w+seq_len-1.
    No copy: indexing it with a batch of window numbers gathers just that batch."""
    return features.unfold(0, seq_len, 1).transpose(1, 2)


@torch.no_grad()
def evaluate(model: SequenceRegressor, windows: torch.Tensor, targets: torch.Tensor, amp_dtype) -> float:
    model.eval()
    loss_sum = torch.zeros((), device=targets.device)
    for start in range(0, len(targets), EVAL_BATCH):
        with _autocast(targets.device, amp_dtype):
            predictions = model(windows[start : start + EVAL_BATCH])
        loss_sum += F.mse_loss(predictions.float(), targets[start : start + EVAL_BATCH], reduction="sum")
    return loss_sum.item() / len(targets)


def _autocast(device: torch.device, amp_dtype):
    if amp_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=amp_dtype)


def progress_line(epoch: int, batch_number: int, n_batches: int, seconds: float, batch_size: int) -> str:
    """Where a long epoch is: batches done, rate, and the time the rest should take."""
    seconds = max(seconds, 1e-9)
    seconds_left = seconds / batch_number * (n_batches - batch_number)
    return (
        f"  epoch {epoch}: batch {batch_number}/{n_batches} ({batch_number / n_batches:.0%}), "
        f"{batch_number * batch_size / seconds:,.0f} samples/s, ~{seconds_left:.0f}s left in this epoch"
    )


def train_model(
    arrays: PreparedArrays, model_hparams: dict, train_hparams: dict, device: torch.device
) -> TrainingResult:
    """Train on windows ending before arrays.train_end; early-stop on windows from arrays.val_start."""
    entered = time.perf_counter()
    seq_len, batch_size = int(train_hparams["seq_len"]), int(train_hparams["batch_size"])
    amp_dtype = AMP_DTYPES[resolve_amp(train_hparams.get("amp", "auto"), device)]
    torch.manual_seed(int(train_hparams["seed"]))
    generator = torch.Generator(device=device).manual_seed(int(train_hparams["seed"]))

    features = torch.from_numpy(arrays.features).to(device)
    targets = torch.from_numpy(arrays.targets).to(device)
    windows, window_targets = window_view(features, seq_len), targets[seq_len - 1 :]
    n_train = arrays.train_end - (seq_len - 1)
    val_windows = windows[arrays.val_start - (seq_len - 1) :]
    val_targets = window_targets[arrays.val_start - (seq_len - 1) :]

    model = build_model({**model_hparams, "input_size": features.shape[1]}).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=float(train_hparams["lr"]))
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype is torch.float16)
    naive_val_loss = val_targets.pow(2).mean().item()  # predicting a zero return
    best_val_loss, best_epoch, best_state, history = math.inf, 0, None, []
    n_batches = math.ceil(n_train / batch_size)
    started = time.perf_counter()

    for epoch in range(1, int(train_hparams["epochs"]) + 1):
        epoch_started = last_progress = time.perf_counter()
        model.train()
        order = torch.randperm(n_train, device=device, generator=generator)
        loss_sum = torch.zeros((), device=device)  # summed on the device: no sync per step
        for batch_number, start in enumerate(range(0, n_train, batch_size), 1):
            batch = order[start : start + batch_size]
            with _autocast(device, amp_dtype):
                predictions = model(windows[batch])
            loss = F.mse_loss(predictions.float(), window_targets[batch])
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            loss_sum += loss.detach() * len(batch)
            if time.perf_counter() - last_progress > PROGRESS_EVERY_SECONDS:
                last_progress = time.perf_counter()
                log(progress_line(epoch, batch_number, n_batches, last_progress - epoch_started, batch_size))
        train_loss = loss_sum.item() / n_train
        val_loss = evaluate(model, val_windows, val_targets, amp_dtype)
        seconds = time.perf_counter() - epoch_started
        history.append({"epoch": epoch, "train_loss": train_loss, "val_loss": val_loss, "seconds": seconds})
        log(
            f"epoch {epoch:3d}  train_loss {train_loss:.5f}  val_loss {val_loss:.5f}  "
            f"{seconds:.2f}s  {n_train / seconds:,.0f} samples/s"
        )
        pause_point("epoch")
        if not math.isfinite(train_loss):
            raise FloatingPointError(f"training diverged at epoch {epoch} (train loss {train_loss})")
        if val_loss < best_val_loss:
            best_val_loss, best_epoch = val_loss, epoch
            best_state = {key: value.detach().clone() for key, value in model.state_dict().items()}
        elif epoch - best_epoch >= int(train_hparams["patience"]):
            log(f"early stop: no val_loss improvement for {train_hparams['patience']} epochs")
            break

    model.load_state_dict(best_state)
    model.eval()
    return TrainingResult(
        model=model,
        val_loss=best_val_loss,
        naive_val_loss=naive_val_loss,
        best_epoch=best_epoch,
        epochs_run=len(history),
        train_seconds=time.perf_counter() - started,
        setup_seconds=started - entered,
        history=history,
    )


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
) -> dict:
    """Everything needed to rebuild the model and use it on new bars (columns: the CSV's
    column names, as the config maps them); loads with weights_only=True."""
    return {
        "format": "rnnfleet",
        "format_version": 1,
        "dataset": dataset,
        "state_dict": {key: value.detach().cpu() for key, value in result.model.state_dict().items()},
        "model_config": {**model_hparams, "input_size": int(arrays.features.shape[1])},
        "train_config": dict(train_hparams),
        "normalisation": {
            "feature_mean": arrays.feature_mean.tolist(),
            "feature_std": arrays.feature_std.tolist(),
            "target_std": arrays.target_std,
        },
        "features": {
            "names": list(FEATURE_NAMES),
            "target": TARGET_NAME,
            "horizon": arrays.horizon,
            "seq_len": int(train_hparams["seq_len"]),
            "columns": dict(columns or {}),
        },
        "metrics": metrics,
        "versions": library_versions(),
    }


def train_one(
    dataset: str,
    arrays_path: str,
    model_path: str,
    metrics_path: str,
    model_hparams: dict,
    train_hparams: dict,
    threads: int,
    gpu_mem_gb: int,
    columns: dict | None = None,
    process_started_at: float | None = None,
) -> dict:
    """The train job: arrays in; model file and metrics JSON out (each written atomically).
    Returns the metrics."""
    from rnnfleet.checkpoint import save_checkpoint, write_json
    from rnnfleet.data import load_arrays
    from rnnfleet.device import cap_gpu_memory, claim_device, configure_threads, placement_note, release_gpu_memory

    # Interpreter start and imports: the job's fixed cost before any work (~0 in a warm worker).
    startup_seconds = time.time() - process_started_at if process_started_at else None
    configure_threads(threads)
    device, gpu_slot = claim_device(train_hparams.get("device", "auto"), gpu_mem_gb)
    cap_gpu_memory(device, gpu_mem_gb)
    amp = resolve_amp(train_hparams.get("amp", "auto"), device)
    log(
        f"{dataset}: training on {device} with {threads} thread(s), amp {amp}, gpu_mem {gpu_mem_gb} GB declared "
        f"({placement_note()})"
    )

    load_started = time.perf_counter()
    arrays = load_arrays(arrays_path)
    load_seconds = time.perf_counter() - load_started
    try:
        result = train_model(arrays, model_hparams, train_hparams, device)
        metrics = {
            "dataset": dataset,
            "val_loss": result.val_loss,
            "naive_val_loss": result.naive_val_loss,
            "skill": result.skill,
            "best_epoch": result.best_epoch,
            "epochs_run": result.epochs_run,
            "train_seconds": result.train_seconds,
            "device": str(device),
            "amp": amp,
            "torch_threads": torch.get_num_threads(),
            "rows": arrays.rows,
            "train_windows": arrays.train_end - (int(train_hparams["seq_len"]) - 1),
            "val_windows": arrays.rows - arrays.val_start,
            "startup_seconds": startup_seconds,
            "process_started_at": process_started_at,
            "load_seconds": load_seconds,
            "setup_seconds": result.setup_seconds,
            "history": result.history,
        }
        save_started = time.perf_counter()
        save_checkpoint(
            build_checkpoint(dataset, result, arrays, model_hparams, train_hparams, metrics, columns), model_path
        )
        metrics["save_seconds"] = time.perf_counter() - save_started
        metrics["finished_at"] = time.time()
        write_json(metrics, metrics_path)
    finally:
        release_gpu_memory(device)
        gpu_slot.release()
    log(
        f"{dataset}: best epoch {result.best_epoch} of {result.epochs_run}, val_loss {result.val_loss:.5f} "
        f"vs naive {result.naive_val_loss:.5f} (skill {result.skill:+.4f}) -> {model_path}"
    )
    return metrics
