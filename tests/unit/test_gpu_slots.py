"""The multi-GPU ledger on a simulated device list: many processes, killed holders, no double booking."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from rnnfleet.errors import UserError
from rnnfleet.runner.device import claim_device
from rnnfleet.runner.file_locks import wait_for_lock
from rnnfleet.runner.gpu_slots import NO_SLOT, GpuDevice, GpuSlot, claim_gpu, free_units

# fork: the workers only take file locks, and start far faster than with spawn.
FORK = multiprocessing.get_context("fork")


def simulated_gpus(count: int, capacity_gb: int) -> list[GpuDevice]:
    return [GpuDevice(index=index, key=f"GPU-sim-{index}", capacity_gb=capacity_gb) for index in range(count)]


def test_claims_spread_over_devices_by_most_free_memory(tmp_path):
    devices = simulated_gpus(4, 12)  # a 4 x 12 GB node, trainings declaring 2 GB
    slots = [claim_gpu(devices, 2, tmp_path) for _ in range(24)]
    per_device = {index: sum(slot.gb for slot in slots if slot.device.index == index) for index in range(4)}
    assert per_device == {0: 12, 1: 12, 2: 12, 3: 12}
    # the first four went to four different cards, not all to cuda:0
    assert [slot.device.index for slot in slots[:4]] == [0, 1, 2, 3]
    with pytest.raises(TimeoutError):
        claim_gpu(devices, 1, tmp_path, timeout_seconds=0)
    slots[5].release()
    assert claim_gpu(devices, 2, tmp_path, timeout_seconds=0).device == slots[5].device


def test_picks_the_device_with_most_undeclared_memory(tmp_path):
    devices = simulated_gpus(3, 8)
    held = [claim_gpu(devices, gb, tmp_path) for gb in (6, 3, 4, 5)]
    # 6 -> empty cuda:0; 3 -> cuda:1 (8 free); 4 -> cuda:2 (8 free vs 5 and 2); 5 -> cuda:1, the only one with 5
    assert [slot.device.index for slot in held] == [0, 1, 2, 1]
    assert [free_units(tmp_path, device) for device in devices] == [2, 0, 4]
    held.pop().release()
    assert [free_units(tmp_path, device) for device in devices] == [2, 5, 4]


def test_a_request_no_device_can_hold_fails_at_once(tmp_path):
    with pytest.raises(UserError, match="largest visible GPU holds 8 GB"):
        claim_gpu(simulated_gpus(2, 8), 9, tmp_path)


def _hold_until_killed(devices: list[GpuDevice], gb: int, ledger_dir: Path, holding) -> None:
    slot = claim_gpu(devices, gb, ledger_dir)
    holding.set()
    time.sleep(600)
    slot.release()  # never reached: the test kills this process


def test_a_killed_holder_frees_its_memory(tmp_path):
    devices = simulated_gpus(2, 4)
    holding = FORK.Event()
    holder = FORK.Process(target=_hold_until_killed, args=(devices, 4, tmp_path, holding))
    holder.start()
    try:
        assert holding.wait(30)
        assert sorted(free_units(tmp_path, device) for device in devices) == [0, 4]
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(30)
        assert [free_units(tmp_path, device) for device in devices] == [4, 4]
        assert claim_gpu(devices, 4, tmp_path, timeout_seconds=0).gb == 4
    finally:
        holder.kill()


def _audited_worker(claim: Callable, devices, ledger_dir: Path, audit_path: Path, seed: int, rounds: int) -> None:
    """Claim, hold a little, release; book every hold in an audit file checked under its own lock."""
    rng = random.Random(seed)
    for _ in range(rounds):
        gb = rng.choice([1, 2, 3])
        slot = claim(devices, gb, ledger_dir)
        _audit(audit_path, slot.device, +gb)
        time.sleep(rng.uniform(0.005, 0.03))
        _audit(audit_path, slot.device, -gb)
        slot.release()


def _audit(audit_path: Path, device: GpuDevice, change_gb: int) -> None:
    with wait_for_lock(audit_path.with_suffix(".lock")), open(audit_path, "r+") as audit:
        state = json.load(audit)
        held = state["held"].get(device.key, 0) + change_gb
        state["held"][device.key] = held
        holders = state["holders"].get(device.key, 0) + (1 if change_gb > 0 else -1)
        state["holders"][device.key] = holders
        if held > device.capacity_gb:
            state["overbooked"].append([device.key, held])
        state["max_holders"][device.key] = max(state["max_holders"].get(device.key, 0), holders)
        audit.seek(0)
        audit.truncate()
        json.dump(state, audit)


def run_concurrent_claims(claim: Callable, tmp_path: Path, processes: int = 16, rounds: int = 6) -> dict:
    devices = simulated_gpus(3, 5)
    audit_path = tmp_path / "audit.json"
    audit_path.write_text(json.dumps({"held": {}, "holders": {}, "max_holders": {}, "overbooked": []}))
    workers = [
        FORK.Process(target=_audited_worker, args=(claim, devices, tmp_path / "ledger", audit_path, seed, rounds))
        for seed in range(processes)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [worker.exitcode for worker in workers] == [0] * processes
    return json.loads(audit_path.read_text())


@pytest.mark.slow
def test_concurrent_processes_never_overbook_a_device(tmp_path):
    audit = run_concurrent_claims(claim_gpu, tmp_path)
    assert audit["overbooked"] == []
    assert set(audit["held"].values()) == {0}
    # Several holders on one device at once, or the ledger was never under contention.
    assert max(audit["max_holders"].values()) >= 2, "the workers never overlapped: the test proves nothing"
    devices = simulated_gpus(3, 5)
    assert [free_units(tmp_path / "ledger", device) for device in devices] == [5, 5, 5]


def _unlocked_claim(devices: list[GpuDevice], gb: int, ledger_dir) -> GpuSlot:
    return GpuSlot(device=devices[0], gb=gb)


@pytest.mark.slow
def test_the_audit_catches_an_allocator_that_overbooks(tmp_path):
    # The same harness around an allocator without locks: it must report overbooking,
    # or the test above could not fail.
    assert run_concurrent_claims(_unlocked_claim, tmp_path)["overbooked"] != []


def _one_at_a_time_claim(devices: list[GpuDevice], gb: int, ledger_dir) -> GpuSlot:
    """Holds one global lock for as long as the slot lives: correct, but nobody ever overlaps."""
    Path(ledger_dir).mkdir(parents=True, exist_ok=True)
    return GpuSlot(device=devices[0], gb=gb, unit_files=[wait_for_lock(Path(ledger_dir) / "only.lock")])


@pytest.mark.slow
def test_the_overlap_control_fails_when_claims_never_overlap(tmp_path):
    # The "never overlapped" guard above must be able to fail: here holds are serialised.
    audit = run_concurrent_claims(_one_at_a_time_claim, tmp_path, processes=4, rounds=3)
    assert audit["overbooked"] == [] and max(audit["max_holders"].values()) == 1


def test_cpu_jobs_claim_no_gpu():
    device, slot = claim_device("cpu", gpu_mem_gb=2)
    assert device.type == "cpu" and slot is NO_SLOT
    slot.release()  # a no-op, as train_one calls it


def test_a_slot_nobody_references_is_freed(tmp_path):
    devices = simulated_gpus(1, 2)
    claim_gpu(devices, 2, tmp_path)  # dropped at once: its lock files close with it
    assert free_units(tmp_path, devices[0]) == 2


def test_training_jobs_on_a_multi_gpu_node_each_get_their_own_device(monkeypatch, tmp_path):
    # What train_one calls, on a simulated node of two 8 GB cards (torch's CUDA queries faked).
    current_device = fake_gpus(monkeypatch, 2, 8)
    monkeypatch.chdir(tmp_path)  # the ledger lives under the job's working folder

    claims = [claim_in_a_new_process(monkeypatch, "auto", 4) for _ in range(4)]
    assert [str(device) for device, _ in claims] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert current_device == [0, 1, 0, 1]
    assert sorted(path.name for path in (tmp_path / ".snakemake" / "gpu_slots").glob("GPU-fake-0.*")) == [
        f"GPU-fake-0.{unit}.lock" for unit in range(8)
    ]
    with pytest.raises(TimeoutError):
        claim_gpu([slot.device for _, slot in claims[:2]], 1, tmp_path / ".snakemake" / "gpu_slots", timeout_seconds=0)
    claims[0][1].release()
    assert str(claim_in_a_new_process(monkeypatch, "auto", 4)[0]) == "cuda:0"
    assert claim_in_a_new_process(monkeypatch, "cuda:1", 4)[1] is NO_SLOT  # an explicit index is the user's choice


def claim_in_a_new_process(monkeypatch, train_device: str, gpu_mem_gb: int):
    """claim_device as a process that holds no CUDA context yet (a fresh worker)."""
    import rnnfleet.runner.device as device_module

    monkeypatch.setattr(device_module, "_cuda_devices_used", set())
    return claim_device(train_device, gpu_mem_gb=gpu_mem_gb)


def fake_gpus(monkeypatch, count: int, gb: int) -> list:
    """torch's CUDA queries faked for `count` cards of `gb` GB; returns the devices made current."""
    import torch

    cards = [SimpleNamespace(total_memory=gb * 2**30 + 5, uuid=f"GPU-fake-{index}") for index in range(count)]
    current_device = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(cards))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: cards[index])
    monkeypatch.setattr(torch.cuda, "set_device", current_device.append)
    return current_device


