"""The datasets sheet (config key `datasets.sheet`): a TSV or CSV table of the datasets, their
files and settings of their own, in the shape of Snakemake's units.tsv (docs/data.md):

    dataset   files                        format.timezone   target
    ETHUSDT   ETHUSDT/*.csv                Europe/Athens
    ETHUSDT   archive/ETHUSDT-2023.csv.gz
    EURUSD    EURUSD_1m.csv                                  direction

Promises:
- One row per path or glob (relative to data_dir); a dataset with several files has several
  rows. A setting given on any of a dataset's rows is the dataset's; an empty cell is the
  config's value; two rows of one dataset giving one key different values are an error.
- Each row is checked against schemas/datasets.schema.yaml, each override column against the
  config schema (an unknown key, or one that belongs to the whole run, is refused), and each
  dataset's configuration with its overrides against the config schema.
- Every problem is one line naming the sheet, the line (1 = the header) and what to change;
  all the sheet's problems are reported together.
- Datasets with the same overrides share one configuration object, so what is built from it
  (the jobs' settings) is built once per distinct set of overrides, not once per dataset.
- No data file is opened: one stat per named path and one glob per glob, one stat per file
  (its size and time make the dataset's fingerprint, as in rnnfleet.bars.discovery).
"""

from __future__ import annotations

import copy
import csv
import glob
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from rnnfleet.bars.discovery import (
    MAX_DATASET_NAME_BYTES,
    Datasets,
    check_data_dir,
    fingerprint_of,
    is_bar_file_name,
)
from rnnfleet.bars.joining import CHECKSUM_SUFFIX
from rnnfleet.errors import UserError
from rnnfleet.settings import RUNTIME_ONLY_TRAIN_KEYS
from rnnfleet.workflow.config_check import (
    allowed_values,
    config_problems,
    did_you_mean,
    key_schema,
    to_plain_dict,
    typed_as_yaml,
)

NAME_COLUMNS = ("dataset", "files")
BAR_FILES = "files rnnfleet reads: .csv .txt .tsv, each also compressed, .parquet, .pq"
# Sections whose keys a row may set (as `section.key` columns), and the top-level keys it may set.
SECTIONS = ("format", "columns", "preprocess", "evaluate", "model", "train", "update", "quality")
TOP_LEVEL_KEYS = ("target",)
# Keys that belong to the whole run: where and how fast jobs run, and the model function
# every train job imports (its file is an input of every train job).
RUN_WIDE_KEYS = {
    **{f"train.{key}": "how fast or where a model trains, not what it learns" for key in RUNTIME_ONLY_TRAIN_KEYS},
    "model.builder": "the model function every dataset trains; a row may set its other keys",
}
# Problems listed before the rest are summed up as a count.
MAX_PROBLEMS_LISTED = 10


@dataclass
class SheetRow:
    """One row of the sheet: its line number, dataset, path or glob, and its non-empty
    override cells ({dotted config key: cell text})."""

    line: int
    dataset: str
    files: str
    overrides: dict[str, str] = field(default_factory=dict)


@dataclass
class DatasetSheet:
    """The datasets the sheet defines (files and fingerprints, as discovery gives them),
    {dataset: its configuration with its overrides} for each dataset that has any
    (datasets with the same overrides share one object), and those overrides themselves
    ({dataset: {dotted config key: value}})."""

    found: Datasets
    configs: dict[str, dict]
    overrides: dict[str, dict[str, object]] = field(default_factory=dict)


