"""The report's figures drawn in this process (rnnfleet.report.plots and the modules it calls): each loss curve fitted to its own
data, many drawn in parallel exactly as one process draws them, and datasets without a model.
The report of a real run: tests/workflow/test_report.py.
"""

from __future__ import annotations

import json
import math
from xml.etree import ElementTree

import pytest
from conftest import PNG_SIGNATURE, REPO, SVG_NAMESPACE, svg_texts

import rnnfleet.atomic_files
import rnnfleet.report.loss_curves
from rnnfleet.report import svg_chart
from rnnfleet.report.loss_curves import MIN_CURVES_PER_PROCESS, draw_loss_curves, loss_curve_panels
from rnnfleet.report.plots import draw_report_figures


def test_each_loss_curve_spans_its_own_data_and_is_the_one_a_figure_of_its_own_gives(tmp_path):
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
        spans[f"D{index}"] = (metrics, (1, epochs, min(losses), max(losses)))
    shared = draw_loss_curves(metrics_paths, tmp_path / "shared")
    assert [path.name for path in shared] == [f"D{index}.svg" for index in range(len(shapes))]
    for name, (metrics, (first_epoch, last_epoch, lowest, highest)) in spans.items():
        losses_panel, _ = loss_curve_panels(name, metrics)
        (x_from, x_to), (y_from, y_to) = losses_panel.x_limits(), losses_panel.y_limits()
        assert x_from <= first_epoch and last_epoch <= x_to and y_from <= lowest and highest <= y_to, name
        assert y_to - y_from < 2 * (highest - lowest) + 1e-9, name  # fitted to this curve, not to all of them
        assert svg_texts(tmp_path / "shared" / f"{name}.svg")[0].startswith(f"{name}: validation skill")
    for metrics_path, curve in zip(metrics_paths, shared, strict=True):
        (alone,) = draw_loss_curves([metrics_path], tmp_path / "alone")
        assert curve.read_bytes() == alone.read_bytes(), curve.name


def test_many_loss_curves_are_drawn_in_parallel_as_one_process_draws_them(tmp_path, monkeypatch):
    workers = []

    class CountingPool(rnnfleet.report.loss_curves.ProcessPoolExecutor):
        def __init__(self, max_workers):
            workers.append(max_workers)
            super().__init__(max_workers=max_workers)

    monkeypatch.setattr(rnnfleet.report.loss_curves, "ProcessPoolExecutor", CountingPool)
    monkeypatch.setattr(rnnfleet.report.loss_curves.os, "cpu_count", lambda: 2)
    metrics_paths = []
    for index in range(2 * MIN_CURVES_PER_PROCESS):
        metrics = {"dataset": f"D{index}", "naive_val_loss": 1.0, "skill": 0.1, "best_epoch": 1, "val_loss": 0.9}
        metrics["history"] = [{"epoch": e, "train_loss": 1 / e + index, "val_loss": 0.9, "seconds": 1} for e in (1, 2)]
        (tmp_path / f"D{index}.json").write_text(json.dumps(metrics))
        metrics_paths.append(str(tmp_path / f"D{index}.json"))
    drawn = rnnfleet.report.loss_curves.refresh_loss_curves(metrics_paths, tmp_path / "parallel", processes=4)
    assert workers == [2]  # capped by the CPUs
    assert sorted(path.name for path in drawn) == sorted(f"D{index}.svg" for index in range(len(metrics_paths)))
    draw_loss_curves(metrics_paths, tmp_path / "one")
    for path in drawn:
        assert path.read_bytes() == (tmp_path / "one" / path.name).read_bytes()
    assert rnnfleet.report.loss_curves.refresh_loss_curves(metrics_paths, tmp_path / "parallel", processes=4) == []


def test_an_earlier_rnnfleets_png_curve_is_replaced_by_an_svg_one(tmp_path):
    metrics = {"dataset": "D", "naive_val_loss": 1.0, "skill": 0.1, "best_epoch": 1, "val_loss": 0.9}
    metrics["history"] = [{"epoch": 1, "train_loss": 1.0, "val_loss": 0.9, "seconds": 1}]
    (tmp_path / "D.json").write_text(json.dumps(metrics))
    (tmp_path / "curves").mkdir()
    (tmp_path / "curves" / "D.png").write_bytes(PNG_SIGNATURE)  # newer than its metrics, but a PNG
    (svg,) = rnnfleet.report.loss_curves.refresh_loss_curves([str(tmp_path / "D.json")], tmp_path / "curves")
    assert [path.name for path in (tmp_path / "curves").iterdir()] == ["D.svg"]
    assert svg.read_bytes().startswith(b"<?xml") and svg_texts(svg)[0] == "D: validation skill +0.1000"


