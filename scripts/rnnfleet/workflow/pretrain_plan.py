"""Which datasets the fleet's pretraining serves, and when it is redone (rules/pretrain.smk).

What it promises:
- While the pretrained model stands (its lineage file made with the same settings, the
  user's model and feature files not changed since, no --forcerun of it), it serves the
  datasets its lineage names, and their array files are ancient() inputs: a morning's new
  bars do not redo it, and a dataset added later starts from it without redoing it.
- Whenever it is redone (its settings or the user's code changed, `--forcerun pretrain`,
  `-f`/`-F` on it, or no model yet) it serves every dataset present now, new ones included.
- pretrain_plan is decided while the DAG is built (an input function): Snakemake sets the
  run's --forcerun only after the Snakefile is read.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from rnnfleet.pretraining import frozen_membership


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


def pretrain_plan(
    lineage_path: str, fingerprint: str, datasets: list[str], forced: bool, code_files: Iterable[str]
) -> PretrainPlan:
    """The plan of this run's pretraining (see the module doc)."""
    members, frozen = frozen_membership(lineage_path, fingerprint, datasets)
    if not frozen:
        made = os.path.exists(lineage_path)
        return PretrainPlan(list(datasets), False, "its settings changed" if made else "")
    if forced:
        return PretrainPlan(list(datasets), False, "it is forced")
    if code_changed_since(lineage_path, code_files):
        return PretrainPlan(list(datasets), False, "a model or feature file changed")
    return PretrainPlan(members, True, "")
