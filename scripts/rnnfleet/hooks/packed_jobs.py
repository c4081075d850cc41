"""Packed cluster jobs (profiles/slurm-packed): several datasets in one SLURM job, one GPU.

Snakemake submits a group job of K datasets as one SLURM job; inside it a Snakemake of its
own (the SLURM executor's job step executor) runs each of the group's jobs as a job step
(`srun`). Stock, that inner Snakemake runs one step at a time (it is started with
`--jobs 1`, and its executor waits for each step before starting the next), knows nothing of the run's `--resources` and stops at the first failed job;
and each step holds the job's GPU alone (SLURM gives a step all the job's GRES, exclusively),
so steps could not share the card anyway. `apply_inside_job` fixes that inside the job:

- as many steps at once as the job has CPUs, and the trainings among them bounded by the
  job's GPU budget: the run's `--resources gpu_mem`, which the main process exports to its
  jobs (`budget_for_jobs`; sbatch passes the environment on), tallied per job;
- steps started with `srun --overlap`, so that they share the job's CPUs, memory and GPU;
- `--keep-going`: a failed dataset does not stop the others of its job.

And when a SLURM job fails, stock Snakemake deletes the outputs of every job in it and a
retry runs them all again (snakemake/snakemake#2508, snakemake-executor-plugin-slurm#110).
`apply_split_on_failure` keeps what finished, at both levels:

- in the main process, the datasets of a failed group job whose jobs all finished are
  recorded as for a job that succeeded, and only the others stay in the failed group, so
  only their outputs are removed and only they are retried (when every dataset finished,
  the group counts as succeeded);
- inside the SLURM job, a step that SLURM stopped (scancel, wall time) after its job had
  finished, while the step was still shutting down, counts as succeeded: its outputs are
  kept instead of removed as "might be corrupted".

"Finished" is what Snakemake itself records: every output there and none marked incomplete
(the step's Snakemake removes its job's mark only after the job succeeded).

rnnfleet.hooks.apply applies them behind its one gate (the supported release; the replaced
functions' source, the job-step plugin's where it is installed, and the private names used
as in snakemake_contract). Inside a SLURM job without the job-step plugin the steps run one
at a time, with one warning line.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import defaultdict

from rnnfleet.faults import exit_with_injected_code_at_end

# The per-job GPU memory budget (GB) of a cluster run, from the main process to its jobs.
JOB_GPU_MEM_VARIABLE = "RNNFLEET_GPU_MEM_PER_JOB"
RESOURCE = "gpu_mem"


def _warn(message: str) -> None:
    print(f"rnnfleet: WARNING: {message}", file=sys.stderr)


def budget_for_jobs(workflow) -> int | None:
    """Main process: export its `--resources gpu_mem` (on a cluster: the budget of each job's
    GPU) to the jobs it submits. The budget, or None."""
    resource = workflow.global_resources.get(RESOURCE) if RESOURCE in workflow.global_resources else None
    budget = getattr(resource, "value", resource)
    if isinstance(budget, int):
        os.environ[JOB_GPU_MEM_VARIABLE] = str(budget)
        return budget
    os.environ.pop(JOB_GPU_MEM_VARIABLE, None)
    return None


def in_slurm_job(workflow) -> bool:
    """This is the Snakemake that runs a submitted job's steps (not the main process, not a step)."""
    return not workflow.is_main_process and not workflow.local_exec and bool(os.environ.get("SLURM_JOB_ID"))


def _concurrent_overlapping_steps() -> bool:
    """Have the job step executor start each step in a thread of its own (stock, it waits for
    one step to end before it starts the next) and with `srun --overlap`; False where the
    plugin is not installed (its source, where it is, is part of rnnfleet.hooks' gate)."""
    try:
        import snakemake_executor_plugin_slurm_jobstep as jobstep
    except ImportError:
        return False
    executor = jobstep.Executor
    stock_node_setting = jobstep.get_node_setting
    if getattr(stock_node_setting, "__rnnfleet_packed__", False):
        return True

    def get_node_setting(job) -> str:
        return f"{stock_node_setting(job)} --overlap"

    def run_jobs(self, jobs) -> None:
        for job in jobs:
            self.run_job_pre(job)
            # run_job waits for its step and then reports it to the scheduler (which locks)
            threading.Thread(target=self.run_job, args=(job,), daemon=True).start()

    get_node_setting.__rnnfleet_packed__ = True
    get_node_setting.__rnnfleet_stock__ = stock_node_setting
    run_jobs.__rnnfleet_stock__ = executor.run_jobs
    jobstep.get_node_setting = get_node_setting
    executor.run_jobs = run_jobs
    return True


def apply_inside_job(workflow) -> int | None:
    """Inside a submitted SLURM job, before its scheduler starts: steps at once up to its
    CPUs, trainings bounded by its GPU budget, steps sharing the job's GPU, keep going past
    a failed dataset, keep a step stopped after its job finished. Returns the budget
    declared, or None."""
    workflow.execution_settings.keep_going = True
    apply_split_on_failure()
    exit_with_injected_code_at_end()
    if not _concurrent_overlapping_steps():
        _warn("the SLURM job step executor plugin is not installed: a packed job runs one step at a time")
        return None
    cpus = int(os.environ.get("SLURM_CPUS_ON_NODE") or 1)
    workflow.register_resource("_nodes", max(1, cpus))  # steps at once (each takes >= 1 CPU)
    budget = os.environ.get(JOB_GPU_MEM_VARIABLE)
    if not budget:
        return None
    workflow.resource_scopes[RESOURCE] = "global"  # here "global" is this job: its one GPU
    workflow.register_resource(RESOURCE, int(budget))
    return int(budget)


