# export.onnx: each model also as one ONNX file (rnnfleet.forecast.export_onnx, docs/export.md), made
# again when its model changes. A job of its own per dataset, after that dataset's training
# only and below every training in priority: a failing export costs its own file alone.


rule export_onnx:
    input:
        model=MODEL,
        bars=dataset_files,
    output:
        onnx=EXPORT,
    log:
        log_path("export"),
    priority: -10
    conda:
        "../envs/rnnfleet.yaml"
    params:
        **dataset_params(predict_read_params),
        # The user named these in the config: a model file may run them (rnnfleet.plugins).
        **JOB_SETTINGS_PARAM,
        trusted_plugins=MODEL_CODE + FEATURE_CODE,
        bars_json=input_json("bars"),
    shell:
        job_command(
            "export",
            texts={"model_path": "{input.model:q}", "onnx_path": "{output.onnx:q}"},
            values={"bar_files": "{params.bars_json:q}", "threads": "{threads}"},
        )
