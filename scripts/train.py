import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)

from rnnfleet.errors import job_guard
from rnnfleet.warm import process_started_at, run_job

with job_guard(snakemake.wildcards.dataset):
    run_job(
        "rnnfleet.jobs:train_job",
        dict(
            attempt=snakemake.resources.attempt,
            log_path=snakemake.log[0],
            dataset=snakemake.wildcards.dataset,
            arrays_path=snakemake.input.arrays,
            model_path=snakemake.output.model,
            metrics_path=snakemake.output.metrics,
            model_hparams=snakemake.params.model,
            train_hparams={**snakemake.params.train, "device": snakemake.config["train"]["device"]},
            threads=snakemake.threads,
            gpu_mem_gb=snakemake.resources.gpu_mem,
            columns=snakemake.params.columns,
            process_started_at=process_started_at(),
        ),
        warm=snakemake.config["train"]["warm_workers"],
    )
