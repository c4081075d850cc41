"""Configuration problems as one line each, naming the key and what it allows.

Snakemake's own validation stops at the first problem and prints the whole schema with
it; these messages say what to change.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import math
import re
import sys
from pathlib import Path
from typing import NoReturn

from rnnfleet.bars.formats import is_time_zone

TYPE_NAMES = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "true or false",
    "object": "a mapping",
    "array": "a list",
}
BOUNDS = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}


def load_schema(path: str | Path) -> dict:
    """A schema file (YAML) as a dict: parsed by libyaml where PyYAML was built with it, else
    by the pure-Python parser, with the same result."""
    import yaml

    # libyaml: the configuration schema is read at every snakemake start, dry-runs included.
    with open(path, encoding="utf-8") as handle:
        return yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def fill_schema_defaults(config: dict, schema: dict) -> None:
    """Set each default of `schema` that `config` leaves out, at every level the schema
    describes, as Snakemake's validate(set_default=True) does; ValueError if `config` still
    breaks the schema (config_problems says how, one line each)."""
    from jsonschema import Draft202012Validator, validators  # comes with Snakemake

    check_properties = Draft202012Validator.VALIDATORS["properties"]

    def set_defaults(validator, properties: dict, instance, schema: dict):
        if validator.is_type(instance, "object"):
            for name, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(name, copy.deepcopy(subschema["default"]))
        yield from check_properties(validator, properties, instance, schema)

    filling = validators.extend(Draft202012Validator, {"properties": set_defaults})
    errors = list(filling(schema).iter_errors(config))  # all of them: each fills its part
    if errors:
        raise ValueError(f"invalid configuration: {errors[0].message}")


def config_problems(config: dict, schema: dict) -> list[str]:
    """Every way `config` breaks `schema` (a JSON schema), one sentence each; [] if none."""
    from jsonschema import Draft202012Validator  # comes with Snakemake

    errors = Draft202012Validator(schema).iter_errors(config)
    problems = {line for error in errors for line in describe(error)}
    problems.update(non_finite_numbers(config, schema))
    problems.update(timezone_problems(config))
    problems.update(split_problems(config, schema))
    problems.update(quantile_problems(config))
    problems.update(tune_problems(config))
    return sorted(problems)


def tune_problems(config: dict) -> list[str]:
    """tune.space, where given, holds settings a search can draw (rnnfleet.tune.space)."""
    from rnnfleet.tune.space import space_problems

    tune = config.get("tune") if isinstance(config.get("tune"), dict) else {}
    model = config.get("model") if isinstance(config.get("model"), dict) else {}
    return space_problems(tune["space"], model) if "space" in tune else []


def applied_tune_settings(config: dict, schema: dict) -> list[str]:
    """With tune.apply, the settings of that best.yaml set into config's train: and model:
    sections (config complete: defaults filled in); the problems, one line each naming
    tune.apply, or those of the settings as config keys ([]: applied)."""
    import yaml

    from rnnfleet.tune.space import is_searchable, searchable_keys, split_settings

    path = config["tune"]["apply"]
    where = f"config key 'tune.apply' = {path!r}"
    try:
        with open(path, "rb") as handle:
            content = handle.read()
        settings = (yaml.safe_load(content) or {}).get("settings")
    except (OSError, yaml.YAMLError, AttributeError) as error:
        return [f"{where}: cannot read it ({one_line_error(error)})"]
    allowed = searchable_keys(config["model"])
    if not isinstance(settings, dict) or not settings or not all(is_searchable(name, allowed) for name in settings):
        keys = ", ".join(allowed) if allowed else "train.<key>, model.<key>"
        return [f"{where}: its `settings` must map some of {keys} to values, not {settings!r}"]
    for section, values in split_settings(settings).items():
        config[section].update(values)
    problems = [f"{problem} (from tune.apply {path})" for problem in config_problems(config, schema)]
    if not problems:  # where the trainings' settings came from, for their metrics (not a config key)
        config["tune"]["applied"] = {
            "file": str(path),
            "sha256": hashlib.sha256(content).hexdigest(),
            "settings": settings,
        }
    return problems


def quantile_problems(config: dict) -> list[str]:
    """train.quantiles need a regression target (rnnfleet.heads.heads_of_settings)."""
    from rnnfleet.errors import UserError
    from rnnfleet.heads import heads_of_settings
    from rnnfleet.prep.targets import DEFAULT_TARGET, TARGETS

    train = config.get("train") if isinstance(config.get("train"), dict) else {}
    quantiles, target = train.get("quantiles"), config.get("target", DEFAULT_TARGET)
    if not quantiles or not isinstance(quantiles, list) or target not in TARGETS:
        return []  # none asked for, or a wrong type or target described above
    try:
        heads_of_settings({"horizon": 1, "quantiles": quantiles}, TARGETS[target])
    except (UserError, TypeError, ValueError) as error:
        return [str(error)]
    return []


def non_finite_numbers(values: object, schema: dict, key: str = "") -> list[str]:
    """Numbers that are NaN or infinite (YAML .nan, .inf): JSON schema bounds let them
    through (NaN compares false with every bound), and no job can use them."""
    if isinstance(values, float) and not math.isfinite(values):
        allowed = allowed_values(schema).replace("a number", "a finite number", 1)
        return [f"config key '{key}' = {values!r} is not allowed; allowed: {allowed}"]
    if not isinstance(values, dict):
        return []
    return [
        problem
        for name, subschema in schema.get("properties", {}).items()
        if name in values
        for problem in non_finite_numbers(values[name], subschema, f"{key}.{name}" if key else name)
    ]


def timezone_problems(config: dict) -> list[str]:
    """format.timezone must be a zone the data reader knows; checked here once instead of
    failing every file's preprocess job as if the data were at fault."""
    format_settings = config.get("format")
    zone = format_settings.get("timezone", "auto") if isinstance(format_settings, dict) else "auto"
    if not isinstance(zone, str) or zone == "auto" or is_time_zone(zone):
        return []
    return [
        f"config key 'format.timezone' = {zone!r} is not allowed{did_you_mean_zone(zone)}; allowed: auto or a time "
        "zone name such as UTC, Europe/Athens, America/New_York, Etc/GMT+5"
    ]


