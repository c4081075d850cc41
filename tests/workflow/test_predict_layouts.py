"""Forecasts read the bars in any layout the workflow reads (a model from the layouts run,
tests/layouts.py): the same forecasts from each.
"""

from __future__ import annotations

import pandas as pd
from layouts import HISTDATA_DATASET, file_of

from rnnfleet.forecast.predict import forecast_csv


def test_forecasts_read_the_same_layouts(every_layout, layouts_run, tmp_path):
    workdir, _ = layouts_run
    folder = every_layout[0]
    model = workdir / "models" / "COMMA_1m.pt"
    reference = forecast_csv(model, file_of(folder, "COMMA_1m"), tmp_path / "comma.csv", last=5)
    for dataset in ("BINANCE-US-1m-2024-01-02", "MT5_1m", HISTDATA_DATASET, "NINJATRADER_1m", "PARQUET_1m"):
        forecasts = forecast_csv(model, file_of(folder, dataset), tmp_path / f"{dataset}.csv", last=5)
        pd.testing.assert_frame_equal(forecasts, reference)