def test_loss_curves_are_not_synced_to_the_disk_and_an_empty_one_is_drawn_again(tmp_path, monkeypatch):
    metrics = {"dataset": "D", "naive_val_loss": 1.0, "skill": 0.1, "best_epoch": 1, "val_loss": 0.9}
    metrics["history"] = [{"epoch": 1, "train_loss": 1.0, "val_loss": 0.9, "seconds": 1}]
    (tmp_path / "D.json").write_text(json.dumps(metrics))
    synced = []
    monkeypatch.setattr(rnnfleet.atomic_files.os, "fsync", synced.append)
    (curve,) = rnnfleet.report.loss_curves.refresh_loss_curves([str(tmp_path / "D.json")], tmp_path / "curves")
    assert synced == [] and curve.stat().st_size > 0
    assert rnnfleet.report.loss_curves.refresh_loss_curves([str(tmp_path / "D.json")], tmp_path / "curves") == []
    curve.write_bytes(b"")  # what a power cut after the rename may leave of a file not synced
    assert rnnfleet.report.loss_curves.refresh_loss_curves([str(tmp_path / "D.json")], tmp_path / "curves") == [curve]
    assert curve.read_bytes().startswith(b"<?xml")


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
    )
    assert [path.name for path in (tmp_path / "curves").iterdir()] == ["GOOD_1m.svg"]
    assert (tmp_path / "skill.png").read_bytes().startswith(PNG_SIGNATURE)
    assert (tmp_path / "coverage.png").read_bytes().startswith(PNG_SIGNATURE)  # no intervals: the chart says so
    table_html = (tmp_path / "table.html").read_text()
    assert table_html.index("GOOD_1m") < table_html.index("BAD_1m") and "<td>diverged</td>" in table_html
    # no test scores, no fleet verdicts: the start page has the fleet's numbers alone
    start = (tmp_path / "start.rst").read_text()
    assert "**The fleet.** 2 dataset(s): 0 trained from scratch" in start and "fleet correction" not in start


def test_a_loss_curve_shows_the_test_period_and_the_folds_below_it(tmp_path):
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
    _, lower = loss_curve_panels("WITH", {**scored, "folds": folds})
    title = "test period: forecast vs actual\nwalk-forward: fold 1: +0.0300 [-0.0100, +0.0700]; fold 2: +0.0500 [+0.0100, +0.0900]"
    assert lower.title == title
    assert [list(zip(line.xs, line.ys, strict=True)) for line in lower.lines] == [
        [(0, 0.1), (5, -0.2), (10, 0.3)],
        [(0, 0.05), (5, -0.1), (10, 0.2)],
    ]
    _, empty = loss_curve_panels("WITHOUT", base)
    assert empty.title == "no test period" and [list(line.xs) for line in empty.lines] == [[], []]
    with_folds, without = draw_loss_curves([str(tmp_path / "WITH.json"), str(tmp_path / "WITHOUT.json")], tmp_path)
    assert {"test period: forecast vs actual", title.split("\n")[1], "actual", "forecast"} <= set(svg_texts(with_folds))
    polylines = list(ElementTree.parse(with_folds).iter(f"{SVG_NAMESPACE}polyline"))
    assert [len(line.get("points").split()) for line in polylines] == [2, 2, 2, 3, 3]  # 3 losses, 2 forecast lines
    assert "no test period" in svg_texts(without)


def test_an_updates_loss_curve_starts_at_epoch_0_and_the_test_chart_is_drawn_in_time():
    """An update that kept the previous weights (best epoch 0) has a point there; the test
    period's x axis is the forecasts' times (clock times and the date under the first
    tick), and a figure of an older metrics file without times counts windows."""
    history = [{"epoch": e, "train_loss": 0.5, "val_loss": 0.9 + e / 10, "seconds": 1} for e in (1, 2)]
    start = 1704067200  # 2024-01-01 00:00 UTC
    series = {"window": [0, 5], "time": [start, start + 3600], "actual": [0.1, -0.2], "forecast": [0.0, 0.1]}
    updated = {"naive_val_loss": 1.0, "skill": 0.1, "best_epoch": 0, "history": history}
    updated |= {"update_start_val_loss": 0.8, "test_series": {**series, "units": "log_return"}}
    upper, lower = loss_curve_panels("UPDATED", updated)
    validation = upper.lines[1]
    assert list(zip(validation.xs, validation.ys, strict=True)) == [(0, 0.8), (1, 1.0), (2, 1.1)]
    assert upper.marks[0].x == 0 and upper.marks[0].label == "best epoch (0)"
    assert lower.x_label == "time of the forecast (UTC)" and lower.x_axis == "time"
    assert list(lower.lines[0].xs) == [start, start + 3600]
    ticks = svg_chart.time_ticks(*lower.x_limits())
    assert ticks[0] == (start, "00:00\n2024-01-01") and ticks[-1] == (start + 3600, "01:00")
    older = {**updated, "test_series": {key: value for key, value in series.items() if key != "time"} | {"units": ""}}
    _, lower = loss_curve_panels("OLDER", older)
    assert lower.x_label == "test window" and list(lower.lines[0].xs) == [0, 5]