def did_you_mean_zone(zone: str) -> str:
    """' (did you mean 'Europe/Berlin'?)' for the known zone name nearest to a misspelled
    one (case aside), or '' where none is near."""
    import zoneinfo

    by_lower = {name.lower(): name for name in zoneinfo.available_timezones()}
    nearest = difflib.get_close_matches(zone.lower(), by_lower, n=1, cutoff=0.75)
    return f" (did you mean {by_lower[nearest[0]]!r}?)" if nearest else ""


def inverted_sign_note(config: dict) -> str | None:
    """A note for an Etc/GMT±N zone: POSIX inverts the sign, Etc/GMT-2 is UTC+2; None otherwise."""
    format_settings = config.get("format") if isinstance(config.get("format"), dict) else {}
    found = re.fullmatch(r"Etc/GMT([+-])(\d+)", str(format_settings.get("timezone", "")))
    if not found:
        return None
    sign, hours = found.groups()
    offset, side = ("+", "ahead of") if sign == "-" else ("-", "behind")
    return (
        f"note: format.timezone {found.group(0)!r} is UTC{offset}{hours}, {hours} hour(s) {side} UTC: "
        "the Etc/GMT zones invert the sign (POSIX)"
    )


def split_problems(config: dict, schema: dict) -> list[str]:
    """The rules between keys: validation and test part leave something to train on, and
    walk-forward folds have a test part to measure."""
    given = config.get("preprocess") if isinstance(config.get("preprocess"), dict) else {}
    defaults = schema["properties"]["preprocess"]["properties"]
    fractions = [given.get(key, defaults[key]["default"]) for key in ("val_fraction", "test_fraction")]
    if not all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in fractions):
        return []  # a wrong type is described above
    evaluate = config.get("evaluate") if isinstance(config.get("evaluate"), dict) else {}
    folds = evaluate.get("folds", 0)
    if isinstance(folds, int) and folds > 0 and fractions[1] == 0:
        return [
            f"config key 'evaluate.folds' = {folds!r} needs a test part, and 'preprocess.test_fraction' is 0; "
            "allowed: evaluate.folds 0, or a test_fraction above 0"
        ]
    if sum(fractions) < 1:
        return []
    return [
        f"config keys 'preprocess.val_fraction' = {fractions[0]!r} and 'preprocess.test_fraction' = "
        f"{fractions[1]!r} add up to {sum(fractions):g}; allowed: a sum below 1 (the rest trains)"
    ]


