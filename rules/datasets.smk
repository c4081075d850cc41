# Datasets: which files in data_dir make which dataset, the path of every output, and
# the input functions of the rules.
import json
import os
import sys

from rnnfleet.bars.discovery import DATASET_NAME, discover_datasets
from rnnfleet.bars.joining import CHECKSUM_SUFFIX
from rnnfleet.errors import UserError
from rnnfleet.prep.arrays_file import ARRAYS_FORMAT
from rnnfleet.tune.space import own_settings
from rnnfleet.workflow.after_failures import not_done_list_if_stale
from rnnfleet.workflow.config_check import load_schema
from rnnfleet.workflow.dataset_sheet import read_dataset_sheet
from rnnfleet.workflow.unused_settings import unused_zone_note, zone_free_datasets
from rnnfleet.settings import DEFAULT_ZONE, without_unused_zone

SHEET_PATH = config["datasets"]["sheet"]
SHEET_SCHEMA_PATH = RNNFLEET_DIR / "schemas" / "datasets.schema.yaml"
# {dataset: its files} and their fingerprints: from the datasets sheet
# (rnnfleet.workflow.dataset_sheet), else one walk of data_dir (rnnfleet.bars.discovery).
# DATASET_CONFIGS: {dataset: its configuration with the sheet's overrides}, only for the
# datasets that have any ({} without a sheet: no per-dataset work anywhere); DATASET_OVERRIDES
# those overrides ({dataset: {dotted key: value}}).
try:
    if SHEET_PATH:
        SHEET = read_dataset_sheet(
            SHEET_PATH,
            config["data_dir"],
            config,
            CONFIG_SCHEMA,
            load_schema(SHEET_SCHEMA_PATH),
        )
        FOUND, DATASET_CONFIGS = SHEET.found, SHEET.configs
        DATASET_OVERRIDES = SHEET.overrides
    else:
        FOUND = discover_datasets(
            config["data_dir"], config["pattern"], config["datasets"]["files"]
        )
        DATASET_CONFIGS = DATASET_OVERRIDES = {}
except UserError as error:
    stop_run([str(error)])
if workflow.is_main_process:
    if FOUND.note:
        print(f"rnnfleet: {FOUND.note}", file=sys.stderr)
    for path, how in FOUND.renamed.items():
        print(f"rnnfleet: {path}: {how}", file=sys.stderr)
    for path, problem in FOUND.skipped.items():
        print(
            f"rnnfleet: WARNING: {path}: {problem}; skipped, not a dataset of this run",
            file=sys.stderr,
        )
DATA_FILES = FOUND.files
DATASETS = list(DATA_FILES)
# {dataset: its quality thresholds} where a sheet row sets quality.* keys of its own.
DATASET_QUALITY = {
    dataset: dataset_config["quality"]
    for dataset, dataset_config in DATASET_CONFIGS.items()
    if dataset_config["quality"] != config["quality"]
}

PATHS = config["paths"]
for key, folder in PATHS.items():
    if os.path.exists(folder) and not os.path.isdir(folder):
        stop_run(
            [
                f"config key 'paths.{key}' = {folder!r} is a file, not a folder; allowed: a folder "
                "(made if missing) for that output"
            ]
        )
OUTPUT_FOLDERS = [
    PATHS[key] for key in ("prep", "models", "metrics", "results", "predictions")
]
ARRAYS = f"{PATHS['prep']}/{{dataset}}.npz"
MODEL = f"{PATHS['models']}/{{dataset}}.pt"
METRICS = f"{PATHS['metrics']}/{{dataset}}.json"
SUMMARY = f"{PATHS['results']}/metrics.csv"
SUMMARY_HTML = f"{PATHS['results']}/metrics.html"
SKILL_PLOT = f"{PATHS['results']}/skill.png"
COVERAGE_PLOT = f"{PATHS['results']}/coverage.png"
LOSS_CURVES = f"{PATHS['results']}/loss_curves"
# SVG written without a plotting library (rnnfleet.report.svg_chart, rnnfleet.report.loss_curves.LOSS_CURVE_FORMAT):
# small in a .zip report (bench/bench_report.py), sharp at any zoom, a few milliseconds a curve
LOSS_CURVE_FORMAT = "svg"
NOT_DONE = f"{PATHS['results']}/not_done.txt"  # see rnnfleet.workflow.after_failures
FORECASTS = (
    f"{PATHS['results']}/forecasts.csv"  # every dataset's forecast at its last bar
)
# The report's start page: the template, and the page made from it with the fleet's
# verdicts (rnnfleet.report.start_page.write_start_page), which the report shows once it is there.
START_TEMPLATE = str(RNNFLEET_DIR / "report" / "workflow.rst")
START_PAGE = f"{PATHS['results']}/report_start.rst"
PREDICTIONS = f"{PATHS['predictions']}/{{dataset}}.csv"
# export.onnx: each model also as one ONNX file (rules/export.smk).
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