def read_dataset_sheet(
    sheet_path: str, data_dir: str, config: dict, config_schema: dict, row_schema: dict
) -> DatasetSheet:
    """The sheet's datasets (see the module doc); UserError with one line per problem."""
    check_data_dir(data_dir)
    header, rows = read_rows(sheet_path)
    label = f"datasets sheet {sheet_path!r}"
    problems = [
        f"{label} line {header.line}: {problem}"
        for column in header.overrides
        if (problem := override_key_problem(column, config, config_schema))
    ]
    if problems:
        raise sheet_error(problems)
    problems = row_problems(rows, row_schema, label)
    if problems:
        raise sheet_error(problems)
    found, problems = sheet_files(rows, data_dir, label)
    overrides, override_problems = dataset_overrides(rows, config_schema, label)
    configs, config_problem_lines = dataset_configs(overrides, config, config_schema, label)
    problems += override_problems + config_problem_lines
    if problems:
        raise sheet_error(problems)
    own = {dataset: {key: value for key, (value, _) in keyed.items()} for dataset, keyed in overrides.items() if keyed}
    return DatasetSheet(found=found, configs=configs, overrides=own)


def sheet_error(problems: list[str]) -> UserError:
    listed = problems[:MAX_PROBLEMS_LISTED]
    if len(problems) > len(listed):
        listed.append(f"... and {len(problems) - len(listed)} more problem(s) in the same sheet")
    return UserError("\n".join(listed))


