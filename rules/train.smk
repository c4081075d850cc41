rule train:
    input:
        arrays=ARRAYS,
    output:
        model=MODEL,
        metrics=METRICS,
    log:
        log_path("train"),
    benchmark:
        benchmark_path("train")
    priority: 10
    conda:
        "../envs/rnnfleet.yaml"
    threads: config["train"]["threads"]
    resources:
        gpu_mem=config["train"]["gpu_mem"],
    params:
        model=config["model"],
        train=TRAIN_HPARAMS,
        columns=config["columns"],
    script:
        "../scripts/train.py"
