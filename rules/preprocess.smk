rule preprocess:
    input:
        csv=dataset_csv,
    output:
        arrays=ARRAYS,
    params:
        columns=config["columns"],
        seq_len=config["train"]["seq_len"],
        horizon=config["train"]["horizon"],
        val_fraction=config["preprocess"]["val_fraction"],
        max_bad_fraction=config["preprocess"]["max_bad_fraction"],
    log:
        log_path("preprocess"),
    benchmark:
        benchmark_path("preprocess")
    threads: 1
    script:
        "../scripts/preprocess.py"
