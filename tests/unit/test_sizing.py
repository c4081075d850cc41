"""Sizing gpu_mem: the arithmetic. The script itself: tests/workflow/test_size_gpu_mem.py."""

from __future__ import annotations

import numpy as np

from rnnfleet.prep.arrays import PreparedArrays
from rnnfleet.runner.sizing import GIB, Footprint, arrays_for_steps, declared_gb, plan


def test_declared_memory_covers_the_peak_plus_margin_in_whole_gb():
    footprint = Footprint(allocator_peak_bytes=int(1.1 * GIB), outside_allocator_bytes=int(0.5 * GIB))
    assert footprint.peak_bytes == int(1.1 * GIB) + int(0.5 * GIB)
    assert declared_gb(footprint, margin=0.15) == 2  # 1.6 GiB * 1.15 = 1.84 -> 2
    assert declared_gb(footprint, margin=0.3) == 3  # 2.08 -> 3
    assert declared_gb(Footprint(1, 0), margin=0.0) == 1  # never 0


def test_plan_fills_each_card_and_budgets_exactly_that():
    fit = plan(declared=3, card_capacities_gb=[11, 11, 23])  # e.g. two 12 GB cards and a 24 GB one
    assert fit.per_card == [3, 3, 7]
    assert fit.at_once == 13 and fit.resources_gb == 39
    assert plan(declared=40, card_capacities_gb=[23]).at_once == 0


def test_a_few_steps_keep_every_row_on_the_device():
    rows = 10_000
    arrays = PreparedArrays(
        features=np.zeros((rows, 5), np.float32),
        targets=np.zeros(rows, np.float32),
        feature_mean=np.zeros(5, np.float32),
        feature_std=np.ones(5, np.float32),
        target_std=1.0,
        train_end=8_000,
        val_start=8_000,
        last_close=1.0,
        horizon=1,
    )
    short = arrays_for_steps(arrays, steps=5, seq_len=60, batch_size=128)
    assert short.train_end - 59 == 5 * 128 and short.features is arrays.features and short.val_start == 8_000
    assert arrays_for_steps(arrays, steps=1000, seq_len=60, batch_size=128).train_end == 8_000
