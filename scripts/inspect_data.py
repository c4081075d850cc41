import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)

from rnnfleet.bars.inspection import inspect_datasets
from rnnfleet.runner.orphans import run_job_guard

with run_job_guard("inspect"):
    inspect_datasets(
        files=dict(snakemake.params.files),
        settings=dict(snakemake.params.settings),
        dataset_settings=dict(snakemake.params.dataset_settings),
        table_path=snakemake.output.table,
        quality_thresholds=dict(snakemake.params.quality),
        dataset_quality=dict(snakemake.params.dataset_quality),
    )
