"""The plots job: the report's figures and pages from the summary table and the metrics files
(loss curves, fleet charts, the table page, the start page)."""

from __future__ import annotations

import os
from pathlib import Path

from rnnfleet.report.charts import draw_coverage_overview, draw_skill_overview
from rnnfleet.report.loss_curves import refresh_loss_curves
from rnnfleet.report.rows import read_table
from rnnfleet.report.start_page import write_start_page
from rnnfleet.report.table_page import write_table_html


def draw_report_figures(
    table_path: str | os.PathLike,
    metrics_paths: list[str],
    loss_curves_folder: str | os.PathLike,
    skill_plot_path: str | os.PathLike,
    coverage_plot_path: str | os.PathLike,
    table_html_path: str | os.PathLike,
    start_template_path: str | os.PathLike,
    start_page_path: str | os.PathLike,
    processes: int = 1,
) -> list[Path]:
    """The plots job: everything the report shows besides what Snakemake adds itself. The
    loss curves folder is updated in place (only new or re-trained datasets are drawn);
    returns the curves drawn."""
    columns, rows = read_table(table_path)
    write_table_html(rows, columns, table_html_path)
    draw_skill_overview(rows, skill_plot_path)
    draw_coverage_overview(rows, coverage_plot_path)
    write_start_page(start_template_path, rows, start_page_path)
    return refresh_loss_curves(metrics_paths, loss_curves_folder, processes)
