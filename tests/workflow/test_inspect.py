"""The inspect target tables every dataset of the layouts run (tests/layouts.py) without
training: how each file was read, its bars, gaps and windows, and why it is unusable.
"""

from __future__ import annotations

import csv
import json

from conftest import snakemake
from layouts import HISTDATA_DATASET, ODD_CASES, ROWS

from rnnfleet.bars.formats import HISTDATA_LIKE_NOTE


def test_inspect_tables_every_dataset_without_training(every_layout, layouts_run):
    workdir, _ = layouts_run
    models_before = sorted(path.name for path in (workdir / "models").iterdir())
    result = snakemake(workdir, "inspect")
    assert "rule train" not in result.stdout + result.stderr
    assert sorted(path.name for path in (workdir / "models").iterdir()) == models_before
    with open(workdir / "results" / "inspect.csv", encoding="utf-8") as table:
        rows = {row["dataset"]: row for row in csv.DictReader(table)}
    assert set(rows) == {*every_layout[1], *ODD_CASES, "WEEKEND_1m"}  # no decoys
    binance = rows["BINANCE-MS-1m-2024-01-02"]
    assert "12 columns, time from column 0 in epoch ms" in binance["read_as"]
    assert (binance["status"], binance["bars"], binance["median_step"], binance["gaps"]) == (
        "ok",
        str(ROWS),
        "00:01:00",
        "0",
    )
    assert binance["first"] == "2024-01-02 00:00:00+00:00" and binance["last"] == "2024-01-02 06:39:00+00:00"
    weekend = rows["WEEKEND_1m"]
    metrics = json.loads((workdir / "metrics" / "WEEKEND_1m.json").read_text())
    assert (weekend["gaps"], weekend["longest_gap"]) == ("1", "2 days 00:01:00")
    assert (int(weekend["train_windows"]), int(weekend["val_windows"])) == (
        metrics["train_windows"],
        metrics["val_windows"],
    )
    assert rows["OUTAGE_1m"]["status"] == "too short" and rows["OUTAGE_1m"]["long_enough"] == "False"
    assert "preprocess.max_gap=15min" in rows["CHOPPED_1m"]["problem"]
    assert rows["ZEROPRICE_1m"]["status"] == "unusable" and ODD_CASES["ZEROPRICE_1m"] in rows["ZEROPRICE_1m"]["problem"]
    # A file in histdata.com's line shape not named as histdata names its own: read as UTC, and
    # the table and the preprocess log say so, with how to read it in histdata's EST.
    ninja = rows["NINJATRADER_1m"]
    assert HISTDATA_LIKE_NOTE in ninja["cleaning"]
    assert HISTDATA_LIKE_NOTE not in rows[HISTDATA_DATASET]["cleaning"]
    assert HISTDATA_LIKE_NOTE in (workdir / "logs" / "preprocess" / "NINJATRADER_1m.log").read_text()
