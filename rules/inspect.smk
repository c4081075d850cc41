rule inspect:
    input:
        bars=[path for paths in DATA_FILES.values() for path in paths],
        # A changed checksum file re-checks (a corrupted download is found without --forcerun).
        checksums=sorted(f"{path}{CHECKSUM_SUFFIX}" for path in FOUND.checksummed),
        feature_code=FEATURE_CODE,
    output:
        table=INSPECTION,
    log:
        f"{PATHS['logs']}/inspect.log",
    localrule: True
    conda:
        "../envs/rnnfleet.yaml"
    params:
        files=DATA_FILES,
        settings=PREPROCESS_SETTINGS,
        dataset_settings=per_distinct_config(preprocess_settings),
        quality=config["quality"],
        dataset_quality=DATASET_QUALITY,
    script:
        "../scripts/inspect_data.py"
