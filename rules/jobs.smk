# The job command: how the preprocess and train rules hand their jobs to the job runner
# (scripts/job.py -> rnnfleet.runner.job_client -> a warm worker or the job's own process
# -> rnnfleet.runner.jobs), the run's settings file they read, their resources.
import os
import shlex
import sys
from pathlib import Path

from rnnfleet.runner.job_client import settings_path, write_settings


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
# onstart (rnnfleet.runner.job_client); the job commands name it.
JOB_SETTINGS = {
    "preprocess": {
        **PREPROCESS_SETTINGS,
        "warm_workers": config["train"]["warm_workers"],
    },
    "train": {
        **TRAIN_SETTINGS,
        "device": config["train"]["device"],
        "warm_workers": config["train"]["warm_workers"],
    },
}
JOB_CLIENT = (
    f"{job_python()} {quoted((RNNFLEET_DIR / 'scripts' / 'job.py').as_posix())}"
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
    in hundredths of a second where a `script:` first imports Snakemake (rnnfleet.runner.job_client).
    kind: preprocess or train; texts, values: {argument of the job's function: a Snakemake
    placeholder}; values are JSON numbers ("{threads}")."""
    options = [f"--text {name} {field}" for name, field in texts.items()]
    options += [f"--value {name} {field}" for name, field in values.items()]
    return " ".join([JOB_CLIENT, kind, JOB_OPTIONS, *options])


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
    jobs (local runs with preprocessing or trainings to do; see rnnfleet.runner.warm).
    """
    from rnnfleet.runner.warm_client import prestart

    if config["train"]["warm_workers"] and workflow.local_exec:
        if any(
            job.rule.name in ("preprocess", "train")
            for job in workflow.dag.needrun_jobs()
        ):
            prestart()