INSPECTION = f"{PATHS['results']}/inspect.csv"


def log_path(rule_name):
    return f"{PATHS['logs']}/{rule_name}/{{dataset}}.log"


def benchmark_path(rule_name):
    return f"{PATHS['benchmarks']}/{rule_name}/{{dataset}}.tsv"


def per_distinct_config(build):
    """{dataset: build(its configuration)} for the datasets with settings of their own;
    build is called once per distinct configuration (datasets with the same overrides share
    one object, rnnfleet.workflow.dataset_sheet)."""
    built = {}
    for dataset_config in DATASET_CONFIGS.values():
        if id(dataset_config) not in built:
            built[id(dataset_config)] = build(dataset_config)
    return {
        dataset: built[id(dataset_config)]
        for dataset, dataset_config in DATASET_CONFIGS.items()
    }


def dataset_params(params_of):
    """A rule's params {name: value} as params_of(configuration) gives them: the run's
    values where no dataset has settings of its own (no per-dataset work), else one
    function of the dataset per name, giving each dataset the values of its own
    configuration, so that a change to one row's overrides re-runs exactly that dataset.
    """
    run_wide = params_of(config)
    if not DATASET_CONFIGS:
        return run_wide
    own = per_distinct_config(params_of)

    def param(name):
        def value(wildcards):
            return own.get(wildcards.dataset, run_wide)[name]

        return value

    return {name: param(name) for name in run_wide}


def train_params(settings_config):
    """The train rule's params: what a model learns from (rnnfleet.settings.train_settings)."""
    settings = train_settings(settings_config)
    return {
        "model": settings["model_hparams"],
        "train": settings["train_hparams"],
        "columns": settings["columns"],
        "evaluate": settings["evaluate"],
    }


def predict_read_params(settings_config):
    """How the predict job reads the recent bars (as preprocess reads the dataset's files)."""
    return {
        "max_bad_fraction": settings_config["preprocess"]["max_bad_fraction"],
        "read_format": settings_config["format"],
    }


def no_such_dataset(name):
    if SHEET_PATH:
        return f"no dataset {name!r} in the datasets sheet {SHEET_PATH!r}"
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
        stop_run(
            [
                f"predict.datasets names {', '.join(unknown)}: not a dataset in data_dir '{config['data_dir']}'"
            ]
        )
    return list(requested)


FORECAST_DATASETS = datasets_to_forecast(config["predict"]["datasets"])


def dataset_zones():
    """{dataset: its format.timezone} where one is set (not auto) for the run or in the
    sheet; {} otherwise (no per-dataset work)."""
    configs = [config, *DATASET_CONFIGS.values()]
    if all(each["format"]["timezone"] == DEFAULT_ZONE for each in configs):
        return {}
    return {
        dataset: DATASET_CONFIGS.get(dataset, config)["format"]["timezone"]
        for dataset in DATASETS
    }


