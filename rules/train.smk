rule train:
    input:
        arrays=ARRAYS,
    output:
        model=MODEL,
        metrics=METRICS,
    params:
        model=config["model"],
        train=TRAIN_HPARAMS,
        columns=config["columns"],
    log:
        log_path("train"),
    benchmark:
        benchmark_path("train")
    threads: config["train"]["threads"]
    resources:
        gpu_mem=config["train"]["gpu_mem"],
    priority: 10
    script:
        "../scripts/train.py"
