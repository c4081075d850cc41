rule preprocess:
    input:
        data=dataset_files,
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
        **zone_checked(dataset_params(preprocess_settings)),
        **JOB_SETTINGS_PARAM,
        files_fingerprint=files_fingerprint,
        files_json=files_json,
        # An array file of another layout is made again, once (rnnfleet.prep.arrays_file.load_arrays).
        arrays_format=ARRAYS_FORMAT,
    shell:
        job_command(
            "preprocess",
            texts={"arrays_path": "{output.arrays:q}"},
            values={"data_files": "{params.files_json:q}", "threads": "{threads}"},
        )
