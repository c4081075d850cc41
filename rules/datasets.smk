# Datasets: which files in data_dir make which dataset, the path of every output, and
# the input functions of the rules.
import json
import sys

from rnnfleet.discovery import DATASET_NAME, discover_datasets
from rnnfleet.errors import UserError
from rnnfleet.hooks.after_failures import not_done_list_if_stale

# One walk of data_dir (rnnfleet.discovery): {dataset: its files}, their fingerprints.
try:
    FOUND = discover_datasets(
        config["data_dir"], config["pattern"], config["datasets"]["files"]
    )
except UserError as error:
    raise WorkflowError(str(error)) from None
if workflow.is_main_process:
    for path, problem in FOUND.skipped.items():
        print(
            f"rnnfleet: WARNING: {path}: {problem}; skipped, not a dataset of this run",
            file=sys.stderr,
        )
DATA_FILES = FOUND.files
DATASETS = list(DATA_FILES)

PATHS = config["paths"]
OUTPUT_FOLDERS = [
    PATHS[key] for key in ("prep", "models", "metrics", "results", "predictions")
]
ARRAYS = f"{PATHS['prep']}/{{dataset}}.npz"
MODEL = f"{PATHS['models']}/{{dataset}}.pt"
METRICS = f"{PATHS['metrics']}/{{dataset}}.json"
SUMMARY = f"{PATHS['results']}/metrics.csv"
SUMMARY_HTML = f"{PATHS['results']}/metrics.html"
SKILL_PLOT = f"{PATHS['results']}/skill.png"
LOSS_CURVES = f"{PATHS['results']}/loss_curves"
NOT_DONE = f"{PATHS['results']}/not_done.txt"  # see rnnfleet.hooks.after_failures
PREDICTIONS = f"{PATHS['predictions']}/{{dataset}}.csv"
INSPECTION = f"{PATHS['results']}/inspect.csv"


def log_path(rule_name):
    return f"{PATHS['logs']}/{rule_name}/{{dataset}}.log"


def benchmark_path(rule_name):
    return f"{PATHS['benchmarks']}/{rule_name}/{{dataset}}.tsv"


def no_such_dataset(name):
    return (
        f"no dataset {name!r}: no file in data_dir {config['data_dir']!r} "
        f"matching {config['datasets']['files'] or config['pattern']!r} gives that name"
    )


def dataset_files(wildcards):
    """The dataset's data files (a .CHECKSUM beside one is read by the job and is part of
    the fingerprint, files_fingerprint)."""
    if wildcards.dataset not in DATA_FILES:
        raise WorkflowError(no_such_dataset(wildcards.dataset))
    return DATA_FILES[wildcards.dataset]


def files_fingerprint(wildcards):
    """A param of preprocess: a digest of the names, sizes and modification times of the
    dataset's files, so a file replaced by one with an older time re-preprocesses too.
    """
    return FOUND.fingerprints[wildcards.dataset]


def files_json(wildcards, input):
    """The dataset's files as one JSON word of the job's command (derived from input:
    Snakemake does not compare it as a param)."""
    return json.dumps(list(input.data))


def recent_bars_csv(wildcards):
    """The bars a forecast starts from: predict.recent_dir/<dataset>.csv, or the dataset's own files."""
    recent_dir = config["predict"]["recent_dir"]
    if recent_dir:
        return f"{recent_dir}/{wildcards.dataset}.csv"
    return dataset_files(wildcards)


def datasets_to_forecast(requested):
    """The datasets whose forecasts the default target includes (predict.datasets)."""
    if requested == "all":
        return DATASETS
    unknown = sorted(set(requested) - set(DATA_FILES))
    if unknown:
        raise WorkflowError(
            f"predict.datasets names {', '.join(unknown)}: not a dataset in data_dir '{config['data_dir']}'"
        )
    return list(requested)


FORECAST_DATASETS = datasets_to_forecast(config["predict"]["datasets"])


wildcard_constraints:
    dataset=DATASET_NAME,


def stale_not_done_list(wildcards):
    """An input of summarize only when the table written after failures must be rewritten
    although no dataset trains again (rnnfleet.hooks.after_failures)."""
    return not_done_list_if_stale(NOT_DONE, DATA_FILES, METRICS)
