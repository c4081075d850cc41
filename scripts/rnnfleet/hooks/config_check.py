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
    return sorted({line for error in errors for line in describe(error)}) + split_problems(config, schema)


def split_problems(config: dict, schema: dict) -> list[str]:
    """The one rule between keys: validation and test part leave something to train on."""
    given = config.get("preprocess") if isinstance(config.get("preprocess"), dict) else {}
    defaults = schema["properties"]["preprocess"]["properties"]
    fractions = [given.get(key, defaults[key]["default"]) for key in ("val_fraction", "test_fraction")]
    if not all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in fractions):
        return []  # a wrong type is described above
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
        bounds = [f"{sign} {schema[bound]}" for bound, sign in BOUNDS.items() if bound in schema]
        words += " " + " and ".join(bounds) if bounds else ""
        if "pattern" in schema:
            words += f" matching {schema['pattern']}"
        if schema.get("minLength"):
            words += ", not empty"
    description = schema.get("description")
    return f"{words} ({description})" if description else words
