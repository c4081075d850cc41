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
        **JOB_SETTINGS_PARAM,
        **ZONE_FREE_PARAM,
        last=config["predict"]["last"] or None,
        trusted_plugins=MODEL_CODE + FEATURE_CODE,
        csv_json=input_json("csv"),
    shell:
        job_command(
            "predict",
            texts={
                "model_path": "{input.model:q}",
                "forecasts_path": "{output.forecasts:q}",
            },
            values={
                "csv_path": "{params.csv_json:q}",
                "threads": "{threads}",
                **ZONE_FREE_VALUE,
            },
        )
