# The fleet's pretrained model (train.init: fleet; rnnfleet.pretraining, docs/model.md): one
# job trains the configured model on the bars of every dataset before the fleet's cutoff;
# each train job then starts from its weights.
#
# Its inputs are the array files of the datasets it serves, marked ancient(): a morning's new
# bars (newer array files) do not re-run it. Those datasets are frozen in its lineage file
# (models/.fleet/pretrained.json), read here: while its settings are unchanged, a dataset added
# later is not one of its inputs and starts from the existing model (the set of inputs, a rerun
# trigger, stays the same). Its params are its settings: changing the model, training, preprocess
# or pretrain settings re-runs it, for every dataset then present; `--forcerun pretrain` re-runs
# it for the datasets it serves (delete models/.fleet to have it serve every dataset present).
# The train jobs that start from it then re-run (it is one of their inputs).
from rnnfleet.pretraining import frozen_membership, pretrained_paths

PRETRAINED, PRETRAINED_LINEAGE = pretrained_paths(PATHS["models"])
PRETRAIN_SETTINGS = JOB_SETTINGS["pretrain"]["settings"]
PRETRAIN_DATASETS = frozen_membership(
    PRETRAINED_LINEAGE, PRETRAIN_SETTINGS["settings_sha256"], DATASETS
)


rule pretrain:
    input:
        arrays=[ancient(path) for path in expand(ARRAYS, dataset=PRETRAIN_DATASETS)],
        model_code=MODEL_CODE,
        feature_code=FEATURE_CODE,
    output:
        model=PRETRAINED,
        lineage=PRETRAINED_LINEAGE,
    log:
        f"{PATHS['logs']}/pretrain/fleet.log",
    benchmark:
        f"{PATHS['benchmarks']}/pretrain/fleet.tsv"
    priority: 20
    conda:
        "../envs/rnnfleet.yaml"
    threads: config["train"]["threads"]
    resources:
        gpu_mem=config["train"]["gpu_mem"],
    params:
        settings={
            key: value
            for key, value in PRETRAIN_SETTINGS.items()
            if key != "settings_sha256"
        },
        arrays_json=json.dumps(
            dict(zip(PRETRAIN_DATASETS, expand(ARRAYS, dataset=PRETRAIN_DATASETS)))
        ),
    shell:
        " ".join(
            [
                JOB_CLIENT,
                "pretrain --log {log:q}",
                f"--settings {quoted(RUN_SETTINGS_FILE)}",
                "--text arrays_json {params.arrays_json:q}",
                "--text model_path {output.model:q}",
                "--text lineage_path {output.lineage:q}",
                "--value threads {threads} --value gpu_mem_gb {resources.gpu_mem}",
            ]
        )
