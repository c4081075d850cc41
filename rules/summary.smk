localrules:
    summarize,


rule summarize:
    input:
        metrics=expand(METRICS, dataset=DATASETS),
        not_done=stale_not_done_list,
    # update(): a table stays at its path until its replacement is renamed over it, and a
    # failed job's is put back (rnnfleet.hooks.atomic_restore): a full disk loses no table.
    output:
        table=update(SUMMARY),
        forecasts=update(FORECASTS),
    log:
        f"{PATHS['logs']}/summarize.log",
    conda:
        "../envs/rnnfleet.yaml"
    params:
        # the warn thresholds too: a changed one re-writes the table, re-trains nothing
        quality=config["quality"],
        dataset_quality=DATASET_QUALITY,
        # the fleet's correction too: it is over the table's datasets, re-trains nothing
        fleet=config["fleet"],
        # the forecasts table names each model file (MODEL)
        models_folder=PATHS["models"],
    script:
        "../scripts/summarize.py"
