import os

from snakemake.utils import min_version

min_version("9.0")


# The settings: a project folder's config/config.yaml (rnnfleet init, docs/project-folder.md),
# else config.yaml in the folder snakemake runs in (this clone's is the demo's).
configfile: "config/config.yaml" if os.path.exists("config/config.yaml") else "config.yaml"


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
include: "rules/checks.smk"
include: "rules/handlers.smk"


rule all:
    default_target: True
    input:
        expand(MODEL, dataset=DATASETS),
        SUMMARY,
        rules.plots.output,
        expand(PREDICTIONS, dataset=FORECAST_DATASETS),
