"""Process setup for one training job: allocator, threads, device, GPU memory cap."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import sys
import time
from typing import TYPE_CHECKING

from rnnfleet.runner.gpu_slots import NO_SLOT, GpuSlot, claim_gpu, visible_gpus

if TYPE_CHECKING:
    import torch

WORKER_VARIABLE = "RNNFLEET_WORKER"  # "cold", "warm <server pid>" (forked) or "spawned <server pid>"

_cuda_devices_used: set[int] = set()  # the devices this process's trainings claimed: a context on each

# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


def prepare_cold_process() -> None:
    """A job that runs in its own process (no warm worker): say so, and tune the allocator
    before torch allocates."""
    os.environ[WORKER_VARIABLE] = "cold"
    tune_cpu_allocator()


def tune_cpu_allocator() -> bool:
    """Stop glibc from returning memory to the OS after every training step.

    Each step frees and re-allocates the same large activation buffers; with glibc's
    defaults they come from fresh mmap()s that are zeroed and unmapped again each time,
    which makes a small CPU training step much slower. Call before torch allocates.
    Returns False where the C library is not glibc (the call is then skipped).
    """
    libc_name = ctypes.util.find_library("c")
    if not sys.platform.startswith("linux") or libc_name is None:
        return False
    try:
        libc = ctypes.CDLL(libc_name)
        return bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30))
    except (OSError, AttributeError):
        return False


def choose_device(preferred: str = "auto"):
    """'auto' -> CUDA when available, else CPU. 'cpu' or 'cuda[:N]' force a choice."""
    import torch

    if preferred == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    problem = device_unusable_here(preferred)
    if problem:
        from rnnfleet.errors import UserError

        raise UserError(problem)
    return torch.device(preferred)


def device_unusable_here(preferred: str) -> str | None:
    """Why `train.device` = preferred cannot run on this machine, in one sentence; None when it can."""
    import torch

    if not preferred.startswith("cuda"):
        return None
    index = int(preferred.partition(":")[2] or 0)
    if not torch.cuda.is_available():
        why = "a CPU-only build of PyTorch" if torch.version.cuda is None else "PyTorch sees no CUDA GPU here"
    elif index >= torch.cuda.device_count():
        why = (
            f"PyTorch sees {torch.cuda.device_count()} CUDA GPU(s) here, cuda:0 to cuda:{torch.cuda.device_count() - 1}"
        )
    else:
        return None
    return (
        f"config key 'train.device' = '{preferred}' cannot run on this machine ({why}); set train.device: auto or cpu"
    )


def settings_unusable_here(train: dict) -> str | None:
    """Why the `train:` settings cannot run on this machine (a CUDA device it lacks, or float16
    autocast, which needs a CUDA GPU, where training would run on the CPU), in one sentence;
    None when they can. Imports torch only for settings other than the defaults."""
    device, amp = train.get("device", "auto"), train.get("amp", "auto")
    if device == "auto" and amp != "fp16":
        return None
    problem = device_unusable_here(device)
    if problem or amp != "fp16":
        return problem
    import torch

    if device == "cpu" or not torch.cuda.is_available():
        where = "train.device: cpu" if device == "cpu" else "no CUDA GPU here"
        return (
            f"config key 'train.amp' = 'fp16' cannot run on this machine: float16 autocast needs a CUDA GPU, and "
            f"training would run on the CPU ({where}); set train.amp: auto, off or bf16"
        )
    return None


def claim_device(preferred: str, gpu_mem_gb: int) -> tuple[torch.device, GpuSlot]:
    """choose_device(), plus, where several GPUs are visible and no index was asked for, one
    of them: the one with the most undeclared memory (rnnfleet.runner.gpu_slots), made this process's
    current device. Returns (device, slot); the caller releases the slot when done (process
    exit releases it too)."""
    import torch

    device = choose_device(preferred)
    if device.type != "cuda" or device.index is not None or torch.cuda.device_count() < 2:
        if device.type == "cuda":
            _cuda_devices_used.add(device.index if device.index is not None else torch.cuda.current_device())
        return device, NO_SLOT
    held = next(iter(_cuda_devices_used)) if len(_cuda_devices_used) == 1 else None
    slot = claim_gpu(visible_gpus(), gpu_mem_gb, preferred=held)
    torch.cuda.set_device(slot.device.index)
    _cuda_devices_used.add(slot.device.index)
    return torch.device("cuda", slot.device.index), slot


def job_process() -> dict:
    """How this job's process was started, for its metrics: worker "warm" (forked by a warm
    server, whose pid is given), "spawned" (a worker of the spawn path's server, whose pid is
    given: rnnfleet.runner.spawned) or "cold" (its own interpreter), and its pid."""
    worker, _, server_pid = os.environ.get(WORKER_VARIABLE, "cold").partition(" ")
    return {"worker": worker, "pid": os.getpid(), "warm_server_pid": int(server_pid) if server_pid else None}


def limit_blas_threads(threads: int) -> None:
    """Limit numpy's BLAS (OpenBLAS, MKL, BLIS) to the job's declared threads, in this process.
    Its pool is sized to every core when numpy loads, and an environment variable set then
    would be too late for a warm worker's child: on a machine whose cores the other jobs
    keep busy, a pool's threads wait on each other (a dot product of over 10,000 numbers,
    as in a test period's Diebold-Mariano test, is split across them)."""
    import numpy  # noqa: F401  (loads the BLAS library that the limit finds)
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=max(1, threads), user_api="blas")


