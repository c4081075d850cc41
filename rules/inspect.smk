rule inspect:
    input:
        bars=list(DATA_FILES.values()),
        feature_code=FEATURE_CODE,
    output:
        table=INSPECTION,
    log:
        f"{PATHS['logs']}/inspect.log",
    localrule: True
    conda:
        "../envs/rnnfleet.yaml"
    params:
        datasets=DATASETS,
        settings=PREPROCESS_SETTINGS,
    script:
        "../scripts/inspect_data.py"
