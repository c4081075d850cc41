from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


report: "report/workflow.rst"


include: "rules/config.smk"
include: "rules/datasets.smk"
include: "rules/jobs.smk"
include: "rules/preprocess.smk"
include: "rules/train.smk"
include: "rules/summary.smk"
include: "rules/plots.smk"
include: "rules/predict.smk"
include: "rules/inspect.smk"
include: "rules/mps.smk"
include: "rules/handlers.smk"


rule all:
    default_target: True
    input:
        expand(MODEL, dataset=DATASETS),
        SUMMARY,
        rules.plots.output,
        expand(PREDICTIONS, dataset=FORECAST_DATASETS),