def describe(error) -> list[str]:
    key = ".".join(str(part) for part in error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = list(error.schema.get("properties", {}))
        return [
            f"unknown config key '{key + '.' if key else ''}{name}'{did_you_mean(name, allowed)}; "
            f"allowed {'under ' + repr(key) if key else 'at the top level'}: {', '.join(allowed)}"
            for name in sorted(set(error.instance) - set(allowed))
        ]
    return [f"config key '{key}' = {error.instance!r} is not allowed; allowed: {allowed_values(error.schema)}"]


def did_you_mean(name: str, allowed: list[str]) -> str:
    close = difflib.get_close_matches(name, allowed, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def allowed_values(schema: dict) -> str:
    """`schema` (one key's part of the schema) in words, e.g. 'a number > 0 (Adam learning rate)'."""
    if "enum" in schema:
        words = "one of " + ", ".join(str(value) for value in schema["enum"])
    elif schema.get("type") == "object":
        words = "a mapping with the keys " + ", ".join(schema.get("properties", {}))
    else:
        words = TYPE_NAMES.get(schema.get("type"), "a value")
        if schema.get("type") == "array" and "items" in schema:
            items = schema["items"]
            words += " of " + (items.get("description") or TYPE_NAMES.get(items.get("type"), "values"))
            if schema.get("minItems"):
                words += f", at least {schema['minItems']}"
        bounds = [f"{sign} {schema[bound]}" for bound, sign in BOUNDS.items() if bound in schema]
        words += " " + " and ".join(bounds) if bounds else ""
        if "pattern" in schema:
            words += f" matching {schema['pattern']}"
        if schema.get("minLength"):
            words += ", not empty"
    description = schema.get("description")
    return f"{words} ({description})" if description else words


def key_schema(schema: dict, key: str) -> dict:
    """The part of `schema` (an object's) for `key`, looking into an if/then's properties too
    (the model section's per-builder keys); {} for a key the schema does not type."""
    for part in (schema, schema.get("then", {})):
        if key in part.get("properties", {}):
            return part["properties"][key]
    return {}


def typed_as_yaml(value, schema: dict):
    """A value Snakemake's --config handed over as text (nested values are parsed with YAML's
    BaseLoader, which keeps every scalar a string), typed as YAML types it (16 an int, 0.5 a
    float, true a boolean), except where the schema says the key is text."""
    import yaml

    if isinstance(value, dict):
        return {key: typed_as_yaml(item, key_schema(schema, key)) for key, item in value.items()}
    if isinstance(value, list):
        return [typed_as_yaml(item, schema.get("items", {})) for item in value]
    if isinstance(value, str) and schema.get("type") != "string":
        try:
            return yaml.safe_load(value) if value.strip() else value
        except yaml.YAMLError:
            return value  # left as text: validation names the key
    return value


def set_given_values(config: dict, given: dict) -> None:
    """Write each value of `given` (a nested mapping) into `config` at the same place."""
    for key, value in given.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            set_given_values(config[key], value)
        else:
            config[key] = value


def model_section(layers: list, schema: dict):
    """The model section that config layers (earliest first: the workflow's config file, then
    --configfile files, then --config) describe. Snakemake merges them key by key; here a
    layer that names another builder starts the section afresh, so one builder's keys never
    reach another's function. Builder rnn's keys left out take the schema's defaults; another
    builder's keys left out take the defaults of its own function."""
    model: dict = {}
    for layer in layers:
        section = layer.get("model") if isinstance(layer, dict) else None
        if section is None:
            continue
        if not isinstance(section, dict):
            return section  # not a mapping: validation says so
        if "builder" in section and section["builder"] != model.get("builder", "rnn"):
            model = {}
        model.update(section)
    model.setdefault("builder", "rnn")
    if model["builder"] == "rnn":
        builder_keys = key_schema(schema, "model").get("then", {}).get("properties", {})
        for key, key_part in builder_keys.items():
            if "default" in key_part:
                model.setdefault(key, key_part["default"])
    return model


def to_plain_dict(mapping) -> dict:
    """A nested mapping (Snakemake keeps --config values in an immutable map) as plain dicts."""
    return {key: to_plain_dict(value) if hasattr(value, "items") else value for key, value in mapping.items()}


def checked_config_file(path: str) -> str:
    """`path`, after checking that it is valid YAML: else the run stops (stop_run) with one
    line naming the file, line and column of the first problem (Snakemake's own message
    names neither). A missing file is left to Snakemake."""
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            yaml.safe_load(handle)
    except FileNotFoundError:
        return path
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        stop_run([f"{path}: not valid YAML{where}: {error.problem or error.context}"])
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        stop_run([f"{path}: not valid YAML: {one_line_error(error)}"])
    return path


def one_line_error(error: BaseException) -> str:
    return " ".join(str(error).split())


def stop_run(lines: list[str]) -> NoReturn:
    """Stop Snakemake while it reads the workflow, before any job: `lines` on stderr as they
    are (not inside Snakemake's "WorkflowError in file ..., line ...:" wrapper), exit status 1."""
    for line in lines:
        print(line, file=sys.stderr)
    raise SystemExit(1)


def config_sources(files: list[str], command_line_values: dict) -> str:
    """Where the configuration was read from, as the user named it: 'config/config.yaml',
    'config.yaml or --config', ..."""
    return " or ".join([*files, *(["--config"] if command_line_values else [])]) or "--config"
