# The fleet's pretrained model (train.init: fleet; rnnfleet.pretraining, docs/model.md): one
# job trains the configured model on the bars of every dataset before the fleet's cutoff;
# each train job then starts from its weights.
#
# Its params are its settings (model, training, preprocess, pretrain): changing one re-runs it
# for every dataset then present, and then the train jobs that start from it (it is one of
# their inputs). Its inputs are the array files of the datasets it serves. While its settings
# are unchanged (its lineage file, models/.fleet/pretrained.json, records their fingerprint),
# the datasets it serves are those that file names, and their array files are marked
# ancient(): a morning's new bars (newer array files) do not re-run it, and a dataset added
# later is not one of its inputs (the set of inputs, a rerun trigger, stays the same) and
# starts from the existing model. Once its settings differ they are plain inputs: Snakemake
# skips a job's own params check when a job it depends on runs (DAG.update_needrun masks
# it) and passes an ancient input's update on to no one, so with ancient() a change of
# settings that also re-runs a preprocess job would not re-run the pretraining.
# `--forcerun pretrain` re-runs it for the datasets it serves (delete models/.fleet to have
# it serve every dataset present).
from rnnfleet.pretraining import frozen_membership, pretrained_paths

PRETRAINED, PRETRAINED_LINEAGE = pretrained_paths(PATHS["models"])
PRETRAIN_SETTINGS = JOB_SETTINGS["pretrain"]["settings"]
PRETRAIN_DATASETS, PRETRAIN_FROZEN = frozen_membership(
    PRETRAINED_LINEAGE, PRETRAIN_SETTINGS["settings_sha256"], DATASETS
)
PRETRAIN_ARRAYS = expand(ARRAYS, dataset=PRETRAIN_DATASETS)


rule pretrain:
    input:
        arrays=(
            [ancient(path) for path in PRETRAIN_ARRAYS]
            if PRETRAIN_FROZEN
            else PRETRAIN_ARRAYS
        ),
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
        arrays_json=json.dumps(dict(zip(PRETRAIN_DATASETS, PRETRAIN_ARRAYS))),
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
