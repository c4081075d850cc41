"""Each built-in feature's tensor twin (the ONNX graph's) gives the feature's own numbers, on
real bars: freqtrade's test data (tests/fixtures/freqtrade/PROVENANCE.md), a bitcoin pair at
a price of 0.0016 and XRP/ETH, and the same bars scaled to a price of 60,000."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import REPO

from rnnfleet.bars.formats import read_bars
from rnnfleet.prep.feature_graphs import GRAPH_FEATURES
from rnnfleet.prep.features import BUILTIN_FEATURES

REAL_BARS = REPO / "tests" / "fixtures" / "freqtrade"
FILES = ("json/binance/UNITTEST_BTC-1m.json", "feather/binance/XRP_ETH-1m.feather")


@pytest.mark.parametrize("scale", [1.0, 60_000.0 / 0.0016])
@pytest.mark.parametrize("path", FILES)
@pytest.mark.parametrize("name", sorted(GRAPH_FEATURES))
def test_each_graph_feature_gives_its_features_numbers_on_real_bars(name, path, scale):
    bars = read_bars(REAL_BARS / path)
    bars[["open", "high", "low", "close"]] *= scale
    expected = np.asarray(BUILTIN_FEATURES[name](bars), np.float64).reshape(len(bars), -1)
    columns = {
        key: torch.tensor(bars[key].to_numpy(np.float64))[None, :] for key in ("open", "high", "low", "close", "volume")
    }
    twin = GRAPH_FEATURES[name](columns)[0].numpy().reshape(len(bars), -1)
    assert twin.shape == expected.shape
    # Row 0 has no previous bar: its feature is NaN (warm-up), the twin's is never used.
    np.testing.assert_allclose(twin[1:], expected[1:], rtol=1e-9, atol=1e-15)
    assert set(GRAPH_FEATURES) <= set(BUILTIN_FEATURES)