def test_a_worker_keeps_its_gpu_slot_while_it_has_room_and_takes_no_more_jobs_once_it_used_two(monkeypatch, tmp_path):
    # A warm worker (either path) keeps its CUDA context from one training to the next: with
    # several GPUs it goes back to the GPU of its context, not to the one with the most room,
    # so no context sits on a GPU where none of its jobs declares memory.
    from rnnfleet.runner.device import can_take_another_job, cuda_devices_used

    fake_gpus(monkeypatch, 2, 8)
    monkeypatch.chdir(tmp_path)
    ledger = tmp_path / ".snakemake" / "gpu_slots"
    first, first_slot = claim_in_a_new_process(monkeypatch, "auto", 2)  # this worker's first training
    assert str(first) == "cuda:0" and can_take_another_job()
    first_slot.release()
    cuda0, cuda1 = visible_gpus_faked()
    others = claim_gpu([cuda0], 6, ledger)  # another process's 6 GB on cuda:0: 2 GB free there, 8 on cuda:1
    again, again_slot = claim_device("auto", gpu_mem_gb=2)  # the same worker's next training
    assert str(again) == "cuda:0" and cuda_devices_used() == {0} and can_take_another_job()  # not cuda:1
    again_slot.release()
    full = claim_gpu([cuda0], 2, ledger)  # cuda:0 full now
    elsewhere, _ = claim_device("auto", gpu_mem_gb=2)  # the worker's training goes where there is room
    assert str(elsewhere) == "cuda:1" and cuda_devices_used() == {0, 1}
    assert not can_take_another_job()  # a context on two GPUs: it exits after this job
    others.release()
    full.release()


