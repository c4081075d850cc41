import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)

from rnnfleet.errors import job_guard
from rnnfleet.inspection import inspect_datasets

with job_guard("inspect"):
    inspect_datasets(
        files=dict(snakemake.params.files),
        settings=dict(snakemake.params.settings),
        table_path=snakemake.output.table,
    )
