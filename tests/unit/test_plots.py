"""The report's figures drawn in this process (rnnfleet.plots): each loss curve fitted to its own
data, many drawn in parallel exactly as one process draws them, and datasets without a model.
The report of a real run: tests/workflow/test_report.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import PNG_SIGNATURE

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
        spans[f"D{index}.png"] = (1, epochs, min(losses), max(losses))
    limits = {}
    save_figure = rnnfleet.plots.save_figure

    def save_and_record_limits(figure, path, dpi):
        limits[Path(path).name] = (*figure.axes[0].get_xlim(), *figure.axes[0].get_ylim())
        save_figure(figure, path, dpi)

    monkeypatch.setattr(rnnfleet.plots, "save_figure", save_and_record_limits)
    shared = draw_loss_curves(metrics_paths, tmp_path / "shared")
    assert len(shared) == len(shapes)
    for name, (first_epoch, last_epoch, lowest, highest) in spans.items():
        x_from, x_to, y_from, y_to = limits[name]
        assert x_from <= first_epoch and last_epoch <= x_to and y_from <= lowest and highest <= y_to, name
        assert y_to - y_from < 2 * (highest - lowest) + 1e-9, name  # fitted to this curve, not to all of them
    for metrics_path, curve in zip(metrics_paths, shared, strict=True):
        (alone,) = draw_loss_curves([metrics_path], tmp_path / "alone")
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
    drawn = rnnfleet.plots.refresh_loss_curves(metrics_paths, tmp_path / "parallel", processes=4)
    assert workers == [2]  # capped by the CPUs
    assert sorted(path.name for path in drawn) == sorted(f"D{index}.png" for index in range(len(metrics_paths)))
    draw_loss_curves(metrics_paths, tmp_path / "one")
    for path in drawn:
        assert path.read_bytes() == (tmp_path / "one" / path.name).read_bytes()
    assert rnnfleet.plots.refresh_loss_curves(metrics_paths, tmp_path / "parallel", processes=4) == []


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
        tmp_path / "table.html",
    )
    assert [path.name for path in (tmp_path / "curves").iterdir()] == ["GOOD_1m.png"]
    assert (tmp_path / "skill.png").read_bytes().startswith(PNG_SIGNATURE)
    table_html = (tmp_path / "table.html").read_text()
    assert table_html.index("GOOD_1m") < table_html.index("BAD_1m") and "<td>diverged</td>" in table_html
