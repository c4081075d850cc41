# export.onnx: each model also as one ONNX file (rnnfleet.forecast.export_onnx, docs/export.md), made
# again when its model changes. A job of its own per dataset, after that dataset's training
# only and below every training in priority: a failing export costs its own file alone.
EXPORT = f"{PATHS['exports']}/{{dataset}}.onnx"
EXPORTS = expand(EXPORT, dataset=DATASETS) if config["export"]["onnx"] else []
# A killed run's .partial files there are removed by the next run (claim_run_folder).
OUTPUT_FOLDERS.append(PATHS["exports"])

if EXPORTS:
    import importlib.util

    missing = [
        name
        for name in ("onnx", "onnxruntime")
        if importlib.util.find_spec(name) is None
    ]
    if missing:
        raise WorkflowError(
            f"config key 'export.onnx' = true needs {' and '.join(missing)}, not installed in this "
            "Python: pip install -r requirements-onnx.txt (or set export.onnx: false)"
        )


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
