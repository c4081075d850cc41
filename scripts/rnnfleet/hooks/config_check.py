"""Configuration problems as one line each, naming the key and what it allows.

Snakemake's own validation stops at the first problem and prints the whole schema with
it; these messages say what to change.
"""

from __future__ import annotations

import difflib

TYPE_NAMES = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "true or false",
    "object": "a mapping",
}
BOUNDS = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}


def config_problems(config: dict, schema: dict) -> list[str]:
    """Every way `config` breaks `schema` (a JSON schema), one sentence each; [] if none."""
    from jsonschema import Draft202012Validator  # comes with Snakemake

    errors = Draft202012Validator(schema).iter_errors(config)
    return sorted({line for error in errors for line in describe(error)})


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
