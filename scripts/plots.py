import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)

from rnnfleet.report.plots import draw_report_figures
from rnnfleet.runner.orphans import run_job_guard

with run_job_guard("report figures"):
    drawn = draw_report_figures(
        table_path=snakemake.input.table,
        metrics_paths=snakemake.input.metrics,
        loss_curves_folder=snakemake.output.loss_curves,
        skill_plot_path=snakemake.output.skill_plot,
        coverage_plot_path=snakemake.output.coverage_plot,
        table_html_path=snakemake.output.table_html,
        start_template_path=snakemake.input.start_template,
        start_page_path=snakemake.output.start_page,
        processes=snakemake.threads,
    )
    print(f"loss curves drawn: {len(drawn)} (new or re-trained datasets; the others are kept)", file=sys.stderr)