# The datasets whose times format.timezone does not apply to (rnnfleet.workflow.unused_settings):
# their params carry the default zone, so the setting re-runs nothing for them.
DATASET_ZONES = dataset_zones()
ZONE_UNUSED = set(
    zone_free_datasets(
        DATASET_ZONES,
        lambda dataset: ARRAYS.format(dataset=dataset),
        lambda dataset: (
            DATA_FILES.get(dataset, []),
            DATASET_CONFIGS.get(dataset, config)["columns"],
            DATASET_CONFIGS.get(dataset, config)["format"],
        ),
    )
)
if ZONE_UNUSED and workflow.is_main_process:
    print(
        f"rnnfleet: {unused_zone_note(sorted(ZONE_UNUSED), DATASET_ZONES)}",
        file=sys.stderr,
    )


def zone_checked(params):
    """A rule's params (dataset_params) with read_format at the default zone for the
    datasets in ZONE_UNUSED."""
    if not ZONE_UNUSED:
        return params
    given = params["read_format"]

    def read_format(wildcards):
        value = given(wildcards) if callable(given) else given
        if wildcards.dataset in ZONE_UNUSED:
            return without_unused_zone(value)
        return value

    return {**params, "read_format": read_format}


wildcard_constraints:
    dataset=DATASET_NAME,


def stale_not_done_list(wildcards):
    """An input of summarize only when the table written after failures must be rewritten
    although no dataset trains again (rnnfleet.workflow.after_failures)."""
    return not_done_list_if_stale(NOT_DONE, DATA_FILES, METRICS)


# The settings search (rules/tune.smk, rnnfleet.tune, docs/tuning.md): its files, the
# datasets it trains on (the sample) and those of its verdict (held out), and its settings.
TUNE = config["tune"]
TUNE_DIR = f"{PATHS['results']}/tune"
TUNE_PATHS = {
    "journal": f"{TUNE_DIR}/journal.log",  # the study, shared by the workers (not an output)
    "best": f"{TUNE_DIR}/best.yaml",
    "trials": f"{TUNE_DIR}/trials.csv",
    "page": f"{TUNE_DIR}/tune.html",
    "verdict": f"{TUNE_DIR}/verdict.txt",
    "skills": f"{TUNE_DIR}/verdict.json",
}
TUNE_WORKER_RECORD = f"{TUNE_DIR}/workers/{{worker}}.json"
TUNE_LOGS = f"{PATHS['logs']}/tune"


def tune_datasets():
    """(sample, held out) of the datasets present; a name in tune.datasets that is not one
    stops the run in one line."""
    from rnnfleet.tune.space import holdout_datasets, sample_datasets

    for name in TUNE["datasets"]:
        if name not in DATASETS:
            stop_run(
                [
                    f"invalid configuration: config key 'tune.datasets': {no_such_dataset(name)}"
                ]
            )
    sample = sample_datasets(DATASETS, TUNE["sample"], TUNE["seed"], TUNE["datasets"])
    return sample, holdout_datasets(DATASETS, sample, TUNE["holdout"], TUNE["seed"])


TUNE_SAMPLE, TUNE_HOLDOUT = tune_datasets()


def tune_search_settings():
    """What the workers and the report read: what a trial's value depends on (its hash names
    the study), the budget and the journal. The params of the tune rules: changing one re-runs
    them, and a larger budget continues the same study."""
    from rnnfleet.tune.space import study_name

    scored = {
        "space": TUNE["space"],
        "sample": TUNE_SAMPLE,
        "own": own_settings(DATASET_OVERRIDES, TUNE_BASE, TUNE_SAMPLE),
        "epochs": TUNE["epochs"],
        # train.epochs aside: tune.epochs caps a trial's fits.
        "train": {
            key: value for key, value in TUNE_BASE["train"].items() if key != "epochs"
        },
        "model": TUNE_BASE["model"],
    }
    return {
        **scored,
        "study": study_name(scored),
        "journal": TUNE_PATHS["journal"],
        "trials": TUNE["trials"],
        "minutes": TUNE["minutes"],
        "workers": TUNE["workers"],
        "seed": TUNE["seed"],
    }


TUNE_SEARCH = tune_search_settings()
# The held-out datasets' settings of their own (a datasets sheet): the verdict's fits take them.
TUNE_HOLDOUT_OWN = own_settings(DATASET_OVERRIDES, TUNE_BASE, TUNE_HOLDOUT)
