# The configuration: read (Snakefile's configfile), command-line values coerced, checked,
# defaults filled in from the schema; then the settings object of each job kind.
import sys

import yaml
from snakemake.utils import validate

# rnnfleet's Python package, for this file and the others in rules/.
sys.path.insert(0, f"{workflow.basedir}/scripts")

from rnnfleet.hooks.config_check import config_problems
from rnnfleet.plugins import reference_files
from rnnfleet.settings import preprocess_settings, train_settings

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
    CONFIG_SCHEMA = yaml.safe_load(schema_file)
coerce_command_line_numbers(config, CONFIG_SCHEMA)
CONFIG_PROBLEMS = config_problems(config, CONFIG_SCHEMA)
if CONFIG_PROBLEMS:
    raise WorkflowError(
        "invalid configuration (config.yaml or --config):\n"
        + "\n".join(f"  - {problem}" for problem in CONFIG_PROBLEMS)
    )
validate(config, schema=SCHEMA_PATH)  # fills in the schema's defaults

# What reading, cleaning and splitting a dataset depend on: the params of preprocess (so
# editing one re-preprocesses) and of inspect (which reports what preprocess would do).
PREPROCESS_SETTINGS = preprocess_settings(config)
# What a model learns from: model, training hyper-parameters (not threads, gpu_mem,
# device: they change only how fast), column names. Params of train: editing one re-trains.
TRAIN_SETTINGS = train_settings(config)


# A user's model or feature file is an input of the jobs that use it: editing it re-runs
# exactly those (rnnfleet's own code is not an input). Plain lists: no per-dataset work.
MODEL_CODE = reference_files([config["model"]["builder"]])
FEATURE_CODE = reference_files(config["features"])


def check_plugin_files():
    """Before the first job: every file reference imports and names a function. A broken
    file then stops the run at once, instead of failing every job that uses it after
    Snakemake has removed that job's previous model."""
    from rnnfleet.errors import UserError
    from rnnfleet.plugins import is_file_reference, resolve

    references = {
        "model.builder": [config["model"]["builder"]],
        "features": config["features"],
    }
    try:
        for config_key, values in references.items():
            for reference in filter(is_file_reference, values):
                resolve(reference, {}, config_key)
    except UserError as error:
        raise WorkflowError(f"{error}; nothing was run") from None
