# What the run does around its jobs, in one place: the version-guarded changes to Snakemake
# (speed-ups, guards for unusable dataset files, the retry policy), the clean-up after a
# killed run (at parse time, before Snakemake checks its lock), and the onstart / onsuccess /
# onerror handlers (Snakemake keeps one handler of each kind).
import time

from snakemake.logging import logger

from rnnfleet.workflow.after_failures import (
    ResultPaths,
    drop_not_done_list_if_replaced,
    write_results_after_failures,
)
from rnnfleet.hooks.atomic_restore import apply as apply_atomic_restore, forget_records
from rnnfleet.workflow.previous_models import (
    drop_stale_snakemake_backup,
    restore_previous_models,
)
from rnnfleet.workflow.recovery import (
    JobsOfKilledRunAlive,
    RunWorkingUnlocked,
    SnakemakeFolderFull,
    claim_run_folder,
    hold_off_stop_signals,
    mark_run_working,
    stop_jobs_on_signals,
)
from rnnfleet.hooks.snakemake_guards import apply as apply_snakemake_guards
from rnnfleet.hooks.snakemake_hooks import (
    after_building_dag,
    before_building_dag,
    keep_going_past_busy_empty_folders,
    name_write_protected_outputs,
)
from rnnfleet.hooks.retry_policy import apply as apply_retry_policy
from rnnfleet.hooks.past_failed_inputs import start_past_failed_inputs
from rnnfleet.hooks.packed_jobs import (
    apply_inside_job,
    apply_split_on_failure,
    budget_for_jobs,
    in_slurm_job,
)
from rnnfleet.hooks.snakemake_speedups import apply as apply_snakemake_speedups
from rnnfleet.summary import print_run_summary
from rnnfleet.workflow.tracking import (
    TrackedPaths,
    load_mlflow_early,
    log_run_to_mlflow,
)
from rnnfleet.updating import rnnfleet_version

# The run's start, for its last line: which datasets this run trained (print_run_summary).
RUN_STARTED = time.time()

# Per-job costs inside Snakemake that grow with the number of datasets (see the module).
SNAKEMAKE_SPEEDUPS = apply_snakemake_speedups(warn=workflow.is_main_process)
logger.debug(
    f"rnnfleet: Snakemake speed-ups on: {', '.join(SNAKEMAKE_SPEEDUPS) or 'none'}"
)
# A dataset file deleted or made unreadable during the run fails its own job, not the run.
apply_snakemake_guards(
    [path for paths in DATA_FILES.values() for path in paths],
    warn=workflow.is_main_process,
)

# A training is launched again only when a retry can help (out of GPU memory; stopped or
# killed without a line on a cluster, as a cancelled job is; not killed on this machine).
apply_retry_policy(
    ("train",),
    warn=workflow.is_main_process,
    retry_silent_deaths=lambda: not workflow.local_exec,
)

# A failed re-train's model is put back in one rename (the train rule's outputs are update()).
apply_atomic_restore(warn=workflow.is_main_process)

if workflow.is_main_process:
    # An empty output folder that is a mount point is left in place; targets and model
    # files are checked before the DAG is built (rules/checks.smk); outputs Snakemake calls
    # write-protected get one line naming the folder's problem; once the DAG is built,
    # models to be re-trained with changed settings are named (dry-runs too).
    keep_going_past_busy_empty_folders()
    before_building_dag(before_building_dag_of_this_run)
    after_building_dag(
        report_changed_settings,
        "rnnfleet: WARNING: this Snakemake has no Workflow._build_dag: models re-trained "
        "because settings changed are not named before the run",
    )
    name_write_protected_outputs(write_protected_line)

# One dataset whose preprocess fails does not stop the fleet's pretraining (rules/pretrain.smk):
# it goes on with the others; a pretraining that fails does not stop the trainings: they go
# on from scratch (before apply_split_on_failure, which wraps the same function).
if workflow.is_main_process:
    start_past_failed_inputs({"pretrain": {"preprocess"}, "train": {"pretrain"}})

