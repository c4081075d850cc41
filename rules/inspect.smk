rule inspect:
    input:
        list(DATA_FILES.values()),
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
