"""train.amp: auto picks bf16 exactly where the device computes it natively, and says so."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from rnnfleet import precision
from rnnfleet.errors import UserError
from rnnfleet.prep.prepare import prepare_dataset
from rnnfleet.synthetic import write_synthetic_csv
from rnnfleet.train.evaluate import train_and_evaluate
from rnnfleet.train.loop import LoopSettings

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
flags\t\t: fpu vme sse sse2 avx2 avx512f {extra}
bugs\t\t: spectre_v1
"""


@pytest.mark.parametrize(
    "extra, native",
    [("avx512_bf16", True), ("amx_bf16 amx_tile", True), ("avx512_vnni", False), ("", False)],
)
def test_cpu_flags_decide_auto(monkeypatch, extra, native):
    flags = precision.cpu_flags_from_proc(CPUINFO.format(extra=extra))
    assert ("avx2" in flags) and any(flag in flags for flag in precision.NATIVE_BF16_CPU_FLAGS) == native
    monkeypatch.setattr(precision, "cpu_computes_bf16_natively", lambda: native)
    assert precision.resolve_amp("auto", torch.device("cpu")) == ("bf16" if native else "off")


@pytest.mark.parametrize("capability, expected", [((7, 5), "off"), ((8, 0), "bf16"), ((9, 0), "bf16")])
def test_cuda_capability_decides_auto(monkeypatch, capability, expected):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert precision.resolve_amp("auto", torch.device("cuda", 0)) == expected


def test_explicit_choices_are_kept():
    for amp in ("off", "bf16", "fp16"):
        assert precision.resolve_amp(amp, torch.device("cpu")) == amp


def test_cpu_probe_answers_without_proc(monkeypatch):
    """Where /proc/cpuinfo is missing (Windows, macOS, a sandbox) the answer still comes."""
    precision.cpu_flags_say_bf16.cache_clear()
    monkeypatch.setattr(precision.sys, "platform", "win32")
    try:
        assert isinstance(precision.cpu_flags_say_bf16(), bool)
    finally:
        precision.cpu_flags_say_bf16.cache_clear()


def test_auto_trains_exactly_like_the_choice_it_names(tmp_path):
    """auto really runs the resolved arithmetic: bit-identical to it, different from the other."""
    csv_path = write_synthetic_csv(tmp_path / "A_1m.csv", 1500, 3)
    arrays = prepare_dataset(csv_path, seq_len=16, horizon=1, val_fraction=0.2)[0]
    model = {"cell": "lstm", "hidden_size": 8, "num_layers": 1, "dropout": 0.0}
    settings = LoopSettings(seq_len=16, batch_size=64, lr=0.003, epochs=1, patience=2, seed=0)
    torch.set_num_threads(1)
    val_loss = {}
    for amp in ("auto", "off", "bf16"):
        try:
            val_loss[amp] = train_and_evaluate(
                arrays, model, replace(settings, amp=amp), torch.device("cpu")
            ).evaluated.val_loss
        except UserError as error:  # bf16 refused by this CPU's kernels: one line, never for auto
            assert amp == "bf16" and "train.amp" in str(error), error
    chosen = precision.resolve_amp("auto", torch.device("cpu"))
    other = "off" if chosen == "bf16" else "bf16"
    assert val_loss["auto"] == val_loss[chosen] != val_loss.get(other)


def test_the_test_hook_makes_this_cpu_count_as_one_without_native_bf16(monkeypatch):
    monkeypatch.setenv(precision.NO_NATIVE_BF16, "1")
    assert precision.resolve_amp("auto", torch.device("cpu")) == "off"
    monkeypatch.delenv(precision.NO_NATIVE_BF16)
    expected = "bf16" if precision.cpu_flags_say_bf16() else "off"
    assert precision.resolve_amp("auto", torch.device("cpu")) == expected