def blas_threads() -> int | None:
    """The threads numpy's BLAS may use in this process (None: no BLAS library found)."""
    from threadpoolctl import threadpool_info

    counts = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
    return max(counts) if counts else None


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def start_job_measure() -> float:
    """Start measuring this job's own resources: on Linux the process's peak resident set
    is reset (a warm worker's child runs job after job); returns the CPU clock to pass to
    job_resources."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")  # 5: reset the peak RSS (VmHWM) to the current RSS
    except OSError:
        pass  # not Linux (or /proc not writable): the peak is the process's since it started
    return time.process_time()


def job_resources(cpu_started: float) -> dict:
    """The job's own CPU seconds (every thread of its process) since start_job_measure, and
    its peak resident memory in MB with the span it covers: "job" (reset at the start,
    Linux), else "process" (since the process started)."""
    peak_mb, scope = linux_peak_rss_mb(), "job"
    if peak_mb is None:
        peak_mb, scope = process_peak_rss_mb(), "process"
    return {"cpu_seconds": time.process_time() - cpu_started, "peak_rss_mb": peak_mb, "peak_rss_scope": scope}


def linux_peak_rss_mb() -> float | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return None


def process_peak_rss_mb() -> float | None:
    """The peak since the process started: psutil's peak working set on Windows, getrusage elsewhere."""
    try:
        import resource  # Unix

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, kB elsewhere
    except ImportError:
        import psutil  # a dependency of Snakemake

        return getattr(psutil.Process().memory_info(), "peak_wset", 0) / 2**20 or None


def placement_note() -> str:
    """Where the job runs, for its log: SLURM job id and node, the GPUs it was given, its process."""
    notes = [f"SLURM job {os.environ['SLURM_JOB_ID']}"] if "SLURM_JOB_ID" in os.environ else []
    notes.append(f"host {platform.node()}")
    process = job_process()
    notes.append(f"{process['worker']} worker, pid {process['pid']}")
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        notes.append(f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}")
    return ", ".join(notes)


def configure_threads(threads: int) -> None:
    """Use exactly the job's declared threads, so concurrent jobs do not oversubscribe cores:
    torch's and numpy's BLAS (limit_blas_threads)."""
    import torch

    limit_blas_threads(threads)
    torch.set_num_threads(max(1, threads))
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set once in this process
        pass


def can_take_another_job() -> bool:
    """Whether this process may run another job once its job is done (a warm worker of either
    path). The CUDA context it keeps saves the next job CUDA's start. With several GPUs it
    keeps its slot: its next training goes to the GPU of its context whenever that one has
    room (claim_device); once its trainings have used two GPUs, it holds a context on a GPU
    where no job of its declares memory, and it takes no more."""
    return len(_cuda_devices_used) <= 1


def cuda_devices_used() -> set[int]:
    """The CUDA devices this process's trainings used (each holds a context of its)."""
    return set(_cuda_devices_used)


def cap_gpu_memory(device, gpu_mem_gb: int) -> None:
    """Limit this process's CUDA allocator to its declared share of the card, so an
    oversized training fails with an out-of-memory error of its own instead of taking
    memory that other jobs were promised."""
    import torch

    if device.type != "cuda":
        return
    # "cuda" without an index (one visible GPU, or train.device: cuda) is the current device;
    # set_per_process_memory_fraction accepts only an index or an indexed device.
    index = device.index if device.index is not None else torch.cuda.current_device()
    total_bytes = torch.cuda.get_device_properties(index).total_memory
    fraction = min(1.0, gpu_mem_gb * 2**30 / total_bytes)
    torch.cuda.set_per_process_memory_fraction(fraction, index)


def release_gpu_memory(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
