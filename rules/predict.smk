def predict_read_params(settings_config):
    """How the predict rule reads the recent bars: as preprocess reads the dataset's files."""
    return {
        "max_bad_fraction": settings_config["preprocess"]["max_bad_fraction"],
        "read_format": settings_config["format"],
    }


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
        **dataset_params(predict_read_params),
        # The user named these in the config: a model file may run them (rnnfleet.plugins).
        last=config["predict"]["last"] or None,
        trusted_plugins=MODEL_CODE + FEATURE_CODE,
    script:
        "../scripts/predict.py"
