# The job command: how the per-dataset rules (preprocess, train, predict, export_onnx),
# pretrain and the settings search's (tune_worker, tune_report, tune_verdict) hand their jobs to the job runner
# (scripts/job.py -> rnnfleet.runner.job_client -> a warm worker or the job's own process
# -> rnnfleet.runner.jobs), the settings files they read, their resources.
import json
import os
import shlex
import sys
from pathlib import Path

from rnnfleet.train.fleet_start import pretrained_paths
from rnnfleet.workflow.pretrain_plan import PretrainRule, pretrain_settings_of
from rnnfleet.runner.job_client import settings_path, write_settings


def quoted(word):
    """A word of a job's shell command, quoted for the shell Snakemake runs it with, braces
    escaped for Snakemake's formatting."""
    word = f'"{word}"' if os.name == "nt" else shlex.quote(word)
    return word.replace("{", "{{").replace("}", "}}")


def job_python():
    """The Python of the job client's jobs: the conda environment's under --sdm conda,
    else Snakemake's own (as Snakemake runs `script:` jobs)."""
    from snakemake.settings.types import DeploymentMethod

    if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
        return "python"
    return quoted(Path(sys.executable).as_posix())


def job_settings(settings_config):
    """What each kind of job gets from a configuration: the rules' params and the run-time
    settings that are not params."""
    read_params = predict_read_params(settings_config)
    return {
        "preprocess": {
            **preprocess_settings(settings_config),
            "warm_workers": config["train"]["warm_workers"],
        },
        "train": {
            **train_settings(settings_config),
            "update": settings_config["update"],
            "device": config["train"]["device"],
            "warm_workers": config["train"]["warm_workers"],
            # tune.apply: the best.yaml the settings came from (recorded, not a param)
            "tuned_from": config["tune"].get("applied"),
        },
        "predict": {
            **read_params,
            "last": config["predict"]["last"] or None,
            "trusted_plugins": MODEL_CODE + FEATURE_CODE,
            "warm_workers": config["train"]["warm_workers"],
        },
        "export": {
            "max_bad_fraction": read_params["max_bad_fraction"],
            "trusted_plugins": MODEL_CODE + FEATURE_CODE,
            "warm_workers": config["train"]["warm_workers"],
        },
        "pretrain": {  # run-wide: the fleet's pretrained model (rules/pretrain.smk)
            "settings": pretrain_settings_of(config),
            "device": config["train"]["device"],
            "warm_workers": config["train"]["warm_workers"],
        },
        # The settings search (rules/tune.smk): run-wide jobs of minutes to hours, in their
        # own processes (a warm worker saves seconds of imports, nothing here).
        "tune_worker": {
            "search": TUNE_SEARCH,
            "device": config["train"]["device"],
            "warm_workers": False,
        },
        "tune_report": {"search": TUNE_SEARCH, "warm_workers": False},
        "tune_verdict": {
            "defaults": TUNE_BASE,
            "own": TUNE_HOLDOUT_OWN,
            "device": config["train"]["device"],
            "warm_workers": False,
        },
    }


# What every job of the job client in the run gets: in a settings file only this user
# can read, written in onstart (rnnfleet.runner.job_client); the job commands name it.
JOB_SETTINGS = job_settings(config)
RUN_SETTINGS_FILE = settings_path(JOB_SETTINGS).as_posix()


# A dataset with settings of its own (the sheet's overrides) gets a file of its own: one
# per distinct configuration, {dataset: (its file, its settings)}.
def settings_file_and_settings(settings_config):
    settings = job_settings(settings_config)
    return settings_path(settings).as_posix(), settings


DATASET_SETTINGS_FILES = per_distinct_config(settings_file_and_settings)


def job_settings_file(wildcards, input):
    """The settings file of the dataset's jobs (a function of input: Snakemake does not
    compare it as a param; the settings in it are the rules' other params)."""
    own = DATASET_SETTINGS_FILES.get(wildcards.dataset)
    return own[0] if own else RUN_SETTINGS_FILE


def write_job_settings():
    """Write the run's settings file and those of the datasets with settings of their own."""
    write_settings(JOB_SETTINGS)
    for settings in {
        path: settings for path, settings in DATASET_SETTINGS_FILES.values()
    }.values():
        write_settings(settings)


# Without datasets of their own settings the run's file is a word of the command itself
# (no function called per job); with them, a param of the rules of the job client.
JOB_SETTINGS_PARAM = (
    {"job_settings": job_settings_file} if DATASET_SETTINGS_FILES else {}
)
SETTINGS_OPTION = (
    "--settings {params.job_settings:q}"
    if DATASET_SETTINGS_FILES
    else f"--settings {quoted(RUN_SETTINGS_FILE)}"
)
JOB_CLIENT = (
    f"{job_python()} {quoted((RNNFLEET_DIR / 'scripts' / 'job.py').as_posix())}"
)
# Options of every job's command: its log, its settings file, its dataset; a run-wide job
# (pretrain) has no dataset and reads the run's settings file.
JOB_OPTIONS = " ".join(
    [
        "--log {log:q}",
        SETTINGS_OPTION,
        "--text dataset {wildcards.dataset:q}",
    ]
)
RUN_WIDE_JOB_OPTIONS = f"--log {{log:q}} --settings {quoted(RUN_SETTINGS_FILE)}"


