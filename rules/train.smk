# gpu_mem is the memory of one GPU: `--resources gpu_mem=N` bounds what the trainings on this
# machine declare together and, on a cluster, what those of each job do (each job has its own
# GPU); Snakemake's default scope would sum it across the whole cluster.
resource_scopes:
    gpu_mem="local",


rule train:
    input:
        **FLEET_START,
        arrays=ARRAYS,
        model_code=MODEL_CODE,
    # update(): Snakemake leaves the model of a re-train or update at its path (forecasts
    # read it) until the job renames the new one over it, and puts it back if the job fails
    # (rnnfleet.hooks.atomic_restore). The metrics file is deleted as usual: the next run
    # trains a dataset again because its metrics are missing.
    output:
        model=update(MODEL),
        metrics=METRICS,
    log:
        log_path("train"),
    benchmark:
        benchmark_path("train")
    priority: 10
    # Out of GPU memory: try again with more (see gpu_mem_for_attempt); after any other
    # error the job is not launched again (rnnfleet.hooks.retry_policy).
    retries: TRAIN_RETRIES
    conda:
        "../envs/rnnfleet.yaml"
    threads: config["train"]["threads"]
    resources:
        gpu_mem=gpu_mem_for_attempt,
        attempt=attempt_number,
    params:
        **dataset_params(train_params),
        **JOB_SETTINGS_PARAM,
    shell:
        job_command(
            "train",
            texts={
                "log_path": "{log:q}",
                "arrays_path": "{input.arrays:q}",
                "model_path": "{output.model:q}",
                "metrics_path": "{output.metrics:q}",
                **FLEET_START_TEXTS,
            },
            values={
                "threads": "{threads}",
                "gpu_mem_gb": "{resources.gpu_mem}",
                "attempt": "{resources.attempt}",
                "attempts": str(TRAIN_RETRIES + 1),
            },
        )