def read_rows(sheet_path: str) -> tuple[SheetRow, list[SheetRow]]:
    """(the header as a row: its line and {column: column}, the rows). Tab-separated when the
    header holds a tab, else comma-separated; blank lines and lines starting with # skipped."""
    try:
        text = Path(sheet_path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise UserError(
            f"config key 'datasets.sheet' = {sheet_path!r}: no such file; allowed: a TSV or CSV file "
            '(path relative to the folder snakemake runs in), or "" for none'
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"config key 'datasets.sheet' = {sheet_path!r}: cannot be read ({error})") from None
    lines = [
        (number, line)
        for number, line in enumerate(text.splitlines(), 1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    label = f"datasets sheet {sheet_path!r}"
    if not lines:
        raise UserError(
            f"{label}: is empty; allowed: a header line with the columns dataset and files, then one row per file"
        )
    header_number, header_text = lines[0]
    delimiter = "\t" if "\t" in header_text else ","
    columns = cells(header_text, delimiter)
    missing = [name for name in NAME_COLUMNS if name not in columns]
    repeated = sorted({name for name in columns if columns.count(name) > 1})
    if missing or repeated or "" in columns:
        problem = (
            f"has no column {' or '.join(map(repr, missing))}"
            if missing
            else f"names the column(s) {', '.join(map(repr, repeated))} twice"
            if repeated
            else "has a column without a name"
        )
        raise UserError(
            f"{label} line {header_number}: the header {problem}; allowed: dataset, files and dotted "
            "config keys such as format.timezone, each once, separated by tabs (or commas)"
        )
    header = SheetRow(header_number, "dataset", "files", {name: name for name in columns if name not in NAME_COLUMNS})
    rows = []
    for number, line in lines[1:]:
        values = cells(line, delimiter)
        if len(values) > len(columns) and any(values[len(columns) :]):
            raise UserError(
                f"{label} line {number}: has {len(values)} cells, the header {len(columns)}; "
                f"allowed: one cell per column ({', '.join(columns)}), empty cells for no override"
            )
        record = dict(zip(columns, values + [""] * (len(columns) - len(values)), strict=False))  # empty extra cells
        rows.append(
            SheetRow(
                line=number,
                dataset=record.pop("dataset"),
                files=record.pop("files"),
                overrides={key: value for key, value in record.items() if value},
            )
        )
    if not rows:
        raise UserError(f"{label}: has a header but no rows; allowed: one row per dataset file (dataset, files)")
    return header, rows


def cells(line: str, delimiter: str) -> list[str]:
    return [cell.strip() for cell in next(csv.reader([line], delimiter=delimiter))]


def override_key_problem(key: str, config: dict, config_schema: dict) -> str | None:
    """Why a column cannot be a dataset's own setting (None: it can)."""
    if key in RUN_WIDE_KEYS:
        return (
            f"column {key!r} is a setting of the whole run ({RUN_WIDE_KEYS[key]}); "
            "set it in config.yaml, not per dataset"
        )
    parts = key.split(".")
    if parts[0] in TOP_LEVEL_KEYS and len(parts) == 1:
        return None
    if parts[0] in SECTIONS and len(parts) > 1 and all(parts):
        if key_schema_of(parts, config_schema):
            return None
        if parts[0] == "model" and len(parts) == 2 and config["model"].get("builder", "rnn") != "rnn":
            return None  # another builder's function declares its own keys
    allowed = settable_keys(config_schema)
    return (
        f"unknown column {key!r}{did_you_mean(key, allowed)}; allowed: dataset, files and the config keys "
        f"{', '.join(TOP_LEVEL_KEYS)}, {', '.join(section + '.*' for section in SECTIONS)} "
        "(docs/configuration.md), e.g. format.timezone"
    )


def key_schema_of(parts: list[str], config_schema: dict) -> dict:
    """The config schema's part for a dotted key's parts ({} for a key it does not know)."""
    node = config_schema
    for part in parts:
        node = key_schema(node, part)
        if not node:
            return {}
    return node


def settable_keys(config_schema: dict) -> list[str]:
    """Every dotted key a sheet may set (for did-you-mean)."""

    def keys_of(node: dict, prefix: str) -> list[str]:
        names = [*node.get("properties", {}), *node.get("then", {}).get("properties", {})]
        found = []
        for name in dict.fromkeys(names):
            key = f"{prefix}.{name}"
            if key not in RUN_WIDE_KEYS:
                found.append(key)
                found += keys_of(key_schema(node, name), key)
        return found

    sections = [key for section in SECTIONS for key in keys_of(key_schema(config_schema, section), section)]
    return [*TOP_LEVEL_KEYS, *sections]


def row_problems(rows: list[SheetRow], row_schema: dict, label: str) -> list[str]:
    """Each way a row breaks schemas/datasets.schema.yaml, and over-long dataset names."""
    from jsonschema import Draft202012Validator  # comes with Snakemake

    validator = Draft202012Validator(row_schema)
    problems = []
    for row in rows:
        record = {"dataset": row.dataset, "files": row.files, **row.overrides}
        for error in sorted(validator.iter_errors(record), key=lambda error: list(error.absolute_path)):
            column = ".".join(str(part) for part in error.absolute_path)
            problems.append(
                f"{label} line {row.line}: column {column!r} = {error.instance!r} is not allowed; "
                f"allowed: {allowed_values(error.schema)}"
                if column
                else f"{label} line {row.line}: {error.message}"
            )
        if len(row.dataset.encode()) > MAX_DATASET_NAME_BYTES:
            problems.append(
                f"{label} line {row.line}: dataset name {row.dataset[:40]!r}... is {len(row.dataset.encode())} bytes "
                f"long; allowed: at most {MAX_DATASET_NAME_BYTES} (output file names are limited to 255)"
            )
    return problems


def has_glob(path: str) -> bool:
    return any(character in path for character in "*?[")


def row_files(row: SheetRow, data_dir: str) -> tuple[list[str], str | None]:
    """(the bar files a row names, why it names none)."""
    path = os.path.normpath(os.path.join(data_dir, row.files))
    if has_glob(row.files):
        matches = sorted(
            match
            for match in glob.glob(path, recursive=True)
            if is_bar_file_name(os.path.basename(match)) and os.path.isfile(match)
        )
        if matches:
            return matches, None
        return [], (
            f"files {row.files!r} matches no bar file under data_dir {data_dir!r}; allowed: a path or glob "
            f"relative to data_dir naming {BAR_FILES}"
        )
    if not os.path.exists(path):
        return [], f"files {row.files!r}: no such file in data_dir {data_dir!r} ({path!r} does not exist)"
    if os.path.isdir(path):
        return [], f"files {row.files!r} is a folder; allowed: a file, or a glob such as '{row.files}/*.csv'"
    if not os.path.isfile(path):
        return [], f"files {row.files!r} is not a regular file (a pipe, socket or device)"
    if not is_bar_file_name(os.path.basename(path)):
        return [], f"files {row.files!r} is not a bar file; allowed: {BAR_FILES}"
    return [path], None


def sheet_files(rows: list[SheetRow], data_dir: str, label: str) -> tuple[Datasets, list[str]]:
    """The datasets' files (in path order), their fingerprints and checksummed files, and the
    rows' problems: a row naming no file, a file two datasets name."""
    members: dict[str, dict[str, int]] = {}  # dataset -> {file: the line naming it first}
    owner: dict[str, tuple[str, int]] = {}  # file -> (dataset, line)
    problems = []
    for row in rows:
        paths, problem = row_files(row, data_dir)
        if problem:
            problems.append(f"{label} line {row.line} (dataset {row.dataset}): {problem}")
        for path in paths:
            other, other_line = owner.setdefault(path, (row.dataset, row.line))
            if other != row.dataset:
                problems.append(
                    f"{label} line {row.line} (dataset {row.dataset}): {path!r} is also a file of dataset {other} "
                    f"(line {other_line}); allowed: each file in one dataset"
                )
                continue
            members.setdefault(row.dataset, {}).setdefault(path, row.line)
    found = Datasets()
    for name in sorted(members):
        paths = sorted(members[name])
        stats = [(path, os.stat(path)) for path in paths]
        for path in paths:
            try:
                stats.append((path + CHECKSUM_SUFFIX, os.stat(path + CHECKSUM_SUFFIX)))
                found.checksummed.add(path)
            except FileNotFoundError:
                pass
        found.files[name] = paths
        found.fingerprints[name] = fingerprint_of(stats)
    return found, problems


def dataset_overrides(
    rows: list[SheetRow], config_schema: dict, label: str
) -> tuple[dict[str, dict[str, tuple[object, int]]], list[str]]:
    """({dataset: {dotted key: (value typed as the config schema types it, its line)}},
    the rows that give one dataset's key two values)."""
    overrides: dict[str, dict[str, tuple[object, int]]] = {}
    problems = []
    for row in rows:
        own = overrides.setdefault(row.dataset, {})
        for key, text in row.overrides.items():
            value = typed_as_yaml(text, key_schema_of(key.split("."), config_schema))
            earlier = own.setdefault(key, (value, row.line))
            if earlier[0] != value:
                problems.append(
                    f"{label} line {row.line} (dataset {row.dataset}): {key} = {value!r} differs from "
                    f"{earlier[0]!r} on line {earlier[1]}; allowed: a dataset's setting on one of its rows, "
                    "or the same on each"
                )
    return overrides, problems


def dataset_configs(
    overrides: dict[str, dict[str, tuple[object, int]]], config: dict, config_schema: dict, label: str
) -> tuple[dict[str, dict], list[str]]:
    """({dataset: config with its overrides} for the datasets that have any, one object per
    distinct set of overrides; the problems the config schema finds in them, per dataset)."""
    built: dict[str, tuple[dict, list[str]]] = {}
    configs, problems = {}, []
    for dataset, keyed in overrides.items():
        if not keyed:
            continue
        values = {key: value for key, (value, _) in keyed.items()}
        group = json.dumps(values, sort_keys=True, default=repr)
        if group not in built:
            merged = with_overrides(config, values)
            built[group] = (merged, config_problems(merged, config_schema))
        configs[dataset], group_problems = built[group]
        for problem in group_problems:
            lines = [line for key, (_, line) in keyed.items() if f"'{key}" in problem]
            line = min(lines) if lines else min(line for _, line in keyed.values())
            problems.append(f"{label} line {line} (dataset {dataset}): {problem}")
    return configs, problems


def with_overrides(config: dict, values: dict[str, object]) -> dict:
    """A copy of config with each dotted key of values set."""
    merged = copy.deepcopy(to_plain_dict(config))
    for key, value in values.items():
        *sections, name = key.split(".")
        node = merged
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = value
    return merged
