"""inspect_datasets: a dataset whose reading fails in a way nobody foresaw (a bug, not a bad
file) gets a row saying so, and every other dataset keeps its row."""

from __future__ import annotations

import csv

import yaml
from conftest import REPO
from layouts import headered, reference_bars

from rnnfleet.bars import inspection
from rnnfleet.settings import preprocess_settings


def test_an_unforeseen_error_on_one_dataset_costs_only_its_own_row(tmp_path, monkeypatch):
    for name in ("A_1m", "B_1m", "C_1m"):
        headered(reference_bars()).to_csv(tmp_path / f"{name}.csv", index=False)
    real_read = inspection.read_clean_bars

    def read_failing_for_b(path, *args, **kwargs):
        if str(path).endswith("B_1m.csv"):
            raise IndexError("index 0 is out of bounds for axis 0 with size 0")
        return real_read(path, *args, **kwargs)

    monkeypatch.setattr(inspection, "read_clean_bars", read_failing_for_b)
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config["train"]["seq_len"] = 30
    files = {name: str(tmp_path / f"{name}.csv") for name in ("A_1m", "B_1m", "C_1m")}
    inspection.inspect_datasets(files, preprocess_settings(config), str(tmp_path / "inspect.csv"))
    with open(tmp_path / "inspect.csv", encoding="utf-8") as table:
        rows = {row["dataset"]: row for row in csv.DictReader(table)}
    assert [rows[name]["status"] for name in ("A_1m", "B_1m", "C_1m")] == ["ok", "unusable", "ok"]
    assert rows["B_1m"]["problem"] == (
        f"{files['B_1m']}: internal error IndexError: index 0 is out of bounds for axis 0 with size 0"
    )
