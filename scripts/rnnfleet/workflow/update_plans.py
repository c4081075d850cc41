"""What each train job of a run will do to a model trained before, said before the run.

A train job that replaces an existing model either updates it with new bars or trains it
from scratch (rnnfleet.train.updating.plan_training decides, in the job, from the bars
themselves). Before the run (dry-runs too) this module says which to expect, from what is
known without reading any bars: the settings changes (rnnfleet.workflow.settings_changes), the
`update:` and `evaluate:` settings, the model's metrics file (its lineage: updates since the
full fit, rows seen) and, where the array file is not made again first, its row count
(the header of its features array, nothing more). Where the preprocess job runs first, the
count of new bars is not known yet: "update: new bars/new files". Cost: one metrics file
read per re-train that could be an update, one array header where preprocess does not run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping

from rnnfleet.prep.arrays_file import array_rows
from rnnfleet.settings import full_fit_due, updates_ruled_out

SETTINGS_CHANGED = "re-train: settings changed"
NEW_BARS = "update: new bars/new files"
# The label when the job decides on what only it reads (no metrics file: a previous model kept).
DECIDED_IN_JOB = "update or re-train: decided when the job reads the bars"
SHOWN_DATASETS = 3


def recorded_lineage(metrics_path: str) -> dict | None:
    try:
        with open(metrics_path) as handle:
            lineage = json.load(handle).get("lineage")
    except (OSError, ValueError, AttributeError):
        return None
    return lineage if isinstance(lineage, dict) else None


def expected_fit(
    settings_changed: bool,
    update: Mapping,
    evaluate: Mapping,
    lineage: dict | None,
    preprocess_runs: bool,
    arrays_rows: Callable[[], int | None],
) -> str:
    """What the train job of a model trained before is expected to do, as its label
    (rnnfleet.train.updating.Plan.label's words)."""
    if settings_changed:
        return SETTINGS_CHANGED
    ruled_out = updates_ruled_out(update, evaluate)
    if ruled_out:
        return f"re-train: {ruled_out}"
    if lineage is None:
        return DECIDED_IN_JOB
    due = full_fit_due(int(lineage.get("updates", 0)), update)
    if due:
        return f"re-train: {due}"
    if preprocess_runs:
        return NEW_BARS
    rows = arrays_rows()
    if rows is None:
        return DECIDED_IN_JOB
    new_rows = rows - int(lineage.get("rows", 0))
    return f"update: {new_rows} new bars" if new_rows > 0 else "re-train: no new bars"


# The rule of the fleet's pretrained model (rules/pretrain.smk): when it runs, every train job
# that starts from it re-trains in full, whatever else the dataset's files say.
PRETRAIN_RULE = "pretrain"
PRETRAINED_CHANGES = "re-train: the fleet's pretrained model changes"
# Its file changed on disk since the model was trained, while the pretraining does not run.
PRETRAINED_FILE_CHANGED = (
    "re-train: the fleet's pretrained model file changed on disk since, not by its pretraining (the ERROR line below)"
)


def planned_fits(
    dag,
    train_rule: str,
    preprocess_rule: str,
    settings_changed: Mapping[str, object],
    settings_of: Callable[[str], tuple[Mapping, Mapping]],
) -> dict[str, str]:
    """{dataset: expected_fit label} for each train job the DAG will run whose model file
    exists. settings_changed: the datasets whose settings changed; settings_of(dataset): its
    (update, evaluate) settings."""
    trains, preprocessing, pretraining = {}, set(), False
    for job in dag.needrun_jobs():
        pretraining |= job.rule.name == PRETRAIN_RULE
        if job.rule.name == train_rule:
            trains[job.wildcards.dataset] = job
        elif job.rule.name == preprocess_rule:
            preprocessing.add(job.wildcards.dataset)
    planned = {}
    for dataset, job in trains.items():
        if not os.path.exists(job.output.model):
            continue
        pretrained = getattr(job.input, "pretrained", None)  # train.init fleet
        if pretrained and pretraining:
            planned[dataset] = PRETRAINED_CHANGES
            continue
        if pretrained and newer_than(str(pretrained[0]), job.output.model):
            planned[dataset] = PRETRAINED_FILE_CHANGED
            continue
        update, evaluate = settings_of(dataset)
        changed = dataset in settings_changed
        planned[dataset] = expected_fit(
            changed,
            update,
            evaluate,
            None if changed else recorded_lineage(job.output.metrics),
            dataset in preprocessing,
            lambda job=job: array_rows(job.input.arrays),
        )
    return planned


def newer_than(path: str, other: str) -> bool:
    try:
        return os.path.getmtime(path) > os.path.getmtime(other)
    except OSError:
        return False


def report_lines(planned: Mapping[str, str]) -> list[str]:
    """One line per label, with how many datasets and the first few (empty: nothing planned)."""
    groups: dict[str, list[str]] = {}
    for dataset in sorted(planned):
        groups.setdefault(planned[dataset], []).append(dataset)
    if not groups:
        return []
    lines = [f"rnnfleet: {len(planned)} model(s) trained before will be replaced:"]
    for label, datasets in sorted(groups.items(), key=lambda group: (-len(group[1]), group[0])):
        more = len(datasets) - SHOWN_DATASETS
        names = ", ".join(datasets[:SHOWN_DATASETS]) + (f" and {more} more" if more > 0 else "")
        lines.append(f"  {label}: {len(datasets)} (datasets: {names})")
    return lines
