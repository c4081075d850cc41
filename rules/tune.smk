# The settings search, `snakemake tune` (rnnfleet.tune, docs/tuning.md): tune.workers worker
# jobs share one Optuna study in a journal file (results/tune/journal.log, not an output:
# Snakemake never deletes it), each running trials on the sample's arrays cut at their
# validation end until the budget is spent; then the study's results, and the held-out
# verdict. The settings are the rules' params: a larger tune.trials re-runs the workers,
# which continue the study; an unchanged configuration plans nothing.


rule tune:
    input:
        TUNE_PATHS["best"],
        TUNE_PATHS["trials"],
        TUNE_PATHS["page"],
        TUNE_PATHS["verdict"],


rule tune_worker:
    input:
        arrays=expand(ARRAYS, dataset=TUNE_SAMPLE),
    output:
        record=TUNE_WORKER_RECORD,
    log:
        f"{TUNE_LOGS}/worker-{{worker}}.log",
    wildcard_constraints:
        worker=r"\d+",
    conda:
        "../envs/rnnfleet.yaml"
    threads: config["train"]["threads"]
    resources:
        gpu_mem=config["train"]["gpu_mem"],
    params:
        search=TUNE_SEARCH,
        arrays_json=input_json("arrays"),
    shell:
        job_command(
            "tune_worker",
            texts={
                "arrays_json": "{params.arrays_json:q}",
                "record_path": "{output.record:q}",
            },
            values={
                "worker": "{wildcards.worker}",
                "threads": "{threads}",
                "gpu_mem_gb": "{resources.gpu_mem}",
            },
            run_wide=True,
        )


rule tune_report:
    input:
        expand(TUNE_WORKER_RECORD, worker=range(TUNE["workers"])),
    output:
        trials=TUNE_PATHS["trials"],
        best=TUNE_PATHS["best"],
        page=TUNE_PATHS["page"],
    log:
        f"{TUNE_LOGS}/report.log",
    conda:
        "../envs/rnnfleet.yaml"
    params:
        search=TUNE_SEARCH,
    shell:
        job_command(
            "tune_report",
            texts={
                "trials_path": "{output.trials:q}",
                "best_path": "{output.best:q}",
                "page_path": "{output.page:q}",
            },
            values={},
            run_wide=True,
        )


rule tune_verdict:
    input:
        best=TUNE_PATHS["best"],
        arrays=expand(ARRAYS, dataset=TUNE_HOLDOUT),
    output:
        verdict=TUNE_PATHS["verdict"],
        skills=TUNE_PATHS["skills"],
    log:
        f"{TUNE_LOGS}/verdict.log",
    conda:
        "../envs/rnnfleet.yaml"
    threads: config["train"]["threads"]
    resources:
        gpu_mem=config["train"]["gpu_mem"],
    params:
        defaults=TUNE_BASE,
        own=TUNE_HOLDOUT_OWN,
        arrays_json=input_json("arrays"),
    shell:
        job_command(
            "tune_verdict",
            texts={
                "best_path": "{input.best:q}",
                "arrays_json": "{params.arrays_json:q}",
                "verdict_path": "{output.verdict:q}",
                "skills_path": "{output.skills:q}",
            },
            values={"threads": "{threads}", "gpu_mem_gb": "{resources.gpu_mem}"},
            run_wide=True,
        )