# Packed cluster jobs (profiles/slurm-packed): each SLURM job gets the run's gpu_mem budget
# for its GPU and keeps going past a failed dataset; a failed job keeps the results of its
# finished datasets and retries only the others (rnnfleet.hooks.packed_jobs).
if workflow.is_main_process:
    budget_for_jobs(workflow)
    apply_split_on_failure()
else:
    after_building_dag(
        lambda dag: apply_inside_job(workflow) if in_slurm_job(workflow) else None,
        "rnnfleet: WARNING: this Snakemake has no Workflow._build_dag: a packed cluster "
        "job neither bounds its trainings by gpu_mem nor keeps going past a failed dataset",
    )

if workflow.is_main_process:
    # Before Snakemake checks its lock: a lock left by a killed run must not stop this one.
    try:
        ALONE_IN_FOLDER = claim_run_folder(OUTPUT_FOLDERS)
    except (JobsOfKilledRunAlive, RunWorkingUnlocked, SnakemakeFolderFull) as error:
        raise WorkflowError(str(error)) from None
    if ALONE_IN_FOLDER:
        # Alone in the folder: a backup still here belongs to a plots job that was killed
        # (rnnfleet.workflow.previous_models.drop_stale_snakemake_backup), or is a model an earlier rnnfleet
        # kept aside during a re-train that was killed (rnnfleet.workflow.previous_models).
        restore_previous_models(PATHS["models"])
        drop_stale_snakemake_backup(LOSS_CURVES)


onstart:
    mark_run_working()
    check_output_folders_writable()
    check_plugin_files()
    check_machine_settings()
    write_job_settings()
    stop_jobs_on_signals()
    start_mps_if_on()
    prestart_warm_workers()
    load_mlflow_early(config["tracking"]["mlflow"])


# The fleet's history (tracking: in the config): once per run that trained anything.
TRACKED = TrackedPaths(
    SUMMARY, FORECASTS, SUMMARY_HTML, SKILL_PLOT, METRICS, MODEL, PRETRAINED_LINEAGE
)


onsuccess:
    stop_mps_if_on()
    drop_not_done_list_if_replaced(NOT_DONE, SUMMARY)
    print_run_summary(SUMMARY, FORECASTS, METRICS, RUN_STARTED)
    log_run_to_mlflow(
        config["tracking"]["mlflow"],
        config,
        TRACKED,
        RUN_STARTED,
        "success",
        rnnfleet_version(),
    )


# With failed or stopped jobs Snakemake skips the summarize and plots jobs (their inputs
# are missing): the table and the figures of the datasets that succeeded are written
# here instead (re-trains that failed keep their previous model: Snakemake puts it back).
# A second Ctrl+C meanwhile gets one line and does not cut the writing short.
onerror:
    hold_off_stop_signals()
    stop_mps_if_on()
    write_results_after_failures(
        DATASETS,
        {step: log_path(step) for step in ("preprocess", "train", "predict")},
        METRICS,
        MODEL,
        ResultPaths(
            table=SUMMARY,
            table_html=SUMMARY_HTML,
            skill_plot=SKILL_PLOT,
            coverage_plot=COVERAGE_PLOT,
            loss_curves=LOSS_CURVES,
            not_done=NOT_DONE,
            start_template=START_TEMPLATE,
            start_page=START_PAGE,
            forecasts=FORECASTS,
        ),
        fleet=config["fleet"],
        quality_thresholds=config["quality"],
        dataset_quality=DATASET_QUALITY,
        unpublished=lambda paths: forget_records(workflow.persistence, paths),
    )
    log_run_to_mlflow(
        config["tracking"]["mlflow"],
        config,
        TRACKED,
        RUN_STARTED,
        "failed",
        rnnfleet_version(),
    )
