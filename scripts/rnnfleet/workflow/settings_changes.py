"""Which settings a re-train changes, said in words before anything is overwritten.

Snakemake re-runs a job whose params differ from those recorded with its outputs
(.snakemake/metadata) and its dry-run says only "Params have changed since last execution",
with the values' Python reprs and no names. A forgotten `--config` then replaces models
without anyone noticing. What this module promises:

- settings_changes(): from a job's params now (by name) and Snakemake's record of what changed
  (ParamsChange.only_old / only_new: the reprs of values gone and values new), the config keys
  whose value changed, each with its value then and now. Dict params (model, train, columns,
  evaluate) are compared key by key; a recorded value is matched to the param it was by its
  keys (dicts) or, where one value of that type changed, by its type; where the record does
  not tell (two values of one type changed at once), the key is named with its new value only.
  Recorded values are read with ast.literal_eval: nothing recorded is run.
- planned_settings_changes(): for the train jobs a run will run whose model file exists,
  those changes (the train job's own, and those of the same dataset's preprocess job). Cost:
  nothing for the jobs that do not run; for each re-train one or two metadata records, which
  Snakemake has usually read already while planning.
- report_lines(): one warning block, the datasets grouped by identical changes.
"""

from __future__ import annotations

import ast
import functools
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

# How many dataset names a report line shows before "and N more".
SHOWN_DATASETS = 3
# How many different sets of changes a report lists before "and N more".
SHOWN_GROUPS = 5


class _NotSet:
    def __repr__(self) -> str:
        return "(not set)"


NOT_SET: Any = _NotSet()


class Change(NamedTuple):
    """One config key whose value changed; before is None where the record does not tell."""

    key: str
    before: str | None
    now: str


def shown(value: Any) -> str:
    """A value as a user would write it in the config (text plain, the rest as JSON)."""
    if value is NOT_SET:
        return repr(NOT_SET)
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


@functools.lru_cache(maxsize=64)  # the jobs of a run mostly share their recorded values
def _recorded_values(reprs: tuple[str, ...]) -> tuple[Any, ...]:
    values = []
    for text in reprs:
        try:
            values.append(ast.literal_eval(text))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue  # not a literal (e.g. inf, an object): it tells nothing
    return tuple(values)


def recorded_values(reprs: Iterable[str]) -> list[Any]:
    """The values Snakemake recorded (their reprs), those that read back as plain literals
    (shared between calls: read them, do not change them)."""
    return list(_recorded_values(tuple(sorted(reprs))))


def _match_recorded(changed: Mapping[str, Any], gone: list[Any]) -> dict[str, Any]:
    """{param name: the recorded value it replaced, or NOT_SET where the record does not tell}."""
    gone = list(gone)
    matched: dict[str, Any] = {}
    # Dicts by their keys, the best overlap first (model, train, columns, evaluate share none).
    dict_names = [name for name, value in changed.items() if isinstance(value, dict)]
    candidates = sorted(
        (
            (len(changed[name].keys() & old.keys()), name, index)
            for name in dict_names
            for index, old in enumerate(gone)
            if isinstance(old, dict) and changed[name].keys() & old.keys()
        ),
        reverse=True,
    )
    used: set[int] = set()
    for _, name, index in candidates:
        if name not in matched and index not in used:
            matched[name] = gone[index]
            used.add(index)
    # Other values by type, where one value of that type changed and one of it is gone.
    others = [name for name in changed if not isinstance(changed[name], dict)]
    rest = [old for index, old in enumerate(gone) if index not in used and not isinstance(old, dict)]
    for name in others:
        same_type_names = [other for other in others if type(changed[other]) is type(changed[name])]
        same_type_gone = [old for old in rest if type(old) is type(changed[name])]
        if len(same_type_names) == 1 and len(same_type_gone) == 1:
            matched[name] = same_type_gone[0]
    return {name: matched.get(name, NOT_SET if name in dict_names else None) for name in changed}


def _differences(key: str, before: Any, now: Any) -> list[Change]:
    if before is None:  # the record does not tell what it was
        return [Change(key, None, shown(now))]
    if isinstance(before, dict) and isinstance(now, dict):
        return [
            change
            for name in sorted(before.keys() | now.keys(), key=str)
            for change in _differences(f"{key}.{name}", before.get(name, NOT_SET), now.get(name, NOT_SET))
        ]
    if before is NOT_SET and isinstance(now, dict):
        return [change for name in sorted(now, key=str) for change in _differences(f"{key}.{name}", NOT_SET, now[name])]
    if type(before) is type(now) and before == now:
        return []
    return [Change(key, shown(before), shown(now))]


