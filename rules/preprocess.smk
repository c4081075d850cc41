rule preprocess:
    input:
        csv=dataset_csv,
        feature_code=FEATURE_CODE,
    output:
        arrays=ARRAYS,
    log:
        log_path("preprocess"),
    benchmark:
        benchmark_path("preprocess")
    conda:
        "../envs/rnnfleet.yaml"
    threads: 1
    params:
        columns=config["columns"],
        seq_len=config["train"]["seq_len"],
        horizon=config["train"]["horizon"],
        features=config["features"],
        target=config["target"],
        val_fraction=config["preprocess"]["val_fraction"],
        max_bad_fraction=config["preprocess"]["max_bad_fraction"],
    script:
        "../scripts/preprocess.py"
