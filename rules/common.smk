import errno
import os
import re
import shlex
import sys
from fnmatch import fnmatch
from pathlib import Path

import yaml
from snakemake.logging import logger
from snakemake.utils import validate

SCHEMA_PATH = f"{workflow.basedir}/schemas/config.schema.yaml"
# The workflow's own checks and hooks live beside the job code, in scripts/rnnfleet.
sys.path.insert(0, f"{workflow.basedir}/scripts")

from rnnfleet.after_failures import not_done_list_if_stale
from rnnfleet.checkpoint import folder_write_problem, model_file_problem
from rnnfleet.config_check import config_problems
from rnnfleet.errors import WRITE_CAUSES
from rnnfleet.formats import READABLE_SUFFIXES
from rnnfleet.job_client import settings_path, write_settings
from rnnfleet.plugins import reference_file
from rnnfleet.previous_models import restore_previous_models
from rnnfleet.recovery import claim_run_folder
from rnnfleet.snakemake_hooks import (
    before_building_dag,
    keep_going_past_busy_empty_folders,
    name_write_protected_outputs,
)
from rnnfleet.snakemake_speedups import apply as apply_snakemake_speedups

# Per-job costs inside Snakemake that grow with the number of datasets (see the module).
SNAKEMAKE_SPEEDUPS = apply_snakemake_speedups(warn=workflow.is_main_process)
logger.debug(
    f"rnnfleet: Snakemake speed-ups on: {', '.join(SNAKEMAKE_SPEEDUPS) or 'none'}"
)


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
    CONFIG_SCHEMA = yaml.safe_load(schema_file)
coerce_command_line_numbers(config, CONFIG_SCHEMA)
CONFIG_PROBLEMS = config_problems(config, CONFIG_SCHEMA)
if CONFIG_PROBLEMS:
    raise WorkflowError(
        "invalid configuration (config.yaml or --config):\n"
        + "\n".join(f"  - {problem}" for problem in CONFIG_PROBLEMS)
    )
validate(config, schema=SCHEMA_PATH)  # fills in the schema's defaults

# A dataset name becomes part of output paths: no path separators, no leading dot,
# nothing a shell or a file system could misread.
DATASET_NAME = r"[\w][\w.+=@,-]*"
# The longest file name made from a dataset name is the hidden temporary file beside its
# metrics (rnnfleet.checkpoint.atomic_write): .<name>.json.<8 random characters>.partial.
# File systems allow 255 bytes per name.
MAX_DATASET_NAME_BYTES = 255 - len("..json.12345678.partial")


def dataset_name(file_name):
    """File name without its extension (and without .csv before a compression suffix)."""
    stem, extension = os.path.splitext(file_name)
    if extension.lower() in (".gz", ".bz2", ".xz", ".zst", ".zip"):
        stem = os.path.splitext(stem)[0]
    return stem


def is_dataset_file(file_name, pattern):
    """A file rnnfleet reads (rnnfleet.formats.READABLE_SUFFIXES) whose name matches pattern."""
    return (
        fnmatch(file_name, pattern)
        and not file_name.startswith(".")
        and file_name.lower().endswith(READABLE_SUFFIXES)
    )


