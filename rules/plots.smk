# On a cluster, this one job runs in the Snakemake process, not as a SLURM job.
localrules:
    plots,


# One job draws every figure: a job per dataset would pay for starting Python and
# importing matplotlib hundreds of times. The loss curves folder is updated, not replaced
# (Snakemake would delete a plain directory() before the job): the job draws only the
# curves of datasets trained since, and removes those of datasets gone.
rule plots:
    input:
        table=SUMMARY,
        metrics=rules.summarize.input.metrics,
        start_template=START_TEMPLATE,
    output:
        start_page=update(START_PAGE),
        table_html=report(
            update(SUMMARY_HTML),
            caption="../report/summary_table.rst",
            category="All datasets",
            labels={"figure": "summary table"},
        ),
        skill_plot=report(
            update(SKILL_PLOT),
            caption="../report/skill_overview.rst",
            category="All datasets",
            labels={"figure": "skill by dataset"},
        ),
        coverage_plot=report(
            update(COVERAGE_PLOT),
            caption="../report/coverage.rst",
            category="All datasets",
            labels={"figure": "interval coverage"},
        ),
        loss_curves=report(
            update(directory(LOSS_CURVES)),
            patterns=[f"{{dataset}}.{LOSS_CURVE_FORMAT}"],
            caption="../report/loss_curve.rst",
            category="Loss curves",
            labels={"dataset": "{dataset}"},
        ),
    log:
        f"{PATHS['logs']}/plots.log",
    conda:
        "../envs/rnnfleet.yaml"
    # The curves of a first run are drawn in parallel (Snakemake caps this at --cores).
    threads: os.cpu_count() or 1
    params:
        # a param: a folder of another format (an earlier rnnfleet's PNG curves) is drawn again
        loss_curve_format=LOSS_CURVE_FORMAT,
    script:
        "../scripts/plots.py"
