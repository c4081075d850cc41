from rnnfleet.after_failures import (
    ResultPaths,
    drop_not_done_list_if_replaced,
    write_results_after_failures,
)
from rnnfleet.previous_models import back_up_models_to_replace, restore_previous_models
from rnnfleet.recovery import stop_jobs_on_signals


def back_up_models_to_retrain():
    """Keep each model a train job of this run replaces until its new one is written
    (rnnfleet.previous_models)."""
    back_up_models_to_replace(
        job.output.model
        for job in workflow.dag.needrun_jobs()
        if job.rule.name == "train"
    )


onstart:
    check_output_folders_writable()
    check_plugin_files()
    write_settings(JOB_SETTINGS)
    stop_jobs_on_signals()
    back_up_models_to_retrain()
    start_mps_if_on()
    prestart_warm_workers()


onsuccess:
    stop_mps_if_on()
    drop_not_done_list_if_replaced(NOT_DONE, SUMMARY)


# With failed or stopped jobs Snakemake skips the summarize and plots jobs (their inputs
# are missing): the table and the figures of the datasets that succeeded are written
# here instead, and re-trains that failed get their previous model back.
onerror:
    stop_mps_if_on()
    restore_previous_models(PATHS["models"])
    write_results_after_failures(
        DATASETS,
        {step: log_path(step) for step in ("preprocess", "train", "predict")},
        METRICS,
        MODEL,
        ResultPaths(
            table=SUMMARY,
            table_html=SUMMARY_HTML,
            skill_plot=SKILL_PLOT,
            loss_curves=LOSS_CURVES,
            not_done=NOT_DONE,
        ),
    )
