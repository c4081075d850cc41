# The fleet's pretrained model (train.init: fleet; rnnfleet.train.pretraining, docs/model.md): one
# job trains the configured model on the bars of every dataset before the fleet's cutoff;
# each train job then starts from its weights.
#
# Its params are its settings (model, training, preprocess, pretrain): changing one re-runs it,
# and then the train jobs that start from it (it is one of their inputs). Its inputs are the
# array files of the datasets it serves (rnnfleet.workflow.pretrain_plan): while its
# settings and the user's code are unchanged and it is not forced (its lineage file,
# models/.fleet/pretrained.json, records their fingerprint), those its lineage names, their
# array files marked ancient(): a morning's new bars (newer array files) do not re-run it,
# and a dataset added later is not one of its inputs (the set of inputs, a rerun trigger,
# stays the same) and starts from the existing model. Whenever it is redone (settings or
# code changed, `--forcerun pretrain`, pretrain.refresh days of new bars) it serves every
# dataset present, and the run says why (PretrainRule.report). Those are plain inputs then:
# Snakemake skips a job's own params check when a job it depends on runs (DAG.update_needrun
# masks it) and passes an ancient input's update on to no one, so with ancient() a change of
# settings that also re-runs a preprocess job would not re-run the pretraining.
# A dataset whose preprocess fails is left out of the job (rnnfleet.hooks.past_failed_inputs)
# instead of stopping it; its lineage says which and why, and its inputs as recorded leave
# it out, so the next run does not redo the pretraining for it.


rule pretrain:
    input:
        arrays=PRETRAIN.arrays,
        model_code=MODEL_CODE,
        feature_code=FEATURE_CODE,
    output:
        model=PRETRAINED,
        lineage=PRETRAINED_LINEAGE,
    log:
        PRETRAIN_LOG,
    benchmark:
        f"{PATHS['benchmarks']}/pretrain/fleet.tsv"
    priority: 20
    conda:
        "../envs/rnnfleet.yaml"
    threads: config["train"]["threads"]
    resources:
        gpu_mem=config["train"]["gpu_mem"],
    params:
        settings=PRETRAIN_SETTINGS,
        members_json=PRETRAIN.members,
    shell:
        job_command(
            "pretrain",
            texts={
                "members_json": "{params.members_json:q}",
                "model_path": "{output.model:q}",
                "lineage_path": "{output.lineage:q}",
            },
            values={"threads": "{threads}", "gpu_mem_gb": "{resources.gpu_mem}"},
            run_wide=True,
        )
