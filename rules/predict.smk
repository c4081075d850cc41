rule predict:
    input:
        model=MODEL,
        csv=recent_bars_csv,
    output:
        forecasts=PREDICTIONS,
    log:
        log_path("predict"),
    conda:
        "../envs/rnnfleet.yaml"
    params:
        last=config["predict"]["last"] or None,
        max_bad_fraction=config["preprocess"]["max_bad_fraction"],
        read_format=config["format"],
        # The user named these in the config: a model file may run them (rnnfleet.plugins).
        trusted_plugins=MODEL_CODE + FEATURE_CODE,
    script:
        "../scripts/predict.py"