def discover_datasets(data_dir, pattern):
    """{dataset name: file path} for every bar file in data_dir whose name matches pattern,
    from one listing of the folder (no per-file stat at parse time)."""
    if not os.path.isdir(data_dir):
        raise WorkflowError(
            f"config key 'data_dir' = {data_dir!r} is not a folder; allowed: an existing folder holding "
            "the CSV files (set data_dir in config.yaml or --config data_dir=...)"
        )
    found, other_names, same_name = {}, [], []
    with os.scandir(data_dir) as entries:
        for entry in entries:
            if not is_dataset_file(entry.name, pattern):
                other_names.append(entry.name)
            elif dataset_name(entry.name) in found:
                same_name.append(
                    f"{found[dataset_name(entry.name)]!r} and {entry.path!r}"
                )
            else:
                found[dataset_name(entry.name)] = entry.path
    if not found:
        holds = (
            f"it holds {', '.join(sorted(other_names)[:5])}"
            if other_names
            else "it is empty"
        )
        if len(other_names) > 5:
            holds += f" and {len(other_names) - 5} more"
        raise WorkflowError(
            f"config key 'pattern' = {pattern!r} matches no file in data_dir {data_dir!r} ({holds}); "
            f"allowed: a glob on the names of bar files ({' '.join(READABLE_SUFFIXES)}), e.g. '*1m*'"
        )
    if same_name:
        raise WorkflowError(
            f"data_dir {data_dir!r}: two files give the same dataset name; keep one of: {'; '.join(same_name)}"
        )
    bad_names = sorted(name for name in found if not re.fullmatch(DATASET_NAME, name))
    if bad_names:
        raise WorkflowError(
            f"data_dir {data_dir!r}: dataset file names may hold only letters, digits and . _ + = @ , - "
            f"(and must not start with a dot or dash); rename: {', '.join(repr(found[n]) for n in bad_names)}"
        )
    long_names = sorted(
        name for name in found if len(name.encode()) > MAX_DATASET_NAME_BYTES
    )
    if long_names:
        raise WorkflowError(
            f"data_dir {data_dir!r}: dataset names may be at most {MAX_DATASET_NAME_BYTES} bytes long "
            f"(the hidden temporary files beside the outputs add {255 - MAX_DATASET_NAME_BYTES} "
            "to a file-name limit of 255); "
            f"shorten: {', '.join(repr(found[n]) for n in long_names)}"
        )
    return dict(sorted(found.items()))


DATA_FILES = discover_datasets(config["data_dir"], config["pattern"])
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
NOT_DONE = f"{PATHS['results']}/not_done.txt"  # see rnnfleet.after_failures
PREDICTIONS = f"{PATHS['predictions']}/{{dataset}}.csv"
INSPECTION = f"{PATHS['results']}/inspect.csv"

from rnnfleet.plots import drop_stale_snakemake_backup

if workflow.is_main_process:
    # Before Snakemake checks its lock: a lock left by a killed run must not stop this one.
    if claim_run_folder(OUTPUT_FOLDERS):
        # Alone in the folder: a backup still here belongs to a re-train that was killed,
        # or to a plots job that was killed (rnnfleet.plots.drop_stale_snakemake_backup).
        restore_previous_models(PATHS["models"])
        drop_stale_snakemake_backup(LOSS_CURVES)

# What reading, cleaning and splitting a dataset depend on: the params of preprocess (so
# editing one re-preprocesses) and of inspect (which reports what preprocess would do).
PREPROCESS_SETTINGS = {
    "columns": config["columns"],
    "read_format": config["format"],
    "max_bad_fraction": config["preprocess"]["max_bad_fraction"],
    "max_gap": config["preprocess"]["max_gap"],
    "seq_len": config["train"]["seq_len"],
    "horizon": config["train"]["horizon"],
    "val_fraction": config["preprocess"]["val_fraction"],
    "features": config["features"],
    "target": config["target"],
}

# Hyper-parameters that change what a model learns: these reach the train job through
# `params:`, so editing them re-trains. threads, gpu_mem and device only change how fast.
RUNTIME_ONLY_KEYS = ("threads", "gpu_mem", "device", "warm_workers")
TRAIN_HPARAMS = {k: v for k, v in config["train"].items() if k not in RUNTIME_ONLY_KEYS}


# The plug-in references of the config, by config key.
PLUGIN_REFERENCES = {
    "model.builder": [config["model"]["builder"]],
    "features": config["features"],
}


def plugin_files(references):
    """The user's own files among plug-in references (built-in names have none), in order."""
    return list(dict.fromkeys(filter(None, map(reference_file, references))))


# A user's model or feature file is an input of the jobs that use it: editing it re-runs
# exactly those (rnnfleet's own code is not an input). Plain lists: no per-dataset work.
MODEL_CODE = plugin_files(PLUGIN_REFERENCES["model.builder"])
FEATURE_CODE = plugin_files(PLUGIN_REFERENCES["features"])


def check_plugin_files_exist():
    """While parsing: a user's file that is not there is named with its config key (as an
    input of the jobs, Snakemake would report it as a missing input of every job)."""
    from rnnfleet.errors import UserError
    from rnnfleet.plugins import require_file

    try:
        for config_key, references in PLUGIN_REFERENCES.items():
            for reference in references:
                require_file(reference, config_key)
    except UserError as error:
        raise WorkflowError(f"{error}; nothing was run") from None


check_plugin_files_exist()