def _reread_markers(persistence) -> None:
    clear_cache = getattr(persistence, "_clear_cache", None)
    if clear_cache is not None:
        clear_cache()  # another Snakemake (the job's, a step's) changed the markers on disk


def _finished(job, persistence, run) -> bool:
    """Snakemake recorded the job as finished: every output there, none marked incomplete.
    `run` runs a Snakemake coroutine (Workflow.async_run)."""
    return all(os.path.exists(str(path)) for path in job.output) and not run(persistence.incomplete(job))


def _datasets_done(group, persistence, run) -> tuple[list, list]:
    """The group's jobs split in two: those of datasets whose jobs all finished, and the
    rest. A job without a dataset wildcard counts as a dataset of its own."""
    _reread_markers(persistence)
    by_dataset = defaultdict(list)
    for job in group.jobs:
        by_dataset[job.wildcards_dict.get("dataset", id(job))].append(job)
    done, failed = [], []
    for jobs in by_dataset.values():
        (done if all(_finished(job, persistence, run) for job in jobs) else failed).extend(jobs)
    return done, failed


def _shrink(group, jobs) -> None:
    """Make `group` the group job of `jobs` only (its cached products, order and resources
    recomputed; the scheduler's tally of what it holds is left as submitted)."""
    group.jobs = type(group.jobs)(jobs)
    for cached in ("_toposorted", "_resources", "_input", "_output", "_log", "_all_products", "_jobid"):
        setattr(group, cached, None)
    group.finalize()


def apply_split_on_failure() -> None:
    """Have Snakemake's scheduler keep what finished in a failed SLURM job (the finished
    datasets of a group job; inside the job, a step stopped after its job finished)."""
    from snakemake.scheduling.job_scheduler import JobScheduler

    stock = JobScheduler._handle_error
    if getattr(stock, "__rnnfleet_packed__", False):
        return

    def _handle_error(self, job, postprocess_job: bool = True):
        workflow = self.workflow
        if postprocess_job and not workflow.dryrun and not workflow.local_exec:
            if job.is_group() and _keep_finished_datasets(self, job):
                return None
            if not job.is_group() and in_slurm_job(workflow) and _keep_step_stopped_after_finishing(self, job):
                return None
        return stock(self, job, postprocess_job)

    _handle_error.__rnnfleet_packed__ = True
    _handle_error.__rnnfleet_stock__ = stock
    JobScheduler._handle_error = _handle_error


def _count_as_succeeded(scheduler, job) -> None:
    """Hand a job reported failed to the scheduler's handling of a finished one (outputs
    checked, metadata recorded, dependants released) as if it had reported success. Called
    with the scheduler's lock held, as JobScheduler._proceed would take it."""
    scheduler._tofinish.append(job)  # taken up on the scheduler's next round, after this error round
    scheduler._open_jobs.release()


def _keep_step_stopped_after_finishing(scheduler, job) -> bool:
    """Inside a SLURM job: a failed step whose job had finished counts as succeeded. True if so."""
    workflow = scheduler.workflow
    _reread_markers(workflow.persistence)
    if not _finished(job, workflow.persistence, workflow.async_run):
        return False
    _count_as_succeeded(scheduler, job)
    dataset = job.wildcards_dict.get("dataset", "")
    print(
        f"rnnfleet: {job.rule.name} {dataset}: its job step was stopped after the job had finished; "
        "its results are kept",
        file=sys.stderr,
    )
    return True


def _keep_finished_datasets(scheduler, group) -> bool:
    """Record the finished datasets of a failed group job as done and leave the rest in it;
    when all finished, the group counts as succeeded. True if the stock handling is not needed."""
    workflow = scheduler.workflow
    dag = workflow.dag
    run = workflow.async_run
    done, failed = _datasets_done(group, workflow.persistence, run)
    if not done:
        return False  # nothing to keep: the stock handling is right
    datasets = sorted({str(job.wildcards_dict.get("dataset")) for job in done})
    if not failed:
        _count_as_succeeded(scheduler, group)
        print(
            f"rnnfleet: packed job {group.groupid} failed after all its {len(datasets)} dataset(s) had "
            f"finished; kept their results: {', '.join(datasets)}",
            file=sys.stderr,
        )
        return True
    # Finished in order, while the group still counts as running: the DAG then does not
    # take the group for ready again when its first jobs finish.
    order = {job: level for level, jobs in enumerate(group.toposorted) for job in jobs}
    for job in sorted(done, key=order.__getitem__):
        run(job.postprocess(check_output_mtime=False))  # outputs checked, metadata recorded
        dag._running.add(job)
        run(dag.finish(job, update_checkpoint_dependencies=False))
    scheduler.finished_jobs += len(done)  # the "N of M steps done" count
    # Both sets hold the group by its hash, which changes with its jobs.
    scheduler.running.discard(group)
    dag._running.discard(group)
    _shrink(group, failed)
    scheduler.running.add(group)
    dag._running.add(group)
    print(
        f"rnnfleet: packed job {group.groupid} failed; kept the results of its {len(datasets)} finished "
        f"dataset(s): {', '.join(datasets)}",
        file=sys.stderr,
    )
    return False
