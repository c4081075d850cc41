"""The report's figures drawn in this process (rnnfleet.plots): each loss curve fitted to its own
data, many drawn in parallel exactly as one process draws them, and datasets without a model.
The report of a real run: tests/workflow/test_report.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import PNG_SIGNATURE, REPO

import rnnfleet.checkpoint
import rnnfleet.plots
from rnnfleet.plots import MIN_CURVES_PER_PROCESS, draw_loss_curves, draw_report_figures


@pytest.mark.slow
def test_each_loss_curve_spans_its_own_data_and_is_the_one_a_figure_of_its_own_gives(tmp_path, monkeypatch):
    shapes = [(5, 0.5, "zero return"), (1, 2.0, "training mean"), (3, 0.01, "naive forecast"), (8, 40.0, "x")]
    metrics_paths, spans = [], {}
    for index, (epochs, scale, baseline) in enumerate(shapes):
        history = [
            {"epoch": e, "train_loss": scale / e, "val_loss": scale * (1 + e % 2) / 2, "seconds": 1}
            for e in range(1, epochs + 1)
        ]
        metrics = {"naive_val_loss": scale * 1.5, "skill": 0.1 * index, "best_epoch": epochs, "history": history}
        metrics |= {"baseline": baseline, "loss": "MSE"} if index % 2 else {}
        path = tmp_path / f"D{index}.json"
        path.write_text(json.dumps(metrics))
        metrics_paths.append(str(path))
        losses = [entry[key] for entry in history for key in ("train_loss", "val_loss")] + [scale * 1.5]
        spans[f"D{index}.svg"] = (1, epochs, min(losses), max(losses))
    limits = {}
    save_figure = rnnfleet.plots.save_figure

    def save_and_record_limits(figure, path, dpi):
        limits[Path(path).name] = (*figure.axes[0].get_xlim(), *figure.axes[0].get_ylim())
        save_figure(figure, path, dpi)

    monkeypatch.setattr(rnnfleet.plots, "save_figure", save_and_record_limits)
    shared = draw_loss_curves(metrics_paths, tmp_path / "shared", "svg")
    assert len(shared) == len(shapes)
    for name, (first_epoch, last_epoch, lowest, highest) in spans.items():
        x_from, x_to, y_from, y_to = limits[name]
        assert x_from <= first_epoch and last_epoch <= x_to and y_from <= lowest and highest <= y_to, name
        assert y_to - y_from < 2 * (highest - lowest) + 1e-9, name  # fitted to this curve, not to all of them
    for metrics_path, curve in zip(metrics_paths, shared, strict=True):
        (alone,) = draw_loss_curves([metrics_path], tmp_path / "alone", "svg")
        assert curve.read_bytes() == alone.read_bytes(), curve.name


@pytest.mark.slow
def test_many_loss_curves_are_drawn_in_parallel_as_one_process_draws_them(tmp_path, monkeypatch):
    workers = []

    class CountingPool(rnnfleet.plots.ProcessPoolExecutor):
        def __init__(self, max_workers):
            workers.append(max_workers)
            super().__init__(max_workers=max_workers)

    monkeypatch.setattr(rnnfleet.plots, "ProcessPoolExecutor", CountingPool)
    monkeypatch.setattr(rnnfleet.plots.os, "cpu_count", lambda: 2)
    metrics_paths = []
    for index in range(2 * MIN_CURVES_PER_PROCESS):
        metrics = {"dataset": f"D{index}", "naive_val_loss": 1.0, "skill": 0.1, "best_epoch": 1, "val_loss": 0.9}
        metrics["history"] = [{"epoch": e, "train_loss": 1 / e + index, "val_loss": 0.9, "seconds": 1} for e in (1, 2)]
        (tmp_path / f"D{index}.json").write_text(json.dumps(metrics))
        metrics_paths.append(str(tmp_path / f"D{index}.json"))
    drawn = rnnfleet.plots.refresh_loss_curves(metrics_paths, tmp_path / "parallel", "svg", processes=4)
    assert workers == [2]  # capped by the CPUs
    assert sorted(path.name for path in drawn) == sorted(f"D{index}.svg" for index in range(len(metrics_paths)))
    draw_loss_curves(metrics_paths, tmp_path / "one", "svg")
    for path in drawn:
        assert path.read_bytes() == (tmp_path / "one" / path.name).read_bytes()
    assert rnnfleet.plots.refresh_loss_curves(metrics_paths, tmp_path / "parallel", "svg", processes=4) == []


def test_curves_of_another_format_are_drawn_again_in_the_one_asked_for(tmp_path):
    metrics = {"dataset": "D", "naive_val_loss": 1.0, "skill": 0.1, "best_epoch": 1, "val_loss": 0.9}
    metrics["history"] = [{"epoch": 1, "train_loss": 1.0, "val_loss": 0.9, "seconds": 1}]
    (tmp_path / "D.json").write_text(json.dumps(metrics))
    (png,) = rnnfleet.plots.refresh_loss_curves([str(tmp_path / "D.json")], tmp_path / "curves", "png")
    assert png.read_bytes().startswith(PNG_SIGNATURE)  # an earlier rnnfleet's folder
    (svg,) = rnnfleet.plots.refresh_loss_curves([str(tmp_path / "D.json")], tmp_path / "curves", "svg")
    assert [path.name for path in (tmp_path / "curves").iterdir()] == ["D.svg"]
    assert svg.read_bytes().startswith(b"<?xml") and b"<dc:date>" not in svg.read_bytes()


def test_loss_curves_are_not_synced_to_the_disk_and_an_empty_one_is_drawn_again(tmp_path, monkeypatch):
    metrics = {"dataset": "D", "naive_val_loss": 1.0, "skill": 0.1, "best_epoch": 1, "val_loss": 0.9}
    metrics["history"] = [{"epoch": 1, "train_loss": 1.0, "val_loss": 0.9, "seconds": 1}]
    (tmp_path / "D.json").write_text(json.dumps(metrics))
    synced = []
    monkeypatch.setattr(rnnfleet.checkpoint.os, "fsync", synced.append)
    (curve,) = rnnfleet.plots.refresh_loss_curves([str(tmp_path / "D.json")], tmp_path / "curves", "svg")
    assert synced == [] and curve.stat().st_size > 0
    assert rnnfleet.plots.refresh_loss_curves([str(tmp_path / "D.json")], tmp_path / "curves", "svg") == []
    curve.write_bytes(b"")  # what a power cut after the rename may leave of a file not synced
    assert rnnfleet.plots.refresh_loss_curves([str(tmp_path / "D.json")], tmp_path / "curves", "svg") == [curve]
    assert curve.read_bytes().startswith(b"<?xml")


def test_compact_paths_are_the_rounded_points_as_relative_steps():
    data = b"M 10.04 20.06 \nL 10.71 19.94 \nL 11.38 -0.26 \nz\nM 1 2 \nL 3 4 \n"
    assert rnnfleet.plots.compact_path(data) == b"M10 20.1l.7-.2l.7-20.2zM1 2l2 2"
    curve = b"M 0 0 C 1.234 2.345 3.456 4.567 5.678 6.789 z"  # not lines: rounded only
    assert rnnfleet.plots.compact_path(curve) == b"M 0 0 C 1.2 2.3 3.5 4.6 5.7 6.8 z"


def test_figures_tolerate_datasets_without_a_model(tmp_path):
    """A dataset whose training failed has a summary row without skill and no history."""
    table = tmp_path / "metrics.csv"
    table.write_text("dataset,val_loss,naive_val_loss,skill,error\nGOOD_1m,0.9,1.0,0.1,\nBAD_1m,,,,diverged\n")
    good = {"dataset": "GOOD_1m", "naive_val_loss": 1.0, "skill": 0.1, "best_epoch": 2}
    good["history"] = [{"epoch": e, "train_loss": 1.0 / e, "val_loss": 0.95 - e / 100, "seconds": 1} for e in (1, 2)]
    (tmp_path / "GOOD_1m.json").write_text(json.dumps(good))
    (tmp_path / "BAD_1m.json").write_text(json.dumps({"dataset": "BAD_1m", "error": "diverged"}))
    draw_report_figures(
        table,
        [str(tmp_path / "GOOD_1m.json"), str(tmp_path / "BAD_1m.json")],
        tmp_path / "curves",
        tmp_path / "skill.png",
        tmp_path / "coverage.png",
        tmp_path / "table.html",
        REPO / "report" / "workflow.rst",
        tmp_path / "start.rst",
        "svg",
    )
    assert [path.name for path in (tmp_path / "curves").iterdir()] == ["GOOD_1m.svg"]
    assert (tmp_path / "skill.png").read_bytes().startswith(PNG_SIGNATURE)
    assert (tmp_path / "coverage.png").read_bytes().startswith(PNG_SIGNATURE)  # no intervals: the chart says so
    table_html = (tmp_path / "table.html").read_text()
    assert table_html.index("GOOD_1m") < table_html.index("BAD_1m") and "<td>diverged</td>" in table_html
    # no test scores, no fleet verdicts: the start page has the fleet's numbers alone
    start = (tmp_path / "start.rst").read_text()
    assert "**The fleet.** 2 dataset(s): 0 trained from scratch" in start and "fleet correction" not in start


def test_a_loss_curve_shows_the_test_period_and_the_folds_below_it(tmp_path, monkeypatch):
    """The per-dataset figure's lower panel: forecast against actual over the test period,
    titled with each walk-forward fold's test skill; a dataset without them shows none."""
    history = [{"epoch": e, "train_loss": 1 / e, "val_loss": 0.9, "seconds": 1} for e in (1, 2)]
    base = {"naive_val_loss": 1.0, "skill": 0.1, "best_epoch": 2, "history": history}
    series = {"window": [0, 5, 10], "actual": [0.1, -0.2, 0.3], "forecast": [0.05, -0.1, 0.2], "units": "log_return"}
    folds = [
        {"fold": 1, "test_skill": 0.03, "test_skill_low": -0.01, "test_skill_high": 0.07},
        {"fold": 2, "test_skill": 0.05, "test_skill_low": 0.01, "test_skill_high": 0.09},
    ]
    scored = {**base, "test_skill": 0.04, "test_skill_low": 0.0, "test_skill_high": 0.08, "test_series": series}
    (tmp_path / "WITH.json").write_text(json.dumps({**scored, "folds": folds}))
    (tmp_path / "WITHOUT.json").write_text(json.dumps(base))
    panels = {}
    save_figure = rnnfleet.plots.save_figure

    def save_and_record_panel(figure, path, dpi):
        lower = figure.axes[1]
        panels[Path(path).stem] = (lower.get_title(), [line.get_xydata().tolist() for line in lower.lines])
        save_figure(figure, path, dpi)

    monkeypatch.setattr(rnnfleet.plots, "save_figure", save_and_record_panel)
    draw_loss_curves([str(tmp_path / "WITH.json"), str(tmp_path / "WITHOUT.json")], tmp_path / "curves", "svg")
    title, lines = panels["WITH"]
    assert title == (
        "test period: forecast vs actual\n"
        "walk-forward: fold 1: +0.0300 [-0.0100, +0.0700]; fold 2: +0.0500 [+0.0100, +0.0900]"
    )
    assert lines == [[[0, 0.1], [5, -0.2], [10, 0.3]], [[0, 0.05], [5, -0.1], [10, 0.2]]]
    assert panels["WITHOUT"] == ("no test period", [[], []])  # nothing left of the dataset drawn before


