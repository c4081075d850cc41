"""How much GPU memory one training needs: measure it, and turn it into gpu_mem settings.

The measurement trains a few steps of one real dataset in a child process, with the whole
dataset resident on the device as in a real training, then reads the card's free memory
from the parent while the child still holds everything it allocated. That difference is
the child's whole footprint: CUDA context, cuBLAS/cuDNN handles and workspaces, and the
caching allocator's reserved memory. torch.cuda.max_memory_reserved() alone would miss the
first two (several hundred MB).
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rnnfleet.prep.arrays import PreparedArrays

if TYPE_CHECKING:
    from rnnfleet.train.loop import LoopSettings

GIB = 2**30


@dataclass(frozen=True)
class Footprint:
    allocator_peak_bytes: int  # torch.cuda.max_memory_reserved() in the training process
    outside_allocator_bytes: int  # context, libraries, workspaces: the rest of its footprint

    @property
    def peak_bytes(self) -> int:
        return self.allocator_peak_bytes + self.outside_allocator_bytes


@dataclass(frozen=True)
class Plan:
    declared_gb: int  # train.gpu_mem
    per_card: list[int]  # trainings that fit on each visible card
    resources_gb: int  # --resources gpu_mem=

    @property
    def at_once(self) -> int:
        return sum(self.per_card)


def no_cuda_reason() -> str | None:
    """Why this process cannot size GPU memory, in one sentence; None when CUDA is usable."""
    import torch

    if torch.version.cuda is None:
        return (
            f"No CUDA here: this PyTorch ({torch.__version__}) is a CPU-only build, so there is no GPU "
            "memory to size. Install the CUDA build (README, 'GPU') on the GPU machine and run this there."
        )
    if not torch.cuda.is_available():
        return (
            f"No CUDA GPU visible: PyTorch {torch.__version__} is built for CUDA {torch.version.cuda} but finds "
            "no usable device (driver missing, or CUDA_VISIBLE_DEVICES hides them)."
        )
    return None


def declared_gb(footprint: Footprint, margin: float) -> int:
    """Whole GB to declare: the measured peak plus `margin` (a fraction), rounded up, at least 1."""
    return max(1, math.ceil(footprint.peak_bytes * (1 + margin) / GIB))


def plan(declared: int, card_capacities_gb: list[int]) -> Plan:
    """How many trainings declaring `declared` GB fit on cards of these whole-GB capacities
    (the same capacities rnnfleet.runner.gpu_slots books against), and the budget that allows exactly that."""
    per_card = [capacity // declared for capacity in card_capacities_gb]
    return Plan(declared_gb=declared, per_card=per_card, resources_gb=declared * sum(per_card))


def arrays_for_steps(arrays: PreparedArrays, steps: int, seq_len: int, batch_size: int) -> PreparedArrays:
    """The same arrays (all rows still go to the device) with only `steps` batches of training windows."""
    train_end = min(arrays.train_end, seq_len - 1 + steps * batch_size)
    return dataclasses.replace(arrays, train_end=train_end)


def _train_and_hold(device_index: int, arrays, model_hparams: dict, settings: LoopSettings, connection) -> None:
    """Child process: train, report the allocator peak, keep everything until the parent has measured."""
    import torch

    from rnnfleet.runner.device import configure_threads
    from rnnfleet.train.evaluate import train_and_evaluate

    configure_threads(1)
    device = torch.device("cuda", device_index)
    torch.cuda.set_device(device)
    result = train_and_evaluate(arrays, model_hparams, dataclasses.replace(settings, epochs=1), device)
    torch.cuda.synchronize(device)
    connection.send((torch.cuda.max_memory_reserved(device), torch.cuda.memory_reserved(device)))
    connection.recv()  # the parent has read the card's free memory
    del result


def measure_footprint(device_index: int, arrays, model_hparams: dict, settings: LoopSettings) -> Footprint:
    """Footprint of one training (one epoch of `settings`) on cuda:device_index. Assumes no
    other process changes its use of that card meanwhile."""
    import torch

    free_before, _ = torch.cuda.mem_get_info(device_index)
    spawn = multiprocessing.get_context("spawn")  # a child that never inherited CUDA state
    parent_end, child_end = spawn.Pipe()
    child = spawn.Process(target=_train_and_hold, args=(device_index, arrays, model_hparams, settings, child_end))
    child.start()
    child_end.close()  # else a child that dies early would leave the pipe open: no EOF
    try:
        if not parent_end.poll(600):
            raise RuntimeError("the sizing training did not finish within 10 minutes")
        allocator_peak, reserved_now = parent_end.recv()
        free_during, _ = torch.cuda.mem_get_info(device_index)
        parent_end.send("done")
    finally:
        child.join(60)
        if child.is_alive():
            child.kill()
    whole_footprint = free_before - free_during
    return Footprint(
        allocator_peak_bytes=allocator_peak, outside_allocator_bytes=max(0, whole_footprint - reserved_now)
    )
