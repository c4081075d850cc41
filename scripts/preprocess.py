import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)

from rnnfleet.errors import job_guard
from rnnfleet.warm import run_job

with job_guard(snakemake.wildcards.dataset):
    run_job(
        "rnnfleet.jobs:preprocess_job",
        dict(
            dataset=snakemake.wildcards.dataset,
            csv_path=snakemake.input.csv,
            arrays_path=snakemake.output.arrays,
            seq_len=snakemake.params.seq_len,
            horizon=snakemake.params.horizon,
            feature_definition=snakemake.params.features,
            target=snakemake.params.target,
            val_fraction=snakemake.params.val_fraction,
            columns=snakemake.params.columns,
            max_bad_fraction=snakemake.params.max_bad_fraction,
            read_format=snakemake.params.read_format,
            max_gap=snakemake.params.max_gap,
        ),
        warm=snakemake.config["train"]["warm_workers"],
    )
