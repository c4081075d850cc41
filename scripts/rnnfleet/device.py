"""Process setup for one training job: allocator, threads, device, GPU memory cap."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


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
    device = torch.device(preferred)
    if device.type == "cuda" and not torch.cuda.is_available():
        from rnnfleet.errors import UserError

        raise UserError(f"config key 'train.device' is '{preferred}' but CUDA is not available on this machine")
    return device


def configure_threads(threads: int) -> None:
    """Use exactly the job's declared threads, so concurrent jobs do not oversubscribe cores."""
    import torch

    torch.set_num_threads(max(1, threads))
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set once in this process
        pass


def cap_gpu_memory(device, gpu_mem_gb: int) -> None:
    """Limit this process's CUDA allocator to its declared share of the card, so an
    oversized training fails with an out-of-memory error of its own instead of taking
    memory that other jobs were promised."""
    import torch

    if device.type != "cuda":
        return
    total_bytes = torch.cuda.get_device_properties(device).total_memory
    fraction = min(1.0, gpu_mem_gb * 2**30 / total_bytes)
    torch.cuda.set_per_process_memory_fraction(fraction, device)


def release_gpu_memory(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
