import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)

from rnnfleet.summary import write_summary

write_summary(metrics_paths=snakemake.input.metrics, table_path=snakemake.output.table)
