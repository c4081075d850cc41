import sys

sys.stderr = open(snakemake.log[0], "w", buffering=1)

from rnnfleet.device import tune_cpu_allocator

tune_cpu_allocator()  # before torch allocates anything

from rnnfleet.training import train_one

train_one(
    dataset=snakemake.wildcards.dataset,
    arrays_path=snakemake.input.arrays,
    model_path=snakemake.output.model,
    metrics_path=snakemake.output.metrics,
    model_hparams=snakemake.params.model,
    train_hparams={**snakemake.params.train, "device": snakemake.config["train"]["device"]},
    threads=snakemake.threads,
    gpu_mem_gb=snakemake.resources.gpu_mem,
    columns=snakemake.params.columns,
)
