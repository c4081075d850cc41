# The fleet's pretrained model (train.init: fleet; rnnfleet.pretraining, docs/model.md): one
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
# dataset present, and the run says why (report_pretrain_plan). Those are plain inputs then:
# Snakemake skips a job's own params check when a job it depends on runs (DAG.update_needrun
# masks it) and passes an ancient input's update on to no one, so with ancient() a change of
# settings that also re-runs a preprocess job would not re-run the pretraining.
# A dataset whose preprocess fails is left out of the job (rnnfleet.hooks.past_failed_inputs)
# instead of stopping it; its lineage says which and why, and its inputs as recorded leave
# it out, so the next run does not redo the pretraining for it.
from rnnfleet.pretraining import fleet_members, pretrained_paths
from rnnfleet.workflow.pretrain_plan import (
    PretrainPlan,
    pretrain_forced,
    pretrain_plan,
)

PRETRAINED, PRETRAINED_LINEAGE = pretrained_paths(PATHS["models"])
PRETRAIN_SETTINGS = JOB_SETTINGS["pretrain"]["settings"]


def pretrain_plan_now():
    """This run's plan (while the DAG is built: --forcerun is known then)."""
    if not workflow.is_main_process:
        # A cluster job running the pretraining: its main process chose to redo it, which
        # serves every dataset present (--forcerun does not reach this process).
        return PretrainPlan(DATASETS, False, "")
    return pretrain_plan(
        PRETRAINED_LINEAGE,
        PRETRAIN_SETTINGS["settings_sha256"],
        DATASETS,
        pretrain_forced(
            workflow.dag_settings, "pretrain", (PRETRAINED, PRETRAINED_LINEAGE)
        ),
        MODEL_CODE + FEATURE_CODE,
        config["pretrain"]["refresh"],
        lambda dataset: expand(ARRAYS, dataset=dataset)[0],
    )


def report_pretrain_plan(dag):
    """After the DAG is built (dry-runs too): why the fleet's pretraining runs, in words."""
    if any(job.rule.name == "pretrain" for job in dag.needrun_jobs()):
        plan = pretrain_plan_now()
        if plan.why_redone:
            logger.info(
                f"rnnfleet: the fleet's pretraining runs: {plan.why_redone}; it serves "
                f"{len(plan.datasets)} dataset(s)"
            )


def pretrain_arrays(wildcards):
    plan = pretrain_plan_now()
    paths = expand(ARRAYS, dataset=plan.datasets)
    if not workflow.is_main_process:
        # A cluster job running the pretraining: an array file missing now is one its main
        # process left out (its preprocess failed; rnnfleet.hooks.past_failed_inputs).
        paths = [path for path in paths if os.path.exists(path)]
    return [ancient(path) for path in paths] if plan.frozen else paths


def pretrain_members(wildcards, input):
    """The job's datasets and those left out (a function of input: not compared as a param)."""
    datasets = pretrain_plan_now().datasets
    members = fleet_members(
        datasets,
        expand(ARRAYS, dataset=datasets),
        expand(log_path("preprocess"), dataset=datasets),
        list(input.arrays),
    )
    return json.dumps(members)


rule pretrain:
    input:
        arrays=pretrain_arrays,
        model_code=MODEL_CODE,
        feature_code=FEATURE_CODE,
    output:
        model=PRETRAINED,
        lineage=PRETRAINED_LINEAGE,
    log:
        f"{PATHS['logs']}/pretrain/fleet.log",
    benchmark:
        f"{PATHS['benchmarks']}/pretrain/fleet.tsv"
    priority: 20
    conda:
        "../envs/rnnfleet.yaml"
    threads: config["train"]["threads"]
    resources:
        gpu_mem=config["train"]["gpu_mem"],
    params:
        settings={
            key: value
            for key, value in PRETRAIN_SETTINGS.items()
            if key != "settings_sha256"
        },
        members_json=pretrain_members,
    shell:
        " ".join(
            [
                JOB_CLIENT,
                "pretrain --log {log:q}",
                f"--settings {quoted(RUN_SETTINGS_FILE)}",
                "--text members_json {params.members_json:q}",
                "--text model_path {output.model:q}",
                "--text lineage_path {output.lineage:q}",
                "--value threads {threads} --value gpu_mem_gb {resources.gpu_mem}",
            ]
        )