def job_command(kind, texts, values, run_wide=False):
    """The shell command of a job: scripts/job.py, a client that starts in hundredths of a
    second where a `script:` first imports Snakemake (rnnfleet.runner.job_client).
    kind: a key of job_client.JOBS; texts, values: {argument of the job's function: a Snakemake
    placeholder}; values are JSON numbers ("{threads}"); run_wide: a job of no dataset.
    """
    options = [f"--text {name} {field}" for name, field in texts.items()]
    options += [f"--value {name} {field}" for name, field in values.items()]
    common = RUN_WIDE_JOB_OPTIONS if run_wide else JOB_OPTIONS
    return " ".join([JOB_CLIENT, kind, common, *options])


def input_json(name):
    """A param: the input `name` as one JSON word of a job's command, a path where the
    input is one path, else a list (derived from input: Snakemake does not compare it as a
    param)."""

    def files(wildcards, input):
        value = getattr(input, name)
        return json.dumps(value if isinstance(value, str) else list(value))

    return files


# The zone flag of the predict job (rules/datasets.smk, zone_checked): only where a dataset's
# times are zone-free (no function called per job otherwise).
def times_zone_free(wildcards, input):
    """A param: whether the dataset's times are zone-free, as JSON (derived from input:
    Snakemake does not compare it as a param; read_format's param says it)."""
    return json.dumps(wildcards.dataset in ZONE_UNUSED)


ZONE_FREE_PARAM = {"times_zone_free": times_zone_free} if ZONE_UNUSED else {}
ZONE_FREE_VALUE = (
    {"times_zone_free": "{params.times_zone_free:q}"} if ZONE_UNUSED else {}
)


# How often a training that ran out of GPU memory is tried again (the train rule's retries).
TRAIN_RETRIES = 2


def gpu_mem_for_attempt(wildcards, attempt):
    """A retry after an out-of-memory error declares (and caps itself at) twice as much
    GPU memory; Snakemake never grants more than --resources gpu_mem."""
    return config["train"]["gpu_mem"] * 2 ** (attempt - 1)


def attempt_number(wildcards, attempt):
    """Tells the job which attempt it is (1 = first), as resources.attempt."""
    return attempt


def prestart_warm_workers():
    """Have the warm-worker server import torch and pandas while Snakemake starts the first
    jobs (local runs with preprocessing, trainings, forecasts or exports to do; see
    rnnfleet.runner.warm).
    """
    from rnnfleet.runner.job_client import prestart

    if config["train"]["warm_workers"] and workflow.local_exec:
        if any(
            job.rule.name in ("preprocess", "train", "predict", "export_onnx")
            for job in workflow.dag.needrun_jobs()
        ):
            prestart()


# The fleet's pretrained model (rules/pretrain.smk): its files, log, plan and settings.

PRETRAINED, PRETRAINED_LINEAGE = pretrained_paths(PATHS["models"])
PRETRAIN_LOG = f"{PATHS['logs']}/pretrain/fleet.log"
PRETRAIN = PretrainRule(
    lineage_path=PRETRAINED_LINEAGE,
    fingerprint=JOB_SETTINGS["pretrain"]["settings"]["settings_sha256"],
    arrays_of=dict(zip(DATASETS, expand(ARRAYS, dataset=DATASETS))),
    logs_of=dict(zip(DATASETS, expand(log_path("preprocess"), dataset=DATASETS))),
    code_files=MODEL_CODE + FEATURE_CODE,
    refresh_days=config["pretrain"]["refresh"],
    main_process=workflow.is_main_process,
    dag_settings=lambda: workflow.dag_settings,
    outputs=(PRETRAINED, PRETRAINED_LINEAGE),
    ancient=ancient,
)
# Its params: what it learns from (their fingerprint is in the settings file).
PRETRAIN_SETTINGS = {
    key: value
    for key, value in JOB_SETTINGS["pretrain"]["settings"].items()
    if key != "settings_sha256"
}


# train.init fleet: every dataset's train job reads the fleet's pretrained model (rules/pretrain.smk).
# If the pretrain job fails, the train jobs go on without that input (rnnfleet.hooks.past_failed_inputs):
# the command names the model's path, not the input, and the job finds no file there and
# trains from scratch, with the error line of the pretrain job's log as the reason.
# A SLURM job's own Snakemake leaves that input out too (PRETRAIN.model_input).
FLEET_START = (
    {"pretrained": PRETRAIN.model_input} if config["train"]["init"] == "fleet" else {}
)
FLEET_START_TEXTS = (
    {"pretrained_path": quoted(PRETRAINED), "pretrain_log_path": quoted(PRETRAIN_LOG)}
    if FLEET_START
    else {}
)
