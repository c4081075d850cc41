import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)

from rnnfleet.data import preprocess_one
from rnnfleet.errors import job_guard

with job_guard(snakemake.wildcards.dataset):
    preprocess_one(
        csv_path=snakemake.input.csv,
        arrays_path=snakemake.output.arrays,
        seq_len=snakemake.params.seq_len,
        horizon=snakemake.params.horizon,
        val_fraction=snakemake.params.val_fraction,
        columns=snakemake.params.columns,
        max_bad_fraction=snakemake.params.max_bad_fraction,
    )
