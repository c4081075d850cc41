from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config.yaml"


validate(config, schema="schemas/config.schema.yaml")


include: "rules/common.smk"
include: "rules/preprocess.smk"
include: "rules/train.smk"
include: "rules/summary.smk"


rule all:
    input:
        expand(MODEL, dataset=DATASETS),
        SUMMARY,
    default_target: True
