"""Jobs that start without the inputs of a job that failed (train.init fleet: rules/pretrain.smk).

Snakemake runs a job only once every job making one of its inputs has succeeded. The fleet's
pretraining reads every dataset's array file, so one dataset whose preprocess fails (bad
bars) would keep it, and with it every dataset's fine-tune, from running; and every train
job reads the pretrained model, so a pretraining that fails would keep every dataset from
training. start_past_failed_inputs({rule: the rules whose failure it goes on past}) changes
Snakemake's scheduler so that, when a job of one of those rules fails for good (no retry
left), each job of the rule waiting for its outputs:

- no longer waits for it: the failed job's outputs are dropped from its inputs (the other
  inputs kept, named as before), and it starts once its other inputs are made;
- sees the inputs it runs with: its params are expanded again from them (a param that is a
  function of `input` says which were left out), and Snakemake records them as the job's
  inputs, so the next run compares the inputs it would read with those it read.

Cluster jobs (a SLURM job runs its own Snakemake, which builds the job's inputs again from
the Snakefile) learn which files were dropped from the environment variable FAILED_OUTPUTS
that the main process sets before it submits them (sbatch passes the environment on):
rnnfleet.failed_outputs reads it, for the input functions of those rules.

The job that failed still fails, and the run still ends failed: the jobs of other rules (and
of these rules, after a job of a rule not named for them) that need its outputs are not run.
"""

from __future__ import annotations

import os
import sys
from collections import Counter

from rnnfleet.failed_outputs import FAILED_OUTPUTS, failed_outputs

_MARK = "__rnnfleet_past_failed_inputs__"


def _chain(function):
    """The function and those it wraps (rnnfleet's wrappers name the one they wrap)."""
    while function is not None:
        yield function
        function = getattr(function, "__rnnfleet_stock__", None)


def start_past_failed_inputs(goes_on_past: dict[str, set[str]]) -> None:
    """Install the change (main Snakemake process): the jobs of each rule of goes_on_past go on
    past a failed job of the rules it names. Called through rnnfleet.hooks.apply, whose gate
    has checked the scheduler's _handle_error and Namedlist._allitems against the contract."""
    from snakemake.scheduling.job_scheduler import JobScheduler

    current = JobScheduler._handle_error
    installed = next((function for function in _chain(current) if hasattr(function, _MARK)), None)
    if installed is not None:
        for rule, failed_rules in goes_on_past.items():
            getattr(installed, _MARK).setdefault(rule, set()).update(failed_rules)
        return

    def _handle_error(self, job, postprocess_job: bool = True):
        result = current(self, job, postprocess_job)
        if job in getattr(self, "failed", ()):  # failed for good: no retry left
            release_dependants(self.workflow, job, getattr(_handle_error, _MARK))
        return result

    setattr(_handle_error, _MARK, {rule: set(past) for rule, past in goes_on_past.items()})
    _handle_error.__rnnfleet_stock__ = current
    JobScheduler._handle_error = _handle_error


def release_dependants(workflow, failed, goes_on_past: dict[str, set[str]]) -> list:
    """The jobs that waited for the failed job (or group) and whose rule goes on past a failed
    job of its rule (goes_on_past): its outputs dropped from their inputs, and each made ready
    once nothing else holds it. Returns them."""
    dag = workflow.dag
    released: dict = {}  # {job: the files dropped from its inputs}
    for failed_job in list(failed) if failed.is_group() else [failed]:
        if dag.finished(failed_job):  # a group's jobs that finished before it failed
            continue
        for dependant, files in list(dag.depending[failed_job].items()):
            if failed_job.rule.name not in goes_on_past.get(dependant.rule.name, ()):
                continue
            if not dag.needrun(dependant) or dag.finished(dependant):
                continue
            dependant.input = without(dependant.input, set(files))
            dependant._params = None  # expanded again from the inputs it now has
            del dag.depending[failed_job][dependant]
            dag.dependencies[dependant].pop(failed_job, None)
            dag._n_until_ready[dependant] -= 1
            released.setdefault(dependant, []).extend(sorted(map(str, files)))
    if released:
        dropped = failed_outputs().union(*released.values())
        os.environ[FAILED_OUTPUTS] = os.pathsep.join(sorted(dropped))
        _forget_cached_inputs(workflow.persistence)
        dag.update_ready(list(released))
        jobs_per_line = Counter((job.rule.name, ", ".join(files)) for job, files in released.items())
        for (rule, files), jobs in jobs_per_line.items():
            print(
                f"rnnfleet: {rule} goes on without {files}: the job making it failed"
                + (f" ({jobs} jobs)" if jobs > 1 else ""),
                file=sys.stderr,
            )
    return list(released)


def without(inputs, dropped: set):
    """A copy of a job's inputs (snakemake InputFiles) without the dropped files, the names kept."""
    from snakemake.iocontainers import InputFiles

    kept = InputFiles()
    for name, value in inputs._allitems():
        if name is not None and isinstance(value, list):  # a named list of files
            start = len(kept)
            kept.extend(item for item in value if item not in dropped)
            kept._set_name(name, start, end=len(kept))
        elif value not in dropped:
            kept.append(value)
            if name is not None:
                kept._add_name(name)
    return kept


def _forget_cached_inputs(persistence) -> None:
    """Snakemake caches each job's recorded input list; the released jobs' lists changed."""
    cached = getattr(type(persistence), "_input", None)
    if hasattr(cached, "cache_clear"):
        cached.cache_clear()
