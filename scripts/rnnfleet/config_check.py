"""Configuration problems as one line each, naming the key and what it allows.

Snakemake's own validation stops at the first problem and prints the whole schema with
it; these messages say what to change.
"""

from __future__ import annotations

import difflib
import math

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
    problems = {line for error in errors for line in describe(error)}
    problems.update(non_finite_numbers(config, schema))
    problems.update(timezone_problems(config))
    return sorted(problems)


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
        f"config key 'format.timezone' = {zone!r} is not allowed; allowed: auto or a time zone name "
        "such as UTC, Europe/Athens, America/New_York, Etc/GMT+5"
    ]


def is_time_zone(zone: str) -> bool:
    """Whether pandas reads naive times in `zone` (the IANA database through zoneinfo; pandas,
    which also knows pytz's and dateutil's names, only asked when zoneinfo does not know it)."""
    import zoneinfo

    try:
        zoneinfo.ZoneInfo(zone)
        return True
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        pass
    import pandas as pd

    try:
        pd.Timestamp("2020-01-01").tz_localize(zone)
        return True
    except Exception:  # pytz, zoneinfo and dateutil each raise their own kinds
        return False


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
