import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)

from rnnfleet.predict import forecast_csv

forecast_csv(
    model_path=snakemake.input.model,
    csv_path=snakemake.input.csv,
    forecasts_path=snakemake.output.forecasts,
    last=snakemake.params.last,
    max_bad_fraction=snakemake.params.max_bad_fraction,
)
