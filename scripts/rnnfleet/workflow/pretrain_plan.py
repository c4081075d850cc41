"""Which datasets the fleet's pretraining serves, and when it is redone (rules/pretrain.smk).

What it promises:
- While the pretrained model stands (its lineage file made with the same settings, the
  user's model and feature files not changed since, no --forcerun of it), it serves the
  datasets its lineage names, and their array files are ancient() inputs: a morning's new
  bars do not redo it, and a dataset added later starts from it without redoing it.
- Whenever it is redone (its settings or the user's code changed, `--forcerun pretrain`,
  `-f`/`-F` on it, pretrain.refresh days of new bars, or no model yet) it serves every
  dataset present now, new ones included, and why_redone says why in words (the dry-run's line).
- pretrain.refresh (days): the most days of new bars a served dataset gained since (the
  newest bar of its array file as the run starts, against the newest its lineage records it
  was made with). Array files are read for one row each, and only with refresh set.
- pretrain_plan is decided while the DAG is built (an input function): Snakemake sets the
  run's --forcerun only after the Snakefile is read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rnnfleet.bars.joining import file_sha256
from rnnfleet.errors import last_marked_line
from rnnfleet.prep.arrays_file import UNREADABLE, newest_bar_ns
from rnnfleet.settings import preprocess_settings, train_hyper_parameters
from rnnfleet.train.pretraining import pretrain_settings, settings_fingerprint

DAY_NS = 86_400 * 10**9


def pretrain_settings_of(config: dict) -> dict:
    """pretrain_settings() of a complete configuration, with their fingerprint
    (settings_sha256): what the pretrain job gets and its lineage records."""
    settings = pretrain_settings(
        config["model"],
        train_hyper_parameters(config),
        config["columns"],
        config["pretrain"],
        preprocess_settings(config),
    )
    return {**settings, "settings_sha256": settings_fingerprint(settings)}


def frozen_membership(lineage_path: str, fingerprint: str, datasets: list[str]) -> tuple[list[str], bool]:
    """(the datasets the pretraining serves, whether they are frozen): those its lineage file
    names (still present) when it was made with these settings; else every dataset, not frozen."""
    try:
        with open(lineage_path) as handle:
            lineage = json.load(handle)
    except (OSError, ValueError):
        return list(datasets), False
    if not isinstance(lineage, dict) or lineage.get("settings_sha256") != fingerprint:
        return list(datasets), False
    present = set(datasets)
    return [name for name in lineage.get("datasets", []) if name in present], True


def fleet_members(datasets: list[str], arrays: list[str], logs: list[str], ready: list[str]) -> dict:
    """What the pretrain job is given (rules/pretrain.smk, from the inputs it runs with): of the
    datasets it serves (their array files and preprocess logs, in the same order), {"arrays":
    {dataset: array file} of those whose array file is among its inputs (ready), "left_out":
    {dataset: why} of the others: the job making their array file failed
    (rnnfleet.hooks.past_failed_inputs), in the words of its log's last ERROR line."""
    ready_files = {str(path) for path in ready}
    members: dict = {"arrays": {}, "left_out": {}}
    for name, path, log_path in zip(datasets, arrays, logs, strict=True):
        if path in ready_files:
            members["arrays"][name] = path
            continue
        line = last_marked_line(log_path) or ""
        members["left_out"][name] = "its preprocess failed" + (
            f": {line.removeprefix('ERROR: ')}" if line else f" (see {log_path})"
        )
    return members


@dataclass(frozen=True)
class PretrainPlan:
    """The datasets the pretraining serves, whether they are those its lineage froze, and why not."""

    datasets: list[str]
    frozen: bool
    why_redone: str  # '' while frozen


def pretrain_forced(dag_settings, rule: str, outputs: Iterable[str]) -> bool:
    """Whether this run forces the pretrain job: --forcerun naming the rule or an output of it,
    --forceall, or --force with it (or an output of it) as a target."""
    names = {rule, *map(str, outputs)}
    forced = {str(item) for item in getattr(dag_settings, "forcerun", None) or ()}
    targets = {str(item) for item in getattr(dag_settings, "targets", None) or ()}
    return bool(
        getattr(dag_settings, "forceall", False)
        or forced & names
        or (getattr(dag_settings, "forcetargets", False) and targets & names)
    )


def code_changed_since(lineage_path: str, code_files: Iterable[str]) -> bool:
    """Whether a user's model or feature file is newer than the lineage file (the pretrain job
    then runs again: those files are its inputs)."""
    try:
        made = os.path.getmtime(lineage_path)
        return any(os.path.getmtime(path) > made for path in code_files)
    except OSError:
        return False


def days_of_new_bars(lineage_path: str, arrays_paths: dict[str, str]) -> float | None:
    """The most days of new bars any of these datasets ({dataset: array file}) gained since the
    pretraining: the newest bar of its array file now against the newest it was made with
    (None: its lineage records none, made by an older rnnfleet)."""
    import json

    try:
        with open(lineage_path) as handle:
            made_with = json.load(handle).get("newest_bars_ns")
    except (OSError, ValueError):
        return None
    if not isinstance(made_with, dict):
        return None
    gained = 0
    for name, path in arrays_paths.items():
        try:
            newest = newest_bar_ns(path)
        except UNREADABLE:  # not made yet, or damaged: its preprocess job will say
            continue
        if newest is not None and isinstance(made_with.get(name), int):
            gained = max(gained, newest - made_with[name])
    return gained / DAY_NS


def pretrain_plan(
    lineage_path: str,
    fingerprint: str,
    datasets: list[str],
    forced: bool,
    code_files: Iterable[str],
    refresh_days: float | None = None,
    arrays_of=lambda dataset: "",
    model_path: str | None = None,
) -> PretrainPlan:
    """The plan of this run's pretraining (see the module doc); arrays_of(dataset): its array
    file; model_path: its model file (missing: redone, where the run needs it)."""
    members, frozen = frozen_membership(lineage_path, fingerprint, datasets)
    if not frozen:
        made = os.path.exists(lineage_path)
        return PretrainPlan(list(datasets), False, "its settings changed" if made else "there is none yet")
    if forced:
        return PretrainPlan(list(datasets), False, "the run forces it (--forcerun, -f or -F)")
    if model_path and not os.path.exists(model_path):
        return PretrainPlan(list(datasets), False, f"its model file {model_path} is missing")
    if code_changed_since(lineage_path, code_files):
        return PretrainPlan(list(datasets), False, "a model or feature file changed since it was made")
    if refresh_days is not None:
        gained = days_of_new_bars(lineage_path, {name: arrays_of(name) for name in members})
        if gained is None or gained >= refresh_days:
            said = "its lineage records no newest bar" if gained is None else f"{gained:.3g} days of new bars"
            return PretrainPlan(list(datasets), False, f"{said} since it was made (pretrain.refresh: {refresh_days:g})")
    return PretrainPlan(members, True, "")


@dataclass(frozen=True, eq=False)  # hashed by identity: Snakemake may key its caches by the functions
class PretrainRule:
    """The pretrain rule's input and param functions and its report (rules/pretrain.smk), over
    one run's datasets: {dataset: its array file} and {dataset: its preprocess log}."""

    lineage_path: str
    fingerprint: str
    arrays_of: dict[str, str]
    logs_of: dict[str, str]
    code_files: list[str]
    refresh_days: float | None
    main_process: bool
    dag_settings: Callable[[], object]  # the run's DAG settings (set after the Snakefile is read)
    outputs: tuple[str, ...]
    ancient: Callable[[str], object]  # snakemake's ancient()

    def model_input(self, wildcards) -> list[str]:
        """A train job's input (train.init fleet): the pretrained model file, none once the
        pretrain job failed in this run (rnnfleet.hooks.past_failed_inputs): as the main
        process released the train jobs, so does a cluster job building its inputs again."""
        from rnnfleet.failed_outputs import failed_outputs

        return [] if self.outputs[0] in failed_outputs() else [self.outputs[0]]

    def plan(self) -> PretrainPlan:
        """This run's plan (see the module doc), decided while the DAG is built."""
        datasets = list(self.arrays_of)
        if not self.main_process:
            # A cluster job running the pretraining: its main process chose to redo it, which
            # serves every dataset present (--forcerun does not reach this process).
            return PretrainPlan(datasets, False, "")
        forced = pretrain_forced(self.dag_settings(), "pretrain", self.outputs)
        return pretrain_plan(
            self.lineage_path,
            self.fingerprint,
            datasets,
            forced,
            self.code_files,
            self.refresh_days,
            self.arrays_of.__getitem__,
            self.outputs[0],
        )

    def arrays(self, wildcards) -> list:
        """The input function: the served datasets' array files, ancient() while frozen."""
        plan = self.plan()
        paths = [self.arrays_of[name] for name in plan.datasets]
        if not self.main_process:
            # An array file missing in a cluster job is one its main process left out (its
            # preprocess failed; rnnfleet.hooks.past_failed_inputs).
            paths = [path for path in paths if os.path.exists(path)]
        return [self.ancient(path) for path in paths] if plan.frozen else paths

    def members(self, wildcards, input) -> str:
        """The job's datasets and those left out, as JSON (a function of input: Snakemake does
        not compare it as a param; fleet_members)."""
        import json

        datasets = self.plan().datasets
        arrays = [self.arrays_of[name] for name in datasets]
        logs = [self.logs_of[name] for name in datasets]
        return json.dumps(fleet_members(datasets, arrays, logs, list(input.arrays)))

    def report(self, jobs_to_run: Iterable, say: Callable[[str], None]) -> None:
        """After the DAG is built (dry-runs too), before any job: why the pretraining runs,
        or what is wrong with its model file where it does not, in one line."""
        if any(job.rule.name == "pretrain" for job in jobs_to_run):
            plan = self.plan()
            if plan.why_redone:
                say(
                    f"rnnfleet: the fleet's pretraining runs: {plan.why_redone}; it serves {len(plan.datasets)} dataset(s)"
                )
        elif problem := pretrained_file_problem(self.outputs[0], self.lineage_path):
            say(problem)


def pretrained_file_problem(model_path: str, lineage_path: str) -> str:
    """One line where the pretrained model file its lineage records is missing or is not the
    file it made (its SHA-256 differs), with the command that redoes it; '' where it is sound
    or there is no lineage. A dataset whose fit starts from it fails until then; one that trains
    from scratch does not read it (rnnfleet.train.fleet_start)."""
    try:
        with open(lineage_path) as handle:
            recorded = json.load(handle).get("sha256")
    except (OSError, ValueError, AttributeError):
        return ""
    redo = "the trainings that start from it fail until it is redone: snakemake --forcerun pretrain"
    if not os.path.exists(model_path):
        return f"rnnfleet: ERROR: {model_path} is missing (its lineage {lineage_path} is there): {redo}"
    if recorded and file_sha256(model_path) != recorded:
        return (
            f"rnnfleet: ERROR: {model_path} is damaged: its SHA-256 is not the one {lineage_path} records "
            f"(the models trained before were not affected): {redo}"
        )
    return ""


def compare_init_note(trainings: int, seeds: int = 1) -> str:
    """The dry-run's and the run's line on what train.compare_init costs, for the `trainings`
    this run makes with it, each start trained `seeds` times (train.compare_init_seeds)."""
    fits = "twice" if seeds == 1 else f"{2 * seeds} times ({seeds} seeds a start)"
    return (
        f"rnnfleet: train.compare_init: each full fit of this run's {trainings} training(s) is trained {fits}, from "
        f"the fleet's start and from scratch (up to {2 * seeds} times the training time); set train.compare_init: "
        "false once its verdict is in"
    )


def preprocess_grouped_apart(group_settings, preprocess: str = "preprocess", train: str = "train") -> str:
    """With train.init fleet, where the run's --groups (a SLURM profile's `groups:`) put each
    dataset's preprocess in its train's group, give the preprocess jobs a group of their own,
    `<group>-preprocess`, packed as many to a job as --group-components packs the train's
    group. Snakemake refuses a group that a job outside it (the pretrain job, which needs
    every preprocess) leads back into, so as grouped the DAG could not be built at all.
    Returns the line that says so; '' (nothing changed) where they were not grouped together."""
    groups = group_settings.overwrite_groups
    group = groups.get(preprocess)
    if group is None or group != groups.get(train):
        return ""
    apart = f"{group}-{preprocess}"
    group_settings.overwrite_groups = {**groups, preprocess: apart}
    components = group_settings.group_components
    if group in components:
        group_settings.group_components = {**components, apart: components[group]}
    return (
        f"rnnfleet: train.init fleet: the {preprocess} jobs go in group {apart}, not with their {train} "
        f"in group {group}: the fleet's pretraining needs every {preprocess} before any {train}"
    )
