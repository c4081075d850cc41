rule preprocess:
    input:
        csv=dataset_csv,
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
        val_fraction=config["preprocess"]["val_fraction"],
        max_bad_fraction=config["preprocess"]["max_bad_fraction"],
    script:
        "../scripts/preprocess.py"
