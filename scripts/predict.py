import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)

from rnnfleet.predict import forecast_csv
from rnnfleet.runner.orphans import run_job_guard

with run_job_guard(snakemake.wildcards.dataset):
    forecast_csv(
        model_path=snakemake.input.model,
        csv_path=snakemake.input.csv,
        forecasts_path=snakemake.output.forecasts,
        last=snakemake.params.last,
        max_bad_fraction=snakemake.params.max_bad_fraction,
        read_format=snakemake.params.read_format,
        trusted_plugins=snakemake.params.trusted_plugins,
    )
