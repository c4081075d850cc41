"""Which arithmetic a training uses: `train.amp` resolved for the device it runs on.

What it promises:
- `auto` (the default) is `bf16` autocast where the device computes bfloat16 natively, `off`
  (float32) everywhere else: CPUs with AVX512-BF16 or AMX-BF16, CUDA devices of compute
  capability 8.0 (Ampere) and later.
- `off`, `bf16`, `fp16` are used as given.
- Finding out never fails: where the CPU's features cannot be read (an unknown OS, a
  restricted /proc), the answer is float32.
"""

from __future__ import annotations

import os
import sys
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

NATIVE_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
NATIVE_BF16_CUDA_CAPABILITY = (8, 0)


def cpu_flags_from_proc(cpuinfo_text: str) -> set[str]:
    """The feature flags of the first CPU listed in /proc/cpuinfo (Linux)."""
    for line in cpuinfo_text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            return set(value.split())
    return set()


# Test hook: "1" makes this machine's CPU count as one without native bfloat16, so the suite
# runs the float32 path of `train.amp: auto` here as on such a CPU (docs/development.md).
NO_NATIVE_BF16 = "RNNFLEET_TEST_NO_NATIVE_BF16"


def cpu_computes_bf16_natively() -> bool:
    """AVX512-BF16 or AMX-BF16: from /proc/cpuinfo on Linux, else from torch's own CPU probe."""
    if os.environ.get(NO_NATIVE_BF16) == "1":
        return False
    return cpu_flags_say_bf16()


@cache
def cpu_flags_say_bf16() -> bool:
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/cpuinfo") as cpuinfo:
                flags = cpu_flags_from_proc(cpuinfo.read())
        except OSError:
            flags = set()
        if flags:
            return any(flag in flags for flag in NATIVE_BF16_CPU_FLAGS)
    try:
        import torch.cpu

        # torch's probe (the cpuinfo library) works on Windows and macOS too; private
        # names, so any failure reads as "no".
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except Exception:
        return False


def device_computes_bf16_natively(device: torch.device) -> bool:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_capability(device) >= NATIVE_BF16_CUDA_CAPABILITY
    if device.type == "cpu":
        return cpu_computes_bf16_natively()
    return False


def resolve_amp(amp: str, device: torch.device) -> str:
    """`train.amp` as used on `device`: 'auto' becomes 'bf16' or 'off'; the others stay."""
    if amp != "auto":
        return amp
    return "bf16" if device_computes_bf16_natively(device) else "off"