def test_ticks_are_round_values_inside_the_limits():
    values, labels = zip(*svg_chart.number_ticks(0.83, 1.07), strict=True)
    assert values == pytest.approx([0.85, 0.9, 0.95, 1.0, 1.05]) and labels == ("0.85", "0.90", "0.95", "1.00", "1.05")
    assert [label for _, label in svg_chart.number_ticks(-0.0024, 0.0023)] == ["-0.002", "-0.001", "0", "0.001", "0.002"]  # fmt: skip
    assert [value for value, _ in svg_chart.number_ticks(0.7, 7.3, integer=True)] == [1, 2, 3, 4, 5, 6, 7]
    assert [value for value, _ in svg_chart.number_ticks(-2, 98, integer=True)] == [0, 20, 40, 60, 80]
    day = 1704067200  # 2024-01-01 00:00 UTC
    labels = [label for _, label in svg_chart.time_ticks(day - 3 * 3600, day + 5 * 3600)]
    assert labels == ["22:00\n2023-12-31", "00:00\n2024-01-01", "02:00", "04:00"]
    months = svg_chart.time_ticks(day - 20 * 86400, day + 280 * 86400)  # months: at their first days
    assert months == [(day, "Jan\n2024"), (1709251200, "Mar"), (1714521600, "May"), (1719792000, "Jul"), (1725148800, "Sep")]  # fmt: skip


def test_a_value_that_is_not_finite_breaks_the_line_and_leaves_the_limits_alone():
    line = svg_chart.Line([1, 2, 3, 4, 5], [1.0, 2.0, math.nan, 4.0, math.inf], "l", "#000")
    panel = svg_chart.Panel("t", "x", "y", 100, lines=(line,))
    assert svg_chart.finite_runs(line.xs, line.ys) == [[(1, 1.0), (2, 2.0)], [(4, 4.0)]]
    assert panel.y_limits() == pytest.approx((1.0 - 0.15, 4.0 + 0.15))
    document = ElementTree.fromstring(svg_chart.chart_svg([panel]))
    assert len(list(document.iter(f"{SVG_NAMESPACE}polyline"))) == 2


def test_text_in_a_chart_is_escaped():
    panel = svg_chart.Panel("A<B & C>", "x", "y", 100, lines=(svg_chart.Line([0, 1], [0, 1], "<script>", "#000"),))
    texts = [
        element.text for element in ElementTree.fromstring(svg_chart.chart_svg([panel])).iter(f"{SVG_NAMESPACE}text")
    ]
    assert "A<B & C>" in texts and "<script>" in texts


def test_a_model_of_several_horizons_has_a_test_period_panel_per_horizon_with_its_skill():
    history = [{"epoch": 1, "train_loss": 1.0, "val_loss": 0.9, "seconds": 1}]

    def series(offset):
        return {"window": [0, 1], "actual": [0.1 + offset, 0.2], "forecast": [0.0, offset], "units": "log_return"}

    def scores(horizon, skill):
        return {
            "horizon": horizon,
            "test_skill": skill,
            "test_skill_low": skill - 0.01,
            "test_skill_high": skill + 0.01,
        }

    metrics = {"naive_val_loss": 1.0, "skill": 0.1, "best_epoch": 1, "history": history, **scores(1, 0.05)}
    metrics |= {"test_series": series(0.0)}
    metrics["horizons"] = [scores(1, 0.05), scores(5, 0.02) | {"test_series": series(0.5)}, scores(15, -0.01)]
    _, first, second, third = loss_curve_panels("D", metrics)
    assert first.title == "test period: forecast vs actual, horizon 1: test skill +0.0500 [+0.0400, +0.0600]"
    assert second.title == "test period: forecast vs actual, horizon 5: test skill +0.0200 [+0.0100, +0.0300]"
    assert list(second.lines[1].ys) == [0.0, 0.5] and list(first.lines[1].ys) == [0.0, 0.0]
    assert third.title.startswith("no test period, horizon 15")  # an entry without its chart points
    single = {key: value for key, value in metrics.items() if key != "horizons"}
    assert [panel.title for panel in loss_curve_panels("D", single)[1:]] == ["test period: forecast vs actual"]
