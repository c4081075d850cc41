import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)

from rnnfleet.errors import job_guard
from rnnfleet.summary import write_summary

with job_guard("summary"):
    write_summary(metrics_paths=snakemake.input.metrics, table_path=snakemake.output.table)
