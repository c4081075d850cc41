"""Gaps in the bars: preprocess.max_gap is checked like any setting, and no window that spans
a gap is counted or shown to the model. A weekend gap in a real run: tests/workflow/test_gaps_run.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml
from conftest import REPO

from rnnfleet.prep.gaps import usable_window_ends


def test_a_bad_max_gap_is_a_config_error_naming_the_key():
    from rnnfleet.workflow.config_check import config_problems

    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    problems = config_problems({"preprocess": {"max_gap": "5 minutes"}}, schema)
    assert len(problems) == 1 and "config key 'preprocess.max_gap' = '5 minutes' is not allowed" in problems[0]
    assert config_problems({"preprocess": {"max_gap": "off"}, "format": {"preset": "binance"}}, schema) == []


@pytest.mark.parametrize("warmup", [1, 3])  # 1: the default features; 3: e.g. a 3-bar rolling feature
def test_usable_window_ends_match_a_brute_force_count(warmup):
    rows, seq_len, horizon = 60, 5, 2
    gap_bars = np.array([10, 11, 40])
    usable = usable_window_ends(rows, gap_bars, seq_len, horizon, warmup)
    for end in range(rows):
        # feature row t looks back to bar t and describes bar t + warmup; its target ends horizon bars later
        touched_steps = range(end - seq_len + 1, end + warmup + horizon)  # step b: bar b -> b + 1
        expected = end >= seq_len - 1 and not any(step in gap_bars for step in touched_steps)
        assert usable[end] == expected, end


class RecordingModel(torch.nn.Module):
    """Predicts 0 + a learnable bias and records the first feature (= the row number) of
    every window it is shown, in training and in validation."""

    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(1))
        self.seen_windows: list[tuple[bool, list[int]]] = []

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        for window in windows[:, :, 0].round().long().tolist():
            self.seen_windows.append((self.training, window))
        return self.bias.expand(len(windows))


@pytest.mark.slow
def test_the_loop_shows_the_model_no_window_that_spans_a_gap(monkeypatch):
    from rnnfleet.prep.arrays import PreparedArrays
    from rnnfleet.train import loop as training

    rows, seq_len, horizon, gap_bars = 200, 8, 2, np.array([40, 41, 120])
    features = np.zeros((rows, 5), dtype=np.float32)
    features[:, 0] = np.arange(rows)  # feature row t holds t
    arrays = PreparedArrays(
        features=features,
        targets=np.ones(rows, dtype=np.float32),
        feature_mean=np.zeros(5, np.float32),
        feature_std=np.ones(5, np.float32),
        target_std=1.0,
        train_end=158,
        val_start=160,
        last_close=1.0,
        horizon=horizon,
        gap_bars=gap_bars,
    )
    model = RecordingModel()
    monkeypatch.setattr(training, "build_model", lambda config, input_size, seq_len: model)
    settings = training.LoopSettings(seq_len=seq_len, batch_size=16, lr=0.01, epochs=1, patience=1, seed=0)
    training.train(training.on_device(arrays, settings, torch.device("cpu")), {}, settings)
    usable = usable_window_ends(rows, gap_bars, seq_len, horizon)
    seen_ends = {"train": set(), "val": set()}
    for in_training, window in model.seen_windows:
        assert window == list(range(window[0], window[0] + seq_len))  # consecutive feature rows
        end = window[-1]
        # Steps end-seq_len+1 .. end+horizon (inputs and target) cross no gap.
        assert not any(end - seq_len + 1 <= bar <= end + horizon for bar in gap_bars), window
        seen_ends["train" if in_training else "val"].add(end)
    assert seen_ends["train"] == {t for t in range(arrays.train_end) if usable[t]}
    assert seen_ends["val"] == {t for t in range(arrays.val_start, rows) if usable[t]}
