# What a run checks before it plans or starts a job: that the targets name datasets that
# exist, that the output folders can be written, and which model files no longer load
# (their datasets train again); once it has planned: which models it re-trains with
# changed settings, and which it updates with new bars. Applied from rules/handlers.smk.
import errno
import os
import re
from pathlib import Path

from snakemake.logging import logger

from rnnfleet.atomic_files import folder_write_problem

from rnnfleet.train.modelfile import model_file_problem
from rnnfleet.errors import WRITE_CAUSES
from rnnfleet.workflow.settings_changes import planned_settings_changes, report_lines
from rnnfleet.workflow.pretrain_plan import compare_init_note, preprocess_grouped_apart
from rnnfleet.workflow import update_plans
from rnnfleet.settings import TRAIN_PARAM_CONFIG_KEYS, preprocess_config_keys

# The files of one dataset a user may ask for by name, e.g. snakemake predictions/X.csv.
PER_DATASET_OUTPUTS = [ARRAYS, MODEL, METRICS, PREDICTIONS, EXPORT]


def requested_datasets(targets):
    """{target: dataset} for the targets that are one dataset's file (PER_DATASET_OUTPUTS)."""
    shapes = [
        re.compile("(?P<dataset>[^/]+)".join(map(re.escape, path.split("{dataset}"))))
        for path in PER_DATASET_OUTPUTS
    ]
    found = {}
    for target in targets:
        path = os.path.relpath(target) if os.path.isabs(target) else target
        path = Path(os.path.normpath(path)).as_posix()
        for shape in shapes:
            if match := shape.fullmatch(path):
                found[target] = match["dataset"]
    return found


def check_requested_datasets(targets):
    """A target that is the file of a dataset that is not in data_dir stops the run with one
    line (Snakemake would report an exception in an input function)."""
    for target, name in requested_datasets(targets).items():
        if name not in DATA_FILES:
            raise WorkflowError(f"{target}: {no_such_dataset(name)}; nothing was run")


def path_setting(path):
    """The paths: key whose folder holds `path` (as 'config key paths.results'), or ''."""
    for key, folder in PATHS.items():
        if Path(folder) in (Path(path), *Path(path).parents):
            return f" (config key paths.{key})"
    return ""


def unwritable_line(path, problem):
    return f"{path}{path_setting(path)}: cannot be written: {problem}; nothing was run"


def check_output_folders_writable():
    """Before the first job: this user can write in every existing folder that a job of the
    run writes into (otherwise Snakemake stops at the first output it cannot remove, with
    a traceback, and the jobs already started carry on without a summary)."""
    folders = {
        os.path.dirname(path) or "."
        for job in workflow.dag.needrun_jobs()
        for path in job.output
    }
    for folder in sorted(folders):
        problem = folder_write_problem(folder)
        if problem:
            raise WorkflowError(unwritable_line(folder, problem))


def write_protected_line(paths):
    """The line for outputs of a job this user cannot write (Snakemake: write-protected)."""
    problems = [(path, folder_write_problem(path)) for path in paths]
    path, problem = next(
        ((path, problem) for path, problem in problems if problem),
        (paths[0], WRITE_CAUSES[errno.EACCES]),
    )
    return unwritable_line(path, problem)


def models_that_do_not_load():
    """{model path: why} for the model files of this run's datasets that cannot be whole
    model files (rnnfleet.train.modelfile.model_file_problem: size and end bytes, no unpacking).
    One listing of the models folder and one small read per model."""
    try:
        with os.scandir(PATHS["models"]) as entries:
            names = [entry.name for entry in entries]
    except (FileNotFoundError, NotADirectoryError):
        return {}
    broken = {}
    for name in names:
        dataset = name[: -len(".pt")] if name.endswith(".pt") else None
        if dataset in DATA_FILES:
            path = MODEL.format(dataset=dataset)
            try:
                problem = model_file_problem(path)
            except OSError as error:
                problem = f"it cannot be read ({error.strerror})"
            if problem:
                broken[path] = problem
    return broken


def before_building_dag_of_this_run(target_files, target_rules, force_files):
    """Targets naming unknown datasets stop the run; a model file that no longer loads
    (emptied, cut short, overwritten) is forced, so that its train job runs again if the
    run needs it, as when the file is missing (a forced file the run does not need
    changes nothing). With train.init fleet, a SLURM profile's groups that put each
    dataset's preprocess with its train give the preprocess jobs a group of their own (the
    run's --groups are known only now)."""
    check_requested_datasets(target_files)
    if config["train"]["init"] == "fleet" and (
        grouped_apart := preprocess_grouped_apart(workflow.group_settings)
    ):
        logger.info(grouped_apart)
    for path, problem in models_that_do_not_load().items():
        logger.warning(
            f"rnnfleet: {path}: does not load: {problem}; a run that needs it trains its dataset again"
        )
        force_files.add(path)


def report_changed_settings(dag):
    """After the DAG is built (dry-runs too): the models this run re-trains with settings
    other than those they were trained with, in words (rnnfleet.workflow.settings_changes).
    """
    try:
        changes = planned_settings_changes(
            dag,
            workflow.persistence,
            "train",
            TRAIN_PARAM_CONFIG_KEYS,
            "preprocess",
            preprocess_config_keys(config),
        )
    # A report must never stop the run: a Snakemake whose DAG or records read otherwise
    # gets one line instead.
    except Exception as error:
        logger.warning(
            f"rnnfleet: WARNING: cannot tell which settings changed since the models were trained "
            f"({type(error).__name__}: {error}); models may be re-trained without notice"
        )
        return
    lines = report_lines(changes)
    if lines:
        logger.warning("\n".join(lines))
    report_planned_fits(dag, changes)
    to_run = list(dag.needrun_jobs())
    if FLEET_START:  # train.init fleet
        PRETRAIN.report(to_run, logger.info)
    comparing = [
        job
        for job in to_run
        if job.rule.name == "train" and compares_init(job.wildcards.dataset)
    ]
    if comparing:
        seeds = max(compare_seeds(job.wildcards.dataset) for job in comparing)
        logger.info(compare_init_note(len(comparing), seeds))


def compare_seeds(dataset):
    """The dataset's train.compare_init_seeds."""
    return DATASET_CONFIGS.get(dataset, config)["train"]["compare_init_seeds"]


def compares_init(dataset):
    """Whether the dataset's full fits are trained twice (train.compare_init, with train.init fleet)."""
    train = DATASET_CONFIGS.get(dataset, config)["train"]
    return train["init"] == "fleet" and train["compare_init"]


def report_planned_fits(dag, settings_changed):
    """Whether each model trained before is updated or trained from scratch, as far as is
    known before its bars are read (rnnfleet.workflow.update_plans)."""

    def settings_of(dataset):
        dataset_config = DATASET_CONFIGS.get(dataset, config)
        return dataset_config["update"], dataset_config["evaluate"]

    try:
        planned = update_plans.planned_fits(
            dag, "train", "preprocess", settings_changed, settings_of
        )
    except Exception as error:  # as above: a report never stops the run
        logger.warning(
            f"rnnfleet: WARNING: cannot tell which models will be updated ({type(error).__name__}: {error})"
        )
        return
    lines = update_plans.report_lines(planned)
    if lines:
        logger.info("\n".join(lines))
