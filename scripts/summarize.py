import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)

from rnnfleet.report.summary import write_summary
from rnnfleet.runner.orphans import run_job_guard

with run_job_guard("summary"):
    write_summary(
        metrics_paths=snakemake.input.metrics,
        table_path=snakemake.output.table,
        forecasts_path=snakemake.output.forecasts,
        model_pattern=snakemake.params.models_folder + "/{dataset}.pt",
        fleet=dict(snakemake.params.fleet),
        quality_thresholds=dict(snakemake.params.quality),
        dataset_quality=dict(snakemake.params.dataset_quality),
    )