def visible_gpus_faked() -> list[GpuDevice]:
    from rnnfleet.runner.gpu_slots import visible_gpus

    return visible_gpus()


@pytest.mark.parametrize(("train_device", "current", "capped"), [("auto", 0, 0), ("cuda", 2, 2), ("cuda:1", 0, 1)])
def test_the_memory_cap_reaches_the_gpu_of_a_device_named_without_an_index(monkeypatch, train_device, current, capped):
    # One visible GPU (train.device auto) or train.device: cuda gives torch.device("cuda"),
    # which torch's set_per_process_memory_fraction refuses: every training on a one-GPU
    # machine failed before its first step (seen on an H200). torch's own function runs here;
    # only its CUDA calls are faked.
    import torch

    from rnnfleet.runner.device import cap_gpu_memory, choose_device

    fractions = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2 if train_device == "cuda:1" else 1)  # cuda:1 exists
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current)
    monkeypatch.setattr(torch.cuda.memory, "_lazy_init", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: SimpleNamespace(total_memory=8 * 2**30))
    monkeypatch.setattr(torch._C, "_cuda_setMemoryFraction", lambda *args: fractions.append(args), raising=False)

    cap_gpu_memory(choose_device(train_device), gpu_mem_gb=2)
    assert fractions == [(0.25, capped)]
