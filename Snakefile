import os
import sys
from pathlib import Path

import snakemake
from snakemake.utils import min_version

min_version("9.27.1")

# rnnfleet's Python package (scripts/rnnfleet), for this file and rules/: beside this
# Snakefile, not workflow.basedir (a project folder's own Snakefile includes this one).
RNNFLEET_DIR = Path(workflow.current_basedir.get_path_or_uri(secret_free=False))
sys.path.insert(0, str(RNNFLEET_DIR / "scripts"))

from rnnfleet.workflow.config_check import checked_config_file
from rnnfleet.snakemake_version import unsupported_snakemake_line

# One supported Snakemake release (rnnfleet.snakemake_version); another one runs, said once.
if workflow.is_main_process and (
    line := unsupported_snakemake_line(snakemake.__version__)
):
    print(line, file=sys.stderr)

# The settings: a project folder's config/config.yaml (rnnfleet init, docs/project-folder.md),
# else config.yaml in the folder snakemake runs in (this clone's is the demo's).
CONFIG_FILE = (
    "config/config.yaml" if os.path.exists("config/config.yaml") else "config.yaml"
)


configfile: checked_config_file(CONFIG_FILE)


include: "rules/config.smk"
include: "rules/datasets.smk"
include: "rules/jobs.smk"
include: "rules/preprocess.smk"
include: "rules/pretrain.smk"
include: "rules/train.smk"
include: "rules/summary.smk"
include: "rules/plots.smk"
include: "rules/predict.smk"
include: "rules/export.smk"
include: "rules/inspect.smk"
include: "rules/tune.smk"
include: "rules/checks.smk"
include: "rules/handlers.smk"


# The start page with the fleet's verdicts once a run has made it (START_PAGE).
report: os.path.abspath(START_PAGE) if os.path.exists(START_PAGE) else START_TEMPLATE


rule all:
    default_target: True
    input:
        expand(MODEL, dataset=DATASETS),
        SUMMARY,
        FORECASTS,
        rules.plots.output,
        expand(PREDICTIONS, dataset=FORECAST_DATASETS),
        EXPORTS,
