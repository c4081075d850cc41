import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)

from rnnfleet.export_onnx import export_one
from rnnfleet.runner.orphans import run_job_guard

with run_job_guard(snakemake.wildcards.dataset):
    written = export_one(
        snakemake.input.model,
        list(snakemake.input.bars),
        snakemake.output.onnx,
        max_bad_fraction=snakemake.params.max_bad_fraction,
        trusted_plugins=snakemake.params.trusted_plugins,
    )
sys.exit(0 if written else 1)