def test_an_updates_loss_curve_starts_at_epoch_0_and_the_test_chart_is_drawn_in_time(tmp_path, monkeypatch):
    """An update that kept the previous weights (best epoch 0) has a point there; the test
    period's x axis is the forecasts' times, and a figure of an older metrics file without
    times, drawn next with the same axes, counts windows again."""
    history = [{"epoch": e, "train_loss": 0.5, "val_loss": 0.9 + e / 10, "seconds": 1} for e in (1, 2)]
    start = 1704067200  # 2024-01-01 00:00 UTC
    series = {"window": [0, 5], "time": [start, start + 300], "actual": [0.1, -0.2], "forecast": [0.0, 0.1]}
    updated = {"naive_val_loss": 1.0, "skill": 0.1, "best_epoch": 0, "history": history}
    updated |= {"update_start_val_loss": 0.8, "test_series": {**series, "units": "log_return"}}
    older = {**updated, "update_start_val_loss": None, "test_series": {**series, "time": None, "units": "log_return"}}
    del older["test_series"]["time"]
    (tmp_path / "UPDATED.json").write_text(json.dumps(updated))
    (tmp_path / "OLDER.json").write_text(json.dumps(older))
    drawn = {}
    save_figure = rnnfleet.plots.save_figure

    def save_and_record(figure, path, dpi):
        upper, lower = figure.axes[:2]
        validation = upper.lines[1].get_xydata().tolist()
        drawn[Path(path).stem] = (validation, lower.get_xlabel(), lower.lines[0].get_xydata()[:, 0].tolist())
        save_figure(figure, path, dpi)

    monkeypatch.setattr(rnnfleet.plots, "save_figure", save_and_record)
    draw_loss_curves([str(tmp_path / "UPDATED.json"), str(tmp_path / "OLDER.json")], tmp_path / "curves", "svg")
    validation, label, positions = drawn["UPDATED"]
    assert validation == [[0, 0.8], [1, 1.0], [2, 1.1]]
    assert label == "time of the forecast (UTC)"
    assert positions == pytest.approx([start / 86400, (start + 300) / 86400])  # matplotlib's date numbers
    validation, label, positions = drawn["OLDER"]
    assert validation == [[1, 1.0], [2, 1.1]] and label == "test window" and positions == [0, 5]
