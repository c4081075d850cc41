"""The `tune:` settings read once: what may be searched, the sample of datasets the search
trains on and the held-out ones its verdict trains on, the study's name, and a best.yaml
applied to a configuration.

What it promises:
- space_problems names each bad entry of `tune.space` in one line that starts with its config
  key, as rnnfleet.workflow.config_check describes a schema problem; [] for a good space.
- A space key is `train.<key>` or `model.<key>`: a list of choices, or {low, high, log}
  (integers when low and high both are). Only keys that change what a model learns are
  searched (not train.epochs: tune.epochs caps each trial; not the run-time keys).
- The sample and the held-out datasets are disjoint and depend only on the names present,
  the settings and the seed (never on the order files were found in).
- Imports neither optuna nor torch: Snakemake's process reads this while it parses.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping

# train: keys that a search may set. Not epochs (tune.epochs caps a trial), seed (a trial's
# luck, not a setting), horizon(s), quantiles or init (they change what is predicted or the
# start, not how well), nor the run-time keys (threads, gpu_mem, device, warm_workers).
SEARCHABLE_TRAIN_KEYS = ("seq_len", "batch_size", "lr", "patience")
# The built-in model's keys; another builder's model: section declares its own.
BUILTIN_MODEL_KEYS = ("cell", "hidden_size", "num_layers", "dropout")
RANGE_KEYS = {"low", "high", "log"}


def searchable_keys(model: Mapping) -> list[str] | None:
    """The space keys allowed with this `model:` section; None where any model.<key> is
    (another builder declares its keys in its function, which is not imported here: one
    that does not take a key fails each trial, saying so)."""
    if model.get("builder", "rnn") != "rnn":
        return None
    return [f"train.{key}" for key in SEARCHABLE_TRAIN_KEYS] + [f"model.{key}" for key in BUILTIN_MODEL_KEYS]


def is_searchable(name: str, allowed: list[str] | None) -> bool:
    if allowed is not None:
        return name in allowed
    section, _, key = name.partition(".")
    return (section == "train" and key in SEARCHABLE_TRAIN_KEYS) or (section == "model" and key not in ("", "builder"))


def space_problems(space: object, model: Mapping) -> list[str]:
    """One line per bad entry of tune.space (see the module doc); [] when it is good."""
    key = "tune.space"
    if not isinstance(space, Mapping) or not space:
        return [f"config key '{key}' = {space!r} is not allowed; allowed: at least one setting to search"]
    allowed = searchable_keys(model)
    problems = []
    for name, values in space.items():
        where = f"{key}.{name}"
        if not is_searchable(name, allowed):
            listed = ", ".join(allowed or [f"train.{key}" for key in SEARCHABLE_TRAIN_KEYS] + ["model.<key>"])
            problems.append(f"unknown config key '{where}'; allowed under '{key}': {listed}")
        else:
            problems += entry_problems(where, values)
    return problems


def entry_problems(where: str, values: object) -> list[str]:
    """The problem of one space entry: choices or a range."""
    if isinstance(values, list):
        if not values:
            return [
                f"config key '{where}' = [] is not allowed; allowed: a non-empty list of choices or {{low, high, log}}"
            ]
        if not all(isinstance(value, (str, int, float, bool)) for value in values):
            return [f"config key '{where}' = {values!r} is not allowed; allowed: choices that are numbers or words"]
        return []
    if not isinstance(values, Mapping):
        return [f"config key '{where}' = {values!r} is not allowed; allowed: a list of choices or {{low, high, log}}"]
    unknown = sorted(set(values) - RANGE_KEYS)
    if unknown or not {"low", "high"} <= set(values):
        return [
            f"config key '{where}' = {dict(values)!r} is not allowed; allowed: {{low, high, log}} (low and high needed)"
        ]
    low, high, log = values["low"], values["high"], values.get("log", False)
    if not all(isinstance(bound, (int, float)) and not isinstance(bound, bool) for bound in (low, high)):
        return [f"config key '{where}': low and high must be numbers, not {low!r} and {high!r}"]
    if low > high:
        return [f"config key '{where}': low {low!r} > high {high!r}; allowed: low <= high"]
    if not isinstance(log, bool):
        return [f"config key '{where}.log' = {log!r} is not allowed; allowed: true or false"]
    if log and low <= 0:
        return [f"config key '{where}': low {low!r} with log: true; allowed: low > 0"]
    return []


def split_settings(flat: Mapping) -> dict[str, dict]:
    """{"train.lr": 0.01, "model.cell": "gru"} -> {"train": {"lr": 0.01}, "model": {"cell": "gru"}}."""
    sections: dict[str, dict] = {"train": {}, "model": {}}
    for name, value in flat.items():
        section, _, key = name.partition(".")
        sections[section][key] = value
    return sections


def with_settings(train: Mapping, model: Mapping, flat: Mapping) -> tuple[dict, dict]:
    """(train, model) sections with the searched values of `flat` over them."""
    chosen = split_settings(flat)
    return {**train, **chosen["train"]}, {**model, **chosen["model"]}


def fit_settings(train: Mapping, model: Mapping, chosen: Mapping, own: Mapping) -> tuple[dict, dict]:
    """(train, model) of one dataset's fit: the chosen values (a trial's, best.yaml's, or
    none) over the sections, and the dataset's own settings (own_settings) over both."""
    return with_settings(*with_settings(train, model, chosen), own)


def own_settings(overrides: Mapping[str, Mapping], base: Mapping, datasets: list[str]) -> dict[str, dict]:
    """{dataset: {dotted key: value}}: the settings of what a fit learns from that a datasets
    sheet gives these datasets (overrides: {dataset: {dotted key: value}}), its train.<key>
    among base["train"]'s keys and its model.<key>; only datasets that have any. A fit of
    the search or of its verdict takes them over the trial's or the choice's, as the
    dataset's train job takes them over tune.apply's."""
    own = {}
    for dataset in datasets:
        learned = {
            key: value
            for key, value in overrides.get(dataset, {}).items()
            if key.startswith("model.") or (key.startswith("train.") and key.partition(".")[2] in base["train"])
        }
        if learned:
            own[dataset] = learned
    return own


def sample_datasets(datasets: list[str], count: int, seed: int, named: list[str]) -> list[str]:
    """The datasets the search trains on: `named` where given, else `count` of `datasets`
    drawn uniformly with `seed` (all of them when there are no more), in name order."""
    if named:
        return sorted(named)
    ordered = sorted(datasets)
    return sorted(random.Random(seed).sample(ordered, min(count, len(ordered))))


def holdout_datasets(datasets: list[str], sample: list[str], cap: int, seed: int) -> list[str]:
    """The verdict's datasets: those not in the sample, at most `cap` of them drawn with
    `seed`, in name order."""
    others = sorted(set(datasets) - set(sample))
    return sorted(random.Random(seed + 1).sample(others, min(cap, len(others))))


# What a trial's reported steps are (the pruner compares trials step by step): a study whose
# trials reported other steps is not continued.
STEPS = "epochs of the sample's datasets in turns"


def study_name(what_is_scored: Mapping) -> str:
    """The study's name in the journal: a hash of what a trial's value depends on (the space,
    the sample, the epochs, the settings it starts from), so a change starts another study and
    an unchanged configuration continues its own."""
    scored = {**what_is_scored, "steps": STEPS}
    digest = hashlib.sha256(json.dumps(scored, sort_keys=True, default=str).encode()).hexdigest()
    return f"tune-{digest[:12]}"