def settings_changes(
    params_now: Mapping[str, Any],
    recorded_gone: Iterable[str],
    recorded_new: Iterable[str],
    config_keys: Mapping[str, str],
) -> list[Change]:
    """The config keys whose value differs from the recorded one.

    params_now: a job's params by name; recorded_gone / recorded_new: the reprs of the
    values recorded before and no longer there / there now and not recorded (Snakemake's
    ParamsChange.only_old / only_new); config_keys: {param name: its config key} for the
    params that are settings (others, e.g. a fingerprint of the data files, are not named
    but still matched, so that their values are not taken for a setting's)."""
    new_reprs = set(recorded_new)
    changed = {name: value for name, value in params_now.items() if repr(value) in new_reprs}
    before = _match_recorded(changed, recorded_values(recorded_gone))
    return [
        change
        for name, value in changed.items()
        if name in config_keys
        for change in _differences(config_keys[name], before[name], value)
    ]


def _recorded_change(job, dag, persistence):
    """Snakemake's ParamsChange of a job: the one its reason holds, else (the job runs for
    another reason, e.g. its input is made again first) the one its outputs' records give."""
    change = dag.reason(job).params_changed
    return change if change else persistence.params_changed(job)


def _job_changes(job, dag, persistence, config_keys: Mapping[str, str]) -> list[Change]:
    change = _recorded_change(job, dag, persistence)
    if not change:
        return []
    return settings_changes(dict(job.params.items()), change.only_old, change.only_new, config_keys)


def planned_settings_changes(
    dag,
    persistence,
    train_rule: str,
    train_config_keys: Mapping[str, str],
    preprocess_rule: str,
    preprocess_config_keys: Mapping[str, str],
) -> dict[str, tuple[Change, ...]]:
    """{dataset: its changes} for each train job the DAG will run whose model file (the
    job's output `model`) exists: a model trained before that this run replaces. Datasets
    without a model yet, and re-trains with unchanged settings, are not in it."""
    trains, preprocesses = {}, {}
    for job in dag.needrun_jobs():
        if job.rule.name == train_rule:
            trains[job.wildcards.dataset] = job
        elif job.rule.name == preprocess_rule:
            preprocesses[job.wildcards.dataset] = job
    found = {}
    for dataset, job in trains.items():
        if not os.path.exists(job.output.model):
            continue
        changes = _job_changes(job, dag, persistence, train_config_keys)
        if dataset in preprocesses:
            changes += _job_changes(preprocesses[dataset], dag, persistence, preprocess_config_keys)
        if changes:
            found[dataset] = tuple(sorted(set(changes)))
    return found


def _described(changes: tuple[Change, ...]) -> str:
    return "; ".join(
        f"{change.key} {change.before} -> {change.now}"
        if change.before is not None
        else f"{change.key} now {change.now}"
        for change in changes
    )


def _dataset_list(datasets: list[str]) -> str:
    shown_names = ", ".join(datasets[:SHOWN_DATASETS])
    more = len(datasets) - SHOWN_DATASETS
    return f"datasets: {shown_names}" + (f" and {more} more" if more > 0 else "")


def report_lines(changes_by_dataset: Mapping[str, tuple[Change, ...]]) -> list[str]:
    """The warning block for changes_by_dataset (empty: nothing to say)."""
    groups: dict[tuple[Change, ...], list[str]] = {}
    for dataset in sorted(changes_by_dataset):
        if changes_by_dataset[dataset]:
            groups.setdefault(changes_by_dataset[dataset], []).append(dataset)
    if not groups:
        return []
    total = sum(map(len, groups.values()))
    head = f"rnnfleet: {total} model(s) will be re-trained because settings changed"
    hint = "  (to keep a model, run with the settings it was trained with)"
    if len(groups) == 1:
        ((changes, datasets),) = groups.items()
        return [f"{head}: {_described(changes)} ({_dataset_list(datasets)})", hint]
    largest_first = sorted(groups.items(), key=lambda group: (-len(group[1]), group[1]))
    lines = [f"{head}:"]
    lines += [
        f"  {_described(changes)} ({_dataset_list(datasets)})" for changes, datasets in largest_first[:SHOWN_GROUPS]
    ]
    if len(groups) > SHOWN_GROUPS:
        lines.append(f"  ... and {len(groups) - SHOWN_GROUPS} more different sets of changes")
    return [*lines, hint]
