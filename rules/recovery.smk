from rnnfleet.recovery import stop_jobs_on_signals
from rnnfleet.summary import write_summary_after_failures


onstart:
    check_plugin_files()
    stop_jobs_on_signals()
    start_mps_if_on()
    prestart_warm_workers()


onsuccess:
    stop_mps_if_on()


# With failed or stopped jobs Snakemake skips the summarize job (its inputs are missing):
# the table is written here instead, with every dataset's status and error.
onerror:
    stop_mps_if_on()
    write_summary_after_failures(
        DATASETS,
        {step: log_path(step) for step in ("preprocess", "train", "predict")},
        METRICS,
        SUMMARY,
    )
