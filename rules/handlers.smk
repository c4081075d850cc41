# What the run does around its jobs, in one place: the changes to Snakemake's internals
# (rnnfleet.hooks.apply: one gate, the supported release), the clean-up after a
# killed run (at parse time, before Snakemake checks its lock), and the onstart / onsuccess /
# onerror handlers (Snakemake keeps one handler of each kind).
import time

from snakemake.logging import logger

from rnnfleet.workflow.after_failures import (
    ResultPaths,
    drop_not_done_list_if_replaced,
    write_results_after_failures,
)
from rnnfleet.hooks import RunHooks, apply as apply_snakemake_patches
from rnnfleet.hooks.atomic_restore import forget_records
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
from rnnfleet.report.summary import print_run_summary
from rnnfleet.workflow.quiet_errors import QuietAfterErrorLine
from rnnfleet.workflow.progress import metrics_of_planned_trainings, watch_trainings
from rnnfleet.workflow.tracking import (
    TrackedPaths,
    load_mlflow_early,
    log_run_to_mlflow,
)
from rnnfleet.train.updating import rnnfleet_version

# The run's start, for its last line: which datasets this run trained (print_run_summary).
RUN_STARTED = time.time()

# Every change to Snakemake's internals, behind one gate (rnnfleet.hooks; docs/architecture.md,
# "What rnnfleet changes in Snakemake"): speed-ups; a dataset file deleted or made unreadable
# during the run fails its own job; a training launched again only when a retry can help (out
# of GPU memory; stopped or killed without a line on a cluster, not on this machine); a failed
# re-train's model put back in one rename; targets and model files checked before the DAG is
# built (rules/checks.smk) and models re-trained with changed settings named once it is (dry-runs
# too); an empty output folder that is a mount point left in place; one line for
# write-protected outputs; the pretraining going on past a failed dataset; packed cluster
# jobs (profiles/slurm-packed).
SNAKEMAKE_PATCHES = apply_snakemake_patches(
    workflow,
    RunHooks(
        dataset_files=[path for paths in DATA_FILES.values() for path in paths],
        retried_rules=("train",),
        retry_silent_deaths=lambda: not workflow.local_exec,
        before_dag=before_building_dag_of_this_run,
        after_dag=report_changed_settings,
        write_protected_line=write_protected_line,
        # One dataset whose preprocess fails does not stop the fleet's pretraining
        # (rules/pretrain.smk): it goes on with the others; a pretraining that fails does not
        # stop the trainings: they go on from scratch.
        past_failed_rules={"pretrain": {"preprocess"}, "train": {"pretrain"}},
        # Fewer datasets is not a change: the pretraining, while it serves those its lineage
        # names, is not re-run because one of them was removed.
        inputs_may_shrink=lambda job: job.rule.name == "pretrain"
        and PRETRAIN.plan().frozen,
    ),
)
logger.debug(
    f"rnnfleet: Snakemake patches on: {', '.join(SNAKEMAKE_PATCHES) or 'none'}"
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
    watch_trainings(
        metrics_of_planned_trainings(workflow.dag.needrun_jobs()),
        RUN_STARTED,
        logger.info,
    )
    load_mlflow_early(config["tracking"]["mlflow"])
    if workflow.local_exec:
        # One line per failed job, its own (rnnfleet.workflow.quiet_errors); on a cluster the
        # job's line is in its cluster log, so Snakemake's report of it stays.
        logger.addFilter(QuietAfterErrorLine())


def print_tune_lines():
    """After a run that made the settings search's verdict (rules/tune.smk): the search's
    own best, optimistic by construction, then the held-out verdict."""
    import yaml

    from rnnfleet.tune.heldout import best_line

    verdict = TUNE_PATHS["verdict"]
    if os.path.exists(verdict) and os.path.getmtime(verdict) >= RUN_STARTED:
        with open(TUNE_PATHS["best"]) as handle:
            print(best_line(yaml.safe_load(handle)))
        print(Path(verdict).read_text().strip())


def fleet_results_due():
    """Whether a failed run writes the fleet's table and figures (onerror): not after a run
    of the settings search that trains no model of the fleet (`snakemake tune`)."""
    rules = {job.rule.name for job in workflow.dag.jobs}
    return "train" in rules or not rules & {
        "tune_worker",
        "tune_report",
        "tune_verdict",
    }


# The fleet's history (tracking: in the config): once per run that trained anything.
TRACKED = TrackedPaths(
    SUMMARY, FORECASTS, SUMMARY_HTML, SKILL_PLOT, METRICS, MODEL, PRETRAINED_LINEAGE
)


onsuccess:
    stop_mps_if_on()
    drop_not_done_list_if_replaced(NOT_DONE, SUMMARY)
    print_run_summary(SUMMARY, FORECASTS, METRICS, RUN_STARTED)
    print_tune_lines()
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
    if fleet_results_due():
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


# CUDA MPS (config `mps: true`, Linux with an NVIDIA driver): one MPS control daemon for
# this run, so kernels of concurrent trainings on a GPU overlap instead of taking turns.
# Started before the first job, stopped when the run ends (success or error): the calls are
# in the run's onstart/onsuccess/onerror handlers in handlers.smk (Snakemake keeps one
# handler of each kind). Its pipe and log folders are private to this working folder; the
# jobs inherit them via the environment.
import shutil
import subprocess

MPS_ENVIRONMENT = {
    "CUDA_MPS_PIPE_DIRECTORY": os.path.abspath(".snakemake/mps/pipe"),
    "CUDA_MPS_LOG_DIRECTORY": os.path.abspath(".snakemake/mps/log"),
}


def mps_control():
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        raise WorkflowError(
            "mps is true in the config, but nvidia-cuda-mps-control (part of the NVIDIA driver "
            "on Linux) is not on PATH: set mps: false, or run where the driver is installed"
        )
    return control


def start_mps_if_on():
    if not config["mps"]:
        return
    control = mps_control()
    for folder in MPS_ENVIRONMENT.values():
        os.makedirs(folder, exist_ok=True)
    os.environ.update(MPS_ENVIRONMENT)  # inherited by every job this run starts
    subprocess.run([control, "-d"], check=True)


def stop_mps_if_on():
    if config["mps"]:
        subprocess.run([mps_control()], input="quit\n", text=True, check=False)