def check_plugin_files():
    """Before the first job: every file reference imports and names a function. A broken
    file then stops the run at once, instead of failing every job that uses it after
    Snakemake has removed that job's previous model."""
    from rnnfleet.errors import UserError
    from rnnfleet.plugins import is_file_reference, resolve

    try:
        for config_key, values in PLUGIN_REFERENCES.items():
            for reference in filter(is_file_reference, values):
                resolve(reference, {}, config_key)
    except UserError as error:
        raise WorkflowError(f"{error}; nothing was run") from None


def quoted(word):
    """A word of a job's shell command, quoted for the shell Snakemake runs it with, braces
    escaped for Snakemake's formatting."""
    word = f'"{word}"' if os.name == "nt" else shlex.quote(word)
    return word.replace("{", "{{").replace("}", "}}")


def job_python():
    """The Python of preprocess and train jobs: the conda environment's under --sdm conda,
    else Snakemake's own (as Snakemake runs `script:` jobs)."""
    from snakemake.settings.types import DeploymentMethod

    if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
        return "python"
    return quoted(Path(sys.executable).as_posix())


# What every preprocess and train job of the run gets (the rules' params, and the run-time
# settings that are not params): in a settings file only this user can read, written in
# onstart (rnnfleet.job_client); the job commands name it.
JOB_SETTINGS = {
    "preprocess": {
        **{
            "feature_definition" if name == "features" else name: value
            for name, value in PREPROCESS_SETTINGS.items()
        },
        "warm_workers": config["train"]["warm_workers"],
    },
    "train": {
        "model_hparams": config["model"],
        "train_hparams": TRAIN_HPARAMS,
        "columns": config["columns"],
        "device": config["train"]["device"],
        "warm_workers": config["train"]["warm_workers"],
    },
}
JOB_CLIENT = (
    f"{job_python()} {quoted(Path(workflow.basedir, 'scripts', 'job.py').as_posix())}"
)
# Options of every job's command: its log, the run's settings file, its dataset.
JOB_OPTIONS = " ".join(
    [
        "--log {log:q}",
        f"--settings {quoted(settings_path(JOB_SETTINGS).as_posix())}",
        "--text dataset {wildcards.dataset:q}",
    ]
)


def job_command(kind, texts, values):
    """The shell command of a preprocess or train job: scripts/job.py, a client that starts
    in hundredths of a second where a `script:` first imports Snakemake (rnnfleet.job_client).
    kind: preprocess or train; texts, values: {argument of the job's function: a Snakemake
    placeholder}; values are JSON numbers ("{threads}")."""
    options = [f"--text {name} {field}" for name, field in texts.items()]
    options += [f"--value {name} {field}" for name, field in values.items()]
    return " ".join([JOB_CLIENT, kind, JOB_OPTIONS, *options])


def log_path(rule_name):
    return f"{PATHS['logs']}/{rule_name}/{{dataset}}.log"


def benchmark_path(rule_name):
    return f"{PATHS['benchmarks']}/{rule_name}/{{dataset}}.tsv"


def no_such_dataset(name):
    return (
        f"no dataset {name!r}: no file in data_dir {config['data_dir']!r} "
        f"matching {config['pattern']!r} has that name"
    )


def dataset_csv(wildcards):
    if wildcards.dataset not in DATA_FILES:
        raise WorkflowError(no_such_dataset(wildcards.dataset))
    return DATA_FILES[wildcards.dataset]


def gpu_mem_for_attempt(wildcards, attempt):
    """A retry after an out-of-memory error declares (and caps itself at) twice as much
    GPU memory; Snakemake never grants more than --resources gpu_mem."""
    return config["train"]["gpu_mem"] * 2 ** (attempt - 1)


def attempt_number(wildcards, attempt):
    """Tells the job which attempt it is (1 = first), as resources.attempt."""
    return attempt


def recent_bars_csv(wildcards):
    """The bars a forecast starts from: predict.recent_dir/<dataset>.csv, or the dataset's own CSV."""
    recent_dir = config["predict"]["recent_dir"]
    if recent_dir:
        return f"{recent_dir}/{wildcards.dataset}.csv"
    return dataset_csv(wildcards)


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

# The files of one dataset a user may ask for by name, e.g. snakemake predictions/X.csv.
PER_DATASET_OUTPUTS = [ARRAYS, MODEL, METRICS, PREDICTIONS]


