# The configuration: read (Snakefile's configfile), command-line values typed as YAML types
# them, the model section per builder, checked, defaults filled in from the schema; then the
# settings object of each job kind.
import sys
from pathlib import Path

from rnnfleet.workflow.config_check import (
    applied_tune_settings,
    config_problems,
    config_sources,
    fill_schema_defaults,
    inverted_sign_note,
    load_schema,
    model_section,
    set_given_values,
    stop_run,
    to_plain_dict,
    typed_as_yaml,
)
from rnnfleet.plugins import reference_files
from rnnfleet.settings import (
    preprocess_settings,
    train_hyper_parameters,
    train_settings,
)

SCHEMA_PATH = str(RNNFLEET_DIR / "schemas" / "config.schema.yaml")


def config_files():
    """The configuration files read, earliest first, as Snakemake merges them: the
    workflow's config file (unless --replace-workflow-config), the --configfile files.
    """
    settings = workflow.config_settings
    command_line_files = [Path(path).absolute() for path in settings.configfiles]
    workflow_files = [
        path
        for path in workflow.configfiles
        if Path(path).absolute() not in command_line_files
    ]
    files = command_line_files
    if not settings.replace_workflow_config:
        files = workflow_files + files
    return [str(path) for path in files]


def config_layers(command_line_values):
    """The configuration as its layers, earliest first: the files (config_files), then
    the --config values."""
    from snakemake.common.configfile import load_configfile

    return [load_configfile(path) for path in config_files()] + [command_line_values]


CONFIG_SCHEMA = load_schema(SCHEMA_PATH)
# --config values typed as YAML types them (Snakemake hands nested ones over as text).
COMMAND_LINE_VALUES = typed_as_yaml(
    to_plain_dict(workflow.config_settings.config), CONFIG_SCHEMA
)
set_given_values(config, COMMAND_LINE_VALUES)
# One builder's keys never reach another builder (rnnfleet.workflow.config_check.model_section).
config["model"] = model_section(config_layers(COMMAND_LINE_VALUES), CONFIG_SCHEMA)
CONFIG_PROBLEMS = config_problems(config, CONFIG_SCHEMA)
if CONFIG_PROBLEMS:
    # One line a problem, without Snakemake's wrapper around a raised error.
    stop_run(
        [
            f"invalid configuration ({config_sources(config_files(), COMMAND_LINE_VALUES)}): {problem}"
            for problem in CONFIG_PROBLEMS
        ]
    )
fill_schema_defaults(config, CONFIG_SCHEMA)
if inverted_sign_note(config):
    print(f"rnnfleet: {inverted_sign_note(config)}", file=sys.stderr)

# What the settings search (rules/tune.smk) starts from and its verdict compares against:
# the settings as configured, before tune.apply.
TUNE_BASE = {
    "train": train_hyper_parameters(config),
    "model": dict(config["model"]),
    "evaluate": dict(config["evaluate"]),
}


def apply_tuned_settings():
    """tune.apply: a search's best.yaml becomes the train:/model: values, before anything
    reads them (so they are the params of every training); a problem stops the run in one line.
    """
    if config["tune"]["apply"]:
        problems = applied_tune_settings(config, CONFIG_SCHEMA)
        if problems:
            stop_run([f"invalid configuration: {problem}" for problem in problems])


apply_tuned_settings()

# What reading, cleaning and splitting a dataset depend on: the params of preprocess (so
# editing one re-preprocesses) and of inspect (which reports what preprocess would do).
PREPROCESS_SETTINGS = preprocess_settings(config)
# What a model learns from: model, training hyper-parameters (not threads, gpu_mem,
# device: they change only how fast), column names. Params of train: editing one re-trains.
TRAIN_SETTINGS = train_settings(config)


# The plug-in references of the config, by config key.
PLUGIN_REFERENCES = {
    "model.builder": [config["model"]["builder"]],
    "features": config["features"],
}
# A user's model or feature file is an input of the jobs that use it: editing it re-runs
# exactly those (rnnfleet's own code is not an input). Plain lists: no per-dataset work.
MODEL_CODE = reference_files(PLUGIN_REFERENCES["model.builder"])
FEATURE_CODE = reference_files(PLUGIN_REFERENCES["features"])


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
        stop_run([f"{error}; nothing was run"])


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


def check_machine_settings():
    """Before the first job, where jobs run on this machine: train settings it cannot run
    (a CUDA device it lacks, float16 on the CPU) stop the run in one line, instead of failing
    every training after Snakemake has removed its metrics."""
    from rnnfleet.runner.device import settings_unusable_here

    problem = settings_unusable_here(config["train"]) if workflow.local_exec else None
    if problem:
        raise WorkflowError(f"{problem}; nothing was run")
