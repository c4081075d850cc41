# Datasets: which files in data_dir make which dataset, the path of every output, and
# the input functions of the rules.
import os
import re
import sys
from fnmatch import fnmatch

from rnnfleet.formats import READABLE_SUFFIXES
from rnnfleet.hooks.after_failures import not_done_list_if_stale

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


def entry_problem(entry):
    """Why an entry of data_dir named like a bar file is not one (None: it is a file). From
    the listing's file type; only a symbolic link costs a stat (of its target)."""
    if entry.is_file():
        return None
    if entry.is_symlink():
        target = os.readlink(entry.path)
        if entry.is_dir():
            return f"is a symbolic link to {target!r}, which is a folder"
        if os.path.exists(entry.path):
            return f"is a symbolic link to {target!r}, which is not a regular file"
        return f"is a symbolic link to {target!r}, which does not exist"
    if entry.is_dir():
        return "is a folder, not a file (a dataset is one file)"
    return "is not a regular file (a pipe, socket or device)"


def discover_datasets(data_dir, pattern):
    """{dataset name: file path} for every bar file in data_dir whose name matches pattern,
    from one listing of the folder (no per-file stat at parse time). An entry named like
    one that is not a file (a folder, a dangling symbolic link) is left out, with one
    warning line."""
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
            elif problem := entry_problem(entry):
                if workflow.is_main_process:
                    print(
                        f"rnnfleet: WARNING: {entry.path}: {problem}; skipped, not a dataset of this run",
                        file=sys.stderr,
                    )
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
NOT_DONE = f"{PATHS['results']}/not_done.txt"  # see rnnfleet.hooks.after_failures
PREDICTIONS = f"{PATHS['predictions']}/{{dataset}}.csv"
INSPECTION = f"{PATHS['results']}/inspect.csv"


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


wildcard_constraints:
    dataset=DATASET_NAME,


def stale_not_done_list(wildcards):
    """An input of summarize only when the table written after failures must be rewritten
    although no dataset trains again (rnnfleet.hooks.after_failures)."""
    return not_done_list_if_stale(NOT_DONE, DATA_FILES, METRICS)
