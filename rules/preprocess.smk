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
        **PREPROCESS_SETTINGS,
    shell:
        job_command(
            "preprocess",
            texts={"csv_path": "{input.csv:q}", "arrays_path": "{output.arrays:q}"},
            values={},
        )
