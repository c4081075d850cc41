"""One GPU per training on a node with several: a race-free ledger of declared GPU memory.

Snakemake's `--resources gpu_mem=N` bounds what all running trainings declare together, but
not on which card: every job that asks for plain `cuda` lands on device 0. Here each device
with C whole GB of memory has C unit lock files under the ledger folder; a training that
declares g GB holds g of them (rnnfleet.runner.file_locks), on the one device that has the most units free
when it starts. The OS drops a process's locks when it exits, however it exits, so a
killed training frees its units without any cleanup. A second lock serialises the choosing,
so two trainings never take the last units of a device together.

Unit files are named by the device's UUID, not its index: under SLURM or with
CUDA_VISIBLE_DEVICES, index 0 is a different card in different jobs.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from rnnfleet.errors import UserError
from rnnfleet.runner.file_locks import try_lock, wait_for_lock

DEFAULT_LEDGER_DIR = Path(".snakemake") / "gpu_slots"
POLL_SECONDS = 0.5
LOG_WAIT_EVERY_SECONDS = 60.0


@dataclass(frozen=True)
class GpuDevice:
    index: int  # torch's device index in this process
    key: str  # the same card's name in every process (its UUID)
    capacity_gb: int  # whole GB that trainings may declare on it


@dataclass
class GpuSlot:
    """Units held on one device; freed by release(), by garbage collection, or by process exit."""

    device: GpuDevice | None
    gb: int
    unit_files: list[IO] = field(default_factory=list, repr=False)

    def release(self) -> None:
        for unit_file in self.unit_files:
            unit_file.close()  # closing the file drops its lock
        self.unit_files.clear()


NO_SLOT = GpuSlot(device=None, gb=0)  # for CPU or single-GPU jobs: nothing to release


def visible_gpus() -> list[GpuDevice]:
    """The CUDA devices this process sees, capacity = memory in whole GB (GiB, rounded down).
    Reads properties only: creates no CUDA context, so the device can still be chosen."""
    import torch

    devices = []
    for index in range(torch.cuda.device_count()):
        properties = torch.cuda.get_device_properties(index)
        key = str(getattr(properties, "uuid", "") or f"index-{index}")
        devices.append(GpuDevice(index=index, key=key, capacity_gb=properties.total_memory // 2**30))
    return devices


def _unit_path(ledger_dir: Path, device: GpuDevice, unit: int) -> Path:
    return ledger_dir / f"{device.key}.{unit}.lock"


def free_units(ledger_dir: Path, device: GpuDevice) -> int:
    """GB not declared by any live holder on device (probes each unit, holds none)."""
    free = 0
    for unit in range(device.capacity_gb):
        unit_file = try_lock(_unit_path(ledger_dir, device, unit))
        if unit_file is not None:
            unit_file.close()
            free += 1
    return free


def _take_units(ledger_dir: Path, device: GpuDevice, gb: int) -> list[IO]:
    held = []
    for unit in range(device.capacity_gb):
        unit_file = try_lock(_unit_path(ledger_dir, device, unit))
        if unit_file is not None:
            held.append(unit_file)
            if len(held) == gb:
                return held
    raise RuntimeError(f"GPU ledger {ledger_dir}: device {device.key} lost free units while the choice was locked")


def _claim_once(
    devices: list[GpuDevice], gb: int, ledger_dir: Path, preferred: int | None = None
) -> tuple[GpuSlot | None, dict[int, int]]:
    """Under the choosing lock: the slot on the preferred device when it has room, else on the
    device with most GB free; or None and the free GB."""
    with wait_for_lock(ledger_dir / "choose.lock"):  # released when the file closes
        free_by_index = {device.index: free_units(ledger_dir, device) for device in devices}
        best = max(
            devices,
            key=lambda device: (
                device.index == preferred and free_by_index[device.index] >= gb,
                free_by_index[device.index],
                -device.index,
            ),
        )
        if free_by_index[best.index] < gb:
            return None, free_by_index
        return GpuSlot(device=best, gb=gb, unit_files=_take_units(ledger_dir, best, gb)), free_by_index


def claim_gpu(
    devices: list[GpuDevice],
    gb: int,
    ledger_dir: str | os.PathLike = DEFAULT_LEDGER_DIR,
    timeout_seconds: float | None = None,
    preferred: int | None = None,
) -> GpuSlot:
    """Hold `gb` declared GB on the device with the most free; wait while none has room. A
    worker that holds a CUDA context on one device already names it as `preferred`: it is
    taken whenever it has room, so the worker stays on its slot.

    Raises UserError when no device could ever hold `gb`, TimeoutError when timeout_seconds
    (None: wait as long as it takes) pass without room.
    """
    largest = max((device.capacity_gb for device in devices), default=0)
    if not 1 <= gb <= largest:
        raise UserError(f"train.gpu_mem is {gb} GB but the largest visible GPU holds {largest} GB")
    ledger_dir = Path(ledger_dir)
    ledger_dir.mkdir(parents=True, exist_ok=True)
    started = last_wait_log = time.monotonic()
    while True:
        slot, free_by_index = _claim_once(devices, gb, ledger_dir, preferred)
        if slot is not None:
            return slot
        now = time.monotonic()
        if timeout_seconds is not None and now - started >= timeout_seconds:
            raise TimeoutError(f"no GPU had {gb} GB undeclared within {timeout_seconds:g} s (free: {free_by_index})")
        if now - last_wait_log >= LOG_WAIT_EVERY_SECONDS:
            last_wait_log = now
            print(f"waiting for a GPU with {gb} GB undeclared (free GB by device: {free_by_index})", file=sys.stderr)
        time.sleep(POLL_SECONDS)
