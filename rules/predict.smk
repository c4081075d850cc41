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
    script:
        "../scripts/predict.py"
