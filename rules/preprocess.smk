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
    script:
        "../scripts/preprocess.py"
