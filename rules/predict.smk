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
        **zone_checked(dataset_params(predict_read_params)),
        # The user named these in the config: a model file may run them (rnnfleet.plugins).
        last=config["predict"]["last"] or None,
        trusted_plugins=MODEL_CODE + FEATURE_CODE,
    script:
        "../scripts/predict.py"
