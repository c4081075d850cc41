localrules:
    summarize,


rule summarize:
    input:
        metrics=expand(METRICS, dataset=DATASETS),
    output:
        table=SUMMARY,
    log:
        f"{PATHS['logs']}/summarize.log",
    conda:
        "../envs/rnnfleet.yaml"
    script:
        "../scripts/summarize.py"