def requested_datasets(targets):
    """{target: dataset} for the targets that are one dataset's file (PER_DATASET_OUTPUTS)."""
    shapes = [
        re.compile("(?P<dataset>[^/]+)".join(map(re.escape, path.split("{dataset}"))))
        for path in PER_DATASET_OUTPUTS
    ]
    found = {}
    for target in targets:
        path = os.path.relpath(target) if os.path.isabs(target) else target
        path = Path(os.path.normpath(path)).as_posix()
        for shape in shapes:
            if match := shape.fullmatch(path):
                found[target] = match["dataset"]
    return found


def check_requested_datasets(targets):
    """A target that is the file of a dataset that is not in data_dir stops the run with one
    line (Snakemake would report an exception in an input function)."""
    for target, name in requested_datasets(targets).items():
        if name not in DATA_FILES:
            raise WorkflowError(f"{target}: {no_such_dataset(name)}; nothing was run")


def path_setting(path):
    """The paths: key whose folder holds `path` (as 'config key paths.results'), or ''."""
    for key, folder in PATHS.items():
        if Path(folder) in (Path(path), *Path(path).parents):
            return f" (config key paths.{key})"
    return ""


def unwritable_line(path, problem):
    return f"{path}{path_setting(path)}: cannot be written: {problem}; nothing was run"


def check_output_folders_writable():
    """Before the first job: this user can write in every existing folder that a job of the
    run writes into (otherwise Snakemake stops at the first output it cannot remove, with
    a traceback, and the jobs already started carry on without a summary)."""
    folders = {
        os.path.dirname(path) or "."
        for job in workflow.dag.needrun_jobs()
        for path in job.output
    }
    for folder in sorted(folders):
        problem = folder_write_problem(folder)
        if problem:
            raise WorkflowError(unwritable_line(folder, problem))


def write_protected_line(paths):
    """The line for outputs of a job this user cannot write (Snakemake: write-protected)."""
    problems = [(path, folder_write_problem(path)) for path in paths]
    path, problem = next(
        ((path, problem) for path, problem in problems if problem),
        (paths[0], WRITE_CAUSES[errno.EACCES]),
    )
    return unwritable_line(path, problem)


def models_that_do_not_load():
    """{model path: why} for the model files of this run's datasets that cannot be whole
    model files (rnnfleet.checkpoint.model_file_problem: size and end bytes, no unpacking).
    One listing of the models folder and one small read per model."""
    try:
        with os.scandir(PATHS["models"]) as entries:
            names = [entry.name for entry in entries]
    except (FileNotFoundError, NotADirectoryError):
        return {}
    broken = {}
    for name in names:
        dataset = name[: -len(".pt")] if name.endswith(".pt") else None
        if dataset in DATA_FILES:
            path = MODEL.format(dataset=dataset)
            try:
                problem = model_file_problem(path)
            except OSError as error:
                problem = f"it cannot be read ({error.strerror})"
            if problem:
                broken[path] = problem
    return broken


def before_building_dag_of_this_run(target_files, target_rules, force_files):
    """Targets naming unknown datasets stop the run; a model file that no longer loads
    (emptied, cut short, overwritten) is forced, so that its train job runs again if the
    run needs it, as when the file is missing (a forced file the run does not need
    changes nothing)."""
    check_requested_datasets(target_files)
    for path, problem in models_that_do_not_load().items():
        logger.warning(
            f"rnnfleet: {path}: does not load: {problem}; a run that needs it trains its dataset again"
        )
        force_files.add(path)


if workflow.is_main_process:
    keep_going_past_busy_empty_folders()
    before_building_dag(before_building_dag_of_this_run)
    name_write_protected_outputs(write_protected_line)


wildcard_constraints:
    dataset=DATASET_NAME,


def prestart_warm_workers():
    """Have the warm-worker server import torch and pandas while Snakemake starts the first
    jobs (local runs with preprocessing or trainings to do; see rnnfleet.warm)."""
    from rnnfleet.warm_client import prestart

    if config["train"]["warm_workers"] and workflow.local_exec:
        if any(
            job.rule.name in ("preprocess", "train")
            for job in workflow.dag.needrun_jobs()
        ):
            prestart()


def stale_not_done_list(wildcards):
    """An input of summarize only when the table written after failures must be rewritten
    although no dataset trains again (rnnfleet.after_failures)."""
    return not_done_list_if_stale(NOT_DONE, DATA_FILES, METRICS)
