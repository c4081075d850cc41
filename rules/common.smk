import os
import re
from fnmatch import fnmatch

import yaml
from snakemake.utils import validate

SCHEMA_PATH = f"{workflow.basedir}/schemas/config.schema.yaml"


def coerce_command_line_numbers(values, schema):
    """Nested values given with --config 'train={"epochs": 3}' reach the config as strings
    (Snakemake parses them with YAML's BaseLoader); turn those the schema types as numbers
    or booleans back into them, so validation sees what the user meant."""
    for key, subschema in schema.get("properties", {}).items():
        value = values.get(key) if isinstance(values, dict) else None
        if isinstance(value, dict):
            coerce_command_line_numbers(value, subschema)
        elif isinstance(value, str) and subschema.get("type") in (
            "integer",
            "number",
            "boolean",
        ):
            try:
                values[key] = yaml.safe_load(value)
            except yaml.YAMLError:
                pass  # left as a string: validation names the key


with open(SCHEMA_PATH) as schema_file:
    coerce_command_line_numbers(config, yaml.safe_load(schema_file))
validate(config, schema=SCHEMA_PATH)

# A dataset name becomes part of output paths: no path separators, no leading dot,
# nothing a shell or a file system could misread.
DATASET_NAME = r"[\w][\w.+=@,-]*"


def dataset_name(file_name):
    """File name without its extension (and without .csv before a compression suffix)."""
    stem, extension = os.path.splitext(file_name)
    if extension in (".gz", ".bz2", ".xz", ".zst", ".zip"):
        stem = os.path.splitext(stem)[0]
    return stem


def discover_datasets(data_dir, pattern):
    """{dataset name: csv path} for every file in data_dir whose name matches pattern,
    from one listing of the folder (no per-file stat at parse time)."""
    if not os.path.isdir(data_dir):
        raise WorkflowError(
            f"data_dir '{data_dir}' is not a folder (set data_dir in config.yaml or --config data_dir=...)"
        )
    found = {}
    with os.scandir(data_dir) as entries:
        for entry in entries:
            if fnmatch(entry.name, pattern) and not entry.name.startswith("."):
                found[dataset_name(entry.name)] = entry.path
    bad_names = sorted(name for name in found if not re.fullmatch(DATASET_NAME, name))
    if bad_names:
        raise WorkflowError(
            f"data_dir '{data_dir}': dataset file names may hold only letters, digits and . _ + = @ , - "
            f"(and must not start with a dot or dash); rename: {', '.join(repr(found[n]) for n in bad_names)}"
        )
    return dict(sorted(found.items()))


DATA_FILES = discover_datasets(config["data_dir"], config["pattern"])
DATASETS = list(DATA_FILES)

PATHS = config["paths"]
ARRAYS = f"{PATHS['prep']}/{{dataset}}.npz"
MODEL = f"{PATHS['models']}/{{dataset}}.pt"
METRICS = f"{PATHS['metrics']}/{{dataset}}.json"
SUMMARY = f"{PATHS['results']}/metrics.csv"
SUMMARY_HTML = f"{PATHS['results']}/metrics.html"
SKILL_PLOT = f"{PATHS['results']}/skill.png"
LOSS_CURVES = f"{PATHS['results']}/loss_curves"
PREDICTIONS = f"{PATHS['predictions']}/{{dataset}}.csv"

# Hyper-parameters that change what a model learns: these reach the train job through
# `params:`, so editing them re-trains. threads, gpu_mem and device only change how fast.
RUNTIME_ONLY_KEYS = ("threads", "gpu_mem", "device", "warm_workers")
TRAIN_HPARAMS = {k: v for k, v in config["train"].items() if k not in RUNTIME_ONLY_KEYS}


def log_path(rule_name):
    return f"{PATHS['logs']}/{rule_name}/{{dataset}}.log"


def benchmark_path(rule_name):
    return f"{PATHS['benchmarks']}/{rule_name}/{{dataset}}.tsv"


def dataset_csv(wildcards):
    return DATA_FILES[wildcards.dataset]


def recent_bars_csv(wildcards):
    """The bars a forecast starts from: predict.recent_dir/<dataset>.csv, or the dataset's own CSV."""
    recent_dir = config["predict"]["recent_dir"]
    if recent_dir:
        return f"{recent_dir}/{wildcards.dataset}.csv"
    return DATA_FILES[wildcards.dataset]


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
