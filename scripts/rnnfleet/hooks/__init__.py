"""Changes to Snakemake's own functions, and nothing else, applied from one place: apply().

What it promises:
- apply() is the one door: rules/handlers.smk calls it once while the Snakefile is parsed.
  Behind one gate it applies every patch of this package or none: only on the Snakemake
  release rnnfleet supports (rnnfleet.snakemake_version) and only while every function in
  snakemake_contract.CONTRACT and every private name the patches use is as they were written
  against. Otherwise Snakemake is left as it is and one warning line names what differs (none
  for another release alone: the Snakefile's start line says so).
- Each patch has a name (PATCHES); docs/architecture.md lists them, what each replaces, why,
  and what it buys.
- PATCHES_OFF_VARIABLE is a bench switch, not a user feature: the patch names it lists
  (comma-separated; "all": every one) are left out, so bench/bench_scale.py measures what each
  patch buys, and tests see what Snakemake does without one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

PATCHES_OFF_VARIABLE = "RNNFLEET_SNAKEMAKE_PATCHES_OFF"

# Every patch by name -> the module of this package that holds it.
PATCHES = {
    "reevaluation_timer": "snakemake_speedups",
    "input_sizes": "snakemake_speedups",
    "function_params": "snakemake_speedups",
    "shellcmd": "snakemake_speedups",
    "report_captions": "snakemake_speedups",
    "gc": "snakemake_speedups",
    "dataset_file_guards": "snakemake_guards",
    "atomic_restore": "atomic_restore",
    "before_dag": "snakemake_hooks",
    "after_dag": "snakemake_hooks",
    "busy_empty_folders": "snakemake_hooks",
    "write_protected_line": "snakemake_hooks",
    "removed_inputs": "snakemake_hooks",
    "retry_policy": "retry_policy",
    "past_failed_inputs": "past_failed_inputs",  # before packed_jobs: both wrap the scheduler's error handling
    "packed_jobs": "packed_jobs",
}


@dataclass(frozen=True)
class RunHooks:
    """What the workflow hands the patches (rules/handlers.smk)."""

    dataset_files: Iterable[str]  # the datasets' own files, as the rules name them
    retried_rules: tuple[str, ...]  # rules whose jobs are retried only when a retry can help
    retry_silent_deaths: Callable[[], bool]  # whether a job that died without a line is retried
    before_dag: Callable[[set, set, set], None]  # (target files, target rules, files to force)
    after_dag: Callable[[object], None]  # (the DAG), main process
    write_protected_line: Callable[[list[str]], str | None]
    # {rule: the rules past whose failed jobs its jobs start, without those jobs' outputs}
    past_failed_rules: dict[str, set[str]] = field(default_factory=dict)
    # (a job) -> whether fewer inputs than recorded is no reason to re-run it
    inputs_may_shrink: Callable[[object], bool] = lambda job: False


def left_out() -> frozenset[str]:
    """The patches the bench switch leaves out (see the module docstring)."""
    names = {name.strip() for name in os.environ.get(PATCHES_OFF_VARIABLE, "").split(",") if name.strip()}
    if "all" in names:
        return frozenset(PATCHES)
    unknown = sorted(names - set(PATCHES))
    if unknown:
        raise ValueError(f"{PATCHES_OFF_VARIABLE}: no patch named {', '.join(unknown)} (known: {', '.join(PATCHES)})")
    return frozenset(names)


def gate() -> list[str]:
    """Why the patches do not fit the installed Snakemake (empty: they fit). Another release
    is named alone, without checking the source."""
    import snakemake

    from rnnfleet.hooks.snakemake_contract import differences
    from rnnfleet.snakemake_version import SUPPORTED_SNAKEMAKE

    if snakemake.__version__ != SUPPORTED_SNAKEMAKE:
        return [f"Snakemake {snakemake.__version__} is not {SUPPORTED_SNAKEMAKE}"]
    return differences()


def apply(workflow, run: RunHooks) -> list[str]:
    """Apply every patch (but those the bench switch leaves out) when the gate opens; returns
    the names applied, [] when Snakemake is left as it is."""
    from rnnfleet.snakemake_version import SUPPORTED_SNAKEMAKE

    main = workflow.is_main_process
    problems = gate()
    if problems:
        import snakemake

        if main and snakemake.__version__ == SUPPORTED_SNAKEMAKE:
            print(
                f"rnnfleet: WARNING: Snakemake's source is not the one rnnfleet's patches were written for "
                f"({'; '.join(problems)}): every patch is off (slower planning of large fleets, a dataset file "
                "gone during a run ends the run, less protection of model files)",
                file=sys.stderr,
            )
        return []
    # (each module by its full name: the package imports its modules, never itself)
    import rnnfleet.hooks.atomic_restore as atomic_restore
    import rnnfleet.hooks.past_failed_inputs as past_failed_inputs
    import rnnfleet.hooks.retry_policy as retry_policy
    import rnnfleet.hooks.snakemake_guards as snakemake_guards
    import rnnfleet.hooks.snakemake_hooks as snakemake_hooks
    import rnnfleet.hooks.snakemake_speedups as snakemake_speedups

    off = left_out()
    applied = snakemake_speedups.apply(off)
    wanted = [name for name in PATCHES if name not in off and PATCHES[name] != "snakemake_speedups"]
    for name in wanted:
        if name == "dataset_file_guards":
            snakemake_guards.apply(run.dataset_files)
        elif name == "atomic_restore":
            atomic_restore.apply()
        elif name == "retry_policy":
            retry_policy.apply(run.retried_rules, run.retry_silent_deaths)
        elif name == "packed_jobs":
            apply_packed_jobs(workflow)
        elif not main:
            continue  # the DAG's checks and words belong to the main process
        elif name == "before_dag":
            snakemake_hooks.before_building_dag(run.before_dag)
        elif name == "after_dag":
            snakemake_hooks.after_building_dag(run.after_dag)
        elif name == "busy_empty_folders":
            snakemake_hooks.keep_going_past_busy_empty_folders()
        elif name == "write_protected_line":
            snakemake_hooks.name_write_protected_outputs(run.write_protected_line)
        elif name == "removed_inputs":
            snakemake_hooks.forgive_removed_inputs(run.inputs_may_shrink)
        elif name == "past_failed_inputs":
            past_failed_inputs.start_past_failed_inputs(dict(run.past_failed_rules))
        applied.append(name)
    return applied


def apply_packed_jobs(workflow) -> None:
    """Packed cluster jobs (profiles/slurm-packed): the main process hands its gpu_mem budget
    to its jobs and keeps a failed job's finished datasets; inside a SLURM job, once its DAG
    is built, the steps run at once within that budget."""
    import rnnfleet.hooks.packed_jobs as packed_jobs
    import rnnfleet.hooks.snakemake_hooks as snakemake_hooks

    if workflow.is_main_process:
        packed_jobs.budget_for_jobs(workflow)
        packed_jobs.apply_split_on_failure()
    else:
        snakemake_hooks.after_building_dag(
            lambda dag: packed_jobs.apply_inside_job(workflow) if packed_jobs.in_slurm_job(workflow) else None
        )
