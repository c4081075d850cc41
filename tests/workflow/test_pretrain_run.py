"""train.init fleet through the real snakemake: one pretrain job before the fine-tunes, its
cutoff across datasets, what re-runs it and what does not (rules/pretrain.smk, rnnfleet.train.pretraining)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from conftest import (
    REPO,
    add_datasets,
    copy_of_run,
    planned_rules,
    returns_with_planted_signal,
    snakemake,
    summary_by_dataset,
    write_bars_of_returns,
    write_config,
)

from rnnfleet.bars.joining import file_sha256
from rnnfleet.faults import PRETRAIN_CRASH
from rnnfleet.prep.arrays_file import load_arrays
from rnnfleet.scores.start_verdicts import NO_DIFFERENCE, ONE_FIT
from rnnfleet.train.modelfile import load_checkpoint

# SHORT's training part ends first: its first embargo bar is the fleet's cutoff. LONG's bars
# from PLANTED_ROW on follow each other (a return repeats the one before): inside SHORT's
# validation and test periods in time, and inside LONG's own training part.
PLANTED_ROW = 300
FLEET = {"SHORT_1m": 400, "LONG_1m": 900, "OTHER_1m": 500}
START = "2024-01-01"


def write_fleet_dataset(folder: Path, name: str, rows: int, seed: int, start: str = START) -> None:
    rng = np.random.default_rng(seed)
    returns = returns_with_planted_signal(rows, rng, PLANTED_ROW if name == "LONG_1m" else None)
    write_bars_of_returns(folder / "data" / f"{name}.csv", returns, rng, start)


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory) -> tuple[Path, str]:
    """A fleet trained with train.init fleet (set in config.yaml): the folder and snakemake's output."""
    folder = tmp_path_factory.mktemp("pretrain")
    for seed, (name, rows) in enumerate(FLEET.items()):
        write_fleet_dataset(folder, name, rows, seed)
    # OTHER's next bars, for a morning's update: the file with 60 more, kept aside.
    write_fleet_dataset(folder / "later", "OTHER_1m", FLEET["OTHER_1m"] + 60, 2)
    lines = (folder / "later/data/OTHER_1m.csv").read_text().splitlines(keepends=True)
    (folder / "data/OTHER_1m.csv").write_text("".join(lines[: FLEET["OTHER_1m"] + 1]))
    write_config(
        folder,
        data_dir="data",
        train={"init": "fleet", "finetune_lr": 0.002, "compare_init": True},
        tracking={"mlflow": {"enabled": True, "per_dataset_runs": True}},
    )
    return folder, snakemake(folder).stderr


def job_block(output: str, rule: str) -> str:
    """The lines snakemake prints for the (first) job of `rule`."""
    start = output.index(f"rule {rule}:")
    end = output.find("\n\n", start)
    return output[start : end if end > 0 else None]


def test_one_pretrain_job_runs_before_the_fine_tunes_and_declares_gpu_mem(fleet_run):
    folder, output = fleet_run
    assert output.count("rule pretrain:") == 1, output
    fleet_started = sum(row["init"] == "fleet" for row in summary_by_dataset(folder).values())
    assert f"{len(FLEET) - fleet_started} trained from scratch, {fleet_started} from the fleet's pretrained" in output
    # How many datasets the pretraining read, in the run's last line and in the table.
    coverage = f"pretrained on {len(FLEET)} of {len(FLEET)} dataset(s)"
    assert f"from the fleet's pretrained model ({coverage})" in output
    assert {row["init_pretraining"] for row in summary_by_dataset(folder).values()} == {coverage}
    assert output.index("rule pretrain:") < output.index("rule train:")
    assert "gpu_mem=2" in job_block(output, "pretrain")
    made_at = json.loads((folder / "models/.fleet/pretrained.json").read_text())["made_at"]
    for name in FLEET:
        metrics = json.loads((folder / f"metrics/{name}.json").read_text())
        assert metrics["process_started_at"] > made_at - 1  # the fine-tune started after it was made
        assert "(the weights it started from)" in (folder / f"logs/train/{name}.log").read_text()


def test_the_pretrained_file_loads_with_weights_only_and_the_models_name_it(fleet_run):
    folder, _ = fleet_run
    pretrained = folder / "models/.fleet/pretrained.pt"
    contents = torch.load(pretrained, map_location="cpu", weights_only=True)
    assert contents["kind"] == "rnnfleet fleet pretrained model"
    assert all(isinstance(value, torch.Tensor) for value in contents["state_dict"].values())
    lineage = json.loads((folder / "models/.fleet/pretrained.json").read_text())
    assert lineage["sha256"] == file_sha256(str(pretrained))
    assert lineage["datasets"] == sorted(FLEET) and lineage["trained_on"] == sorted(FLEET)
    assert lineage["settings"]["train_hparams"]["seq_len"] == 16 and "init" not in lineage["settings"]["train_hparams"]
    table = summary_by_dataset(folder)
    for name in FLEET:
        model_lineage = load_checkpoint(folder / f"models/{name}.pt")["lineage"]
        assert model_lineage["init"]["pretrained_sha256"] == lineage["sha256"]
        assert lineage["sha256"][:12] in table[name]["init_note"]


def test_compare_init_keeps_the_start_and_the_report_leads_with_the_fleets_verdict(fleet_run):
    folder, output = fleet_run
    # The run said what compare_init costs before it trained, and a dry-run says it too.
    note = f"train.compare_init: each full fit of this run's {len(FLEET)} training(s) is trained twice"
    assert note in output
    assert note in (dry_run := snakemake(folder, "-n", "--forcerun", "train")).stdout + dry_run.stderr
    table = summary_by_dataset(folder)
    for name in FLEET:
        metrics = json.loads((folder / f"metrics/{name}.json").read_text())
        # The fit from the fleet's start is kept, as train.init asks; scratch's is the comparison.
        assert table[name]["init"] == "fleet"
        assert load_checkpoint(folder / f"models/{name}.pt")["lineage"]["init"]["from"] == "fleet"
        assert metrics["val_loss"] == metrics["init_fleet_val_loss"] and "init_kept" not in metrics
        assert f"{name}: validation loss from the fleet's start" in (folder / f"logs/train/{name}.log").read_text()
        assert float(table[name]["test_skill"]) == pytest.approx(metrics["init_fleet_test_skill"])
        for column in ("init_scratch_test_skill", "init_pretrained_test_skill", "init_fleet_best_epoch"):
            float(table[name][column])
        # One fit from each start: no verdict of its own (a paired test of two fits measures the seed).
        assert (table[name]["init_verdict"], table[name]["init_seeds"]) == (ONE_FIT, "1")
        assert table[name].get("init_qvalue", "") == ""  # left out of the table: empty for every dataset
        assert "init_dm_pvalue" not in table[name]
    start_page = (folder / "results/report_start.rst").read_text()
    # The fleet's verdict is across datasets: three are too few for a sign test to tell.
    better = sum(float(row["init_fleet_test_skill"]) > float(row["init_scratch_test_skill"]) for row in table.values())
    assert f"**The fleet's start.** Too few datasets to tell (3, fewer than 6): better on {better} of 3" in start_page
    assert "no verdict per dataset (train.compare_init_seeds)" in start_page
    assert f"The pretraining: pretrained on {len(FLEET)} of {len(FLEET)} dataset(s)." in start_page
    assert start_page.index("**The fleet's start.**") < start_page.index("**The fleet.**")


def test_mlflow_logs_where_each_fit_started_the_verdicts_and_the_pretrained_digest(fleet_run):
    client_module = pytest.importorskip("mlflow.tracking", reason="requirements-mlflow.txt is not installed")
    folder, _ = fleet_run
    client = client_module.MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlruns.db'}")
    runs = client.search_runs([client.get_experiment_by_name(folder.name).experiment_id])
    fleet = next(run for run in runs if "mlflow.parentRunId" not in run.data.tags)
    lineage = json.loads((folder / "models/.fleet/pretrained.json").read_text())
    table = summary_by_dataset(folder)
    assert fleet.data.params["pretrained.sha256"] == lineage["sha256"]
    assert fleet.data.params["pretrained.cutoff"] == lineage["cutoff"]
    metrics = fleet.data.metrics
    assert metrics["pretrained_trained_on"] == len(FLEET) and metrics["pretrained_skill"] == lineage["scores"]["skill"]
    assert metrics["init_fleet"] == sum(row["init"] == "fleet" for row in table.values())
    assert metrics["init_compared"] == len(FLEET)
    better = sum(float(row["init_fleet_test_skill"]) > float(row["init_scratch_test_skill"]) for row in table.values())
    assert metrics["init_start_better"] == better and metrics["init_better_after_fleet_correction"] == 0
    children = {run.data.tags["rnnfleet.dataset"]: run for run in runs if "mlflow.parentRunId" in run.data.tags}
    assert set(children) == set(FLEET)
    for name, run in children.items():
        row = table[name]
        assert run.data.params["init"] == row["init"] and run.data.params["init_verdict"] == row["init_verdict"]
        assert run.data.params["init_pretrained_sha256"] == row["init_pretrained_sha256"] == lineage["sha256"]
        for column in ("init_fleet_best_epoch", "init_scratch_test_skill", "init_pretrained_test_skill"):
            assert run.data.metrics[column] == pytest.approx(float(row[column]))


def test_the_pretraining_reads_no_bar_at_or_after_the_fleet_cutoff(fleet_run):
    folder, _ = fleet_run
    lineage = json.loads((folder / "models/.fleet/pretrained.json").read_text())
    short = load_arrays(folder / "prep/SHORT_1m.npz")
    # The cutoff: SHORT's first bar after its training part (validation start less the embargo).
    assert lineage["cutoff_dataset"] == "SHORT_1m"
    assert lineage["cutoff_ns"] == int(short.row_times[short.train_end])
    planted_from = pd.Timestamp(START, tz="UTC").value + PLANTED_ROW * 60 * 10**9
    assert planted_from > lineage["cutoff_ns"]  # the planted bars lie in SHORT's validation/test time
    long = load_arrays(folder / "prep/LONG_1m.npz")
    assert int(long.row_times[long.train_end]) > planted_from  # LONG's own training part holds them
    for name, seen in lineage["bars"].items():
        assert seen["last_bar_ns"] < lineage["cutoff_ns"], name
        assert seen["train_windows"] > 0 and seen["val_windows"] > 0
    assert lineage["bars"]["LONG_1m"]["last_bar_ns"] < planted_from


def untracked(folder: Path) -> None:
    """The folder's config.yaml with MLflow tracking off (tested above, and it re-trains
    nothing): a copy's runs then spend no seconds importing MLflow and logging to it."""
    config_path = folder / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["tracking"]["mlflow"]["enabled"] = False
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))


def test_a_dataset_added_later_trains_alone_and_one_before_the_cutoff_from_scratch(fleet_run, tmp_path):
    folder = copy_of_run(fleet_run[0], tmp_path)
    untracked(folder)
    write_fleet_dataset(folder, "EARLY_1m", 400, 7, start="2023-12-31")  # its validation: before the cutoff
    plan = snakemake(folder, "-n").stdout
    assert planned_rules(plan) == {"preprocess": 1, "train": 1, "summarize": 1, "plots": 1, "all": 1}, plan
    models = {name: (folder / f"models/{name}.pt").stat().st_mtime_ns for name in FLEET}
    snakemake(folder)
    assert {name: (folder / f"models/{name}.pt").stat().st_mtime_ns for name in FLEET} == models
    row = summary_by_dataset(folder)["EARLY_1m"]
    assert row["init"] == "scratch"
    assert "before the fleet pretraining's cutoff" in row["init_note"]
    assert "before the fleet pretraining's cutoff" in (folder / "logs/train/EARLY_1m.log").read_text()
    assert "EARLY_1m" not in json.loads((folder / "models/.fleet/pretrained.json").read_text())["datasets"]

    # A morning's new bars of a dataset it serves: that dataset's model is updated from its own
    # weights (as from scratch), the pretraining is not re-run.
    pretrained_made = (folder / "models/.fleet/pretrained.pt").stat().st_mtime_ns
    shutil.copyfile(folder / "later/data/OTHER_1m.csv", folder / "data/OTHER_1m.csv")
    assert "pretrain" not in planned_rules(snakemake(folder, "-n").stdout)
    snakemake(folder)
    assert (folder / "models/.fleet/pretrained.pt").stat().st_mtime_ns == pretrained_made
    assert summary_by_dataset(folder)["OTHER_1m"]["made"] == "update 1"
    # pretrain.refresh (days): OTHER's 60 new bars are 0.0417 days: not yet due at 0.05, due at
    # 0.04, and the dry-run says why.
    assert "pretrain" not in planned_rules(snakemake(folder, "-n", "--config", "pretrain={refresh: 0.05}").stdout)
    due = snakemake(folder, "-n", "--config", "pretrain={refresh: 0.04}")
    assert planned_rules(due.stdout)["pretrain"] == 1
    said = "the fleet's pretraining runs: 0.0417 days of new bars since it was made (pretrain.refresh: 0.04)"
    assert f"{said}; it serves {len(FLEET) + 1} dataset(s)" in due.stdout + due.stderr
    # A changed pretrain setting (from --config, where nested values arrive as text): the
    # pretraining and every dataset that starts from it.
    dry_run = snakemake(folder, "-n", "--config", "pretrain={train_windows: 100}")
    changed = planned_rules(dry_run.stdout)
    assert changed["pretrain"] == 1 and changed["train"] == len(FLEET) + 1
    said = dry_run.stdout + dry_run.stderr
    assert f"re-train: the fleet's pretrained model changes: {len(FLEET) + 1} " in said, said
    # --forcerun pretrain: the same, over the datasets it serves.
    forced = planned_rules(snakemake(folder, "-n", "--forcerun", "pretrain").stdout)
    assert forced["pretrain"] == 1 and forced["train"] == len(FLEET) + 1


# ---- a fleet with a bad file: the pretraining goes on with the others -------------------------

BAD = "BAD_1m"
GOOD_OF_BAD_RUN = ("SHORT_1m", "OTHER_1m")


@pytest.fixture(scope="module")
def bad_file_run(tmp_path_factory) -> tuple[Path, object]:
    """A fleet with train.init fleet where BAD_1m's file has a negative price (a data error:
    a row that is not a number would be dropped); its good content is kept in good/ (the
    folder, snakemake's result)."""
    folder = tmp_path_factory.mktemp("pretrain_bad")
    for seed, name in enumerate(GOOD_OF_BAD_RUN):
        write_fleet_dataset(folder, name, FLEET[name], seed)
    write_fleet_dataset(folder / "good", BAD, 500, 5)
    lines = (folder / "good/data" / f"{BAD}.csv").read_text().splitlines(keepends=True)
    cells = lines[40].split(",")
    cells[4] = "-1"
    lines[40] = ",".join(cells) + ("" if cells[-1].endswith("\n") else "\n")
    (folder / "data" / f"{BAD}.csv").write_text("".join(lines))
    write_config(folder, data_dir="data", train={"init": "fleet"})
    return folder, snakemake(folder, check=False)


def test_a_dataset_whose_preprocess_fails_fails_alone_and_the_pretraining_goes_on_without_it(bad_file_run):
    folder, result = bad_file_run
    assert result.returncode != 0  # the run says something failed
    log = (folder / f"logs/preprocess/{BAD}.log").read_text()
    errors = [line for line in log.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and errors[0].startswith(f"ERROR: data/{BAD}.csv: "), log
    lineage = json.loads((folder / "models/.fleet/pretrained.json").read_text())
    assert lineage["datasets"] == lineage["trained_on"] == sorted(GOOD_OF_BAD_RUN)
    why = lineage["left_out"][BAD]
    assert why == "its preprocess failed: " + errors[0].removeprefix("ERROR: "), why
    assert f"pretrain: {BAD} left out: {why}" in (folder / "logs/pretrain/fleet.log").read_text()
    assert f"rnnfleet: pretrain goes on without prep/{BAD}.npz: the job making it failed" in result.stderr
    table = summary_by_dataset(folder)
    assert table[BAD]["status"] == "data error"
    for name in GOOD_OF_BAD_RUN:
        assert table[name]["status"] == "ok"
        model_lineage = load_checkpoint(folder / f"models/{name}.pt")["lineage"]
        assert model_lineage["init"]["pretrained_sha256"] == lineage["sha256"]


def test_a_fixed_dataset_trains_alone_and_forcerun_redoes_the_pretraining_over_every_dataset(bad_file_run, tmp_path):
    folder = copy_of_run(bad_file_run[0], tmp_path)
    shutil.copyfile(folder / "good/data" / f"{BAD}.csv", folder / "data" / f"{BAD}.csv")
    write_fleet_dataset(folder, "NEW_1m", 500, 9)
    # The fixed file and a new one: each trains alone, from the pretrained model as it is.
    plan = snakemake(folder, "-n").stdout
    assert planned_rules(plan) == {"preprocess": 2, "train": 2, "summarize": 1, "plots": 1, "all": 1}, plan
    made = json.loads((folder / "models/.fleet/pretrained.json").read_text())["made_at"]
    # --forcerun pretrain: over the datasets present now, the fixed and the new one included.
    forced = snakemake(folder, "--forcerun", "pretrain")
    lineage = json.loads((folder / "models/.fleet/pretrained.json").read_text())
    everyone = sorted([*GOOD_OF_BAD_RUN, BAD, "NEW_1m"])
    said = f"rnnfleet: the fleet's pretraining runs: the run forces it (--forcerun, -f or -F); it serves {len(everyone)} dataset(s)"
    assert said in forced.stderr
    assert lineage["made_at"] > made and lineage["datasets"] == lineage["trained_on"] == everyone
    for name in everyone:
        assert (
            load_checkpoint(folder / f"models/{name}.pt")["lineage"]["init"]["pretrained_sha256"] == lineage["sha256"]
        )


# ---- a SLURM profile's groups: each dataset's preprocess with its train ----------------------


def group_jobs(dry_run_output: str) -> list[tuple[str, dict[str, int]]]:
    """(group, {rule: jobs}) of each group job that snakemake -n lists, in its order; the
    jobs outside any group under the name ''."""
    found: list[tuple[str, dict[str, int]]] = [("", {})]
    for line in dry_run_output.splitlines():
        if group := re.match(r"\[.*\] Group job (\S+) ", line):
            found.append((group[1], {}))
        elif rule := re.match(r"( *)(?:local)?rule (\w+):", line):
            rules = found[-1][1] if rule[1] else found[0][1]
            rules[rule[2]] = rules.get(rule[2], 0) + 1
    return found


@pytest.mark.parametrize("profile", ["slurm", "slurm-packed"])
def test_a_slurm_profiles_groups_plan_with_the_fleet_start(profile, tmp_path):
    # The profile's groups and packing, without its executor (the SLURM plugin is optional).
    settings = yaml.safe_load((REPO / "profiles" / profile / "config.yaml").read_text())
    groups = [f"{rule}={group}" for rule, group in settings["groups"].items()]
    components = [f"{group}={n}" for group, n in settings.get("group-components", {}).items()]
    datasets = ["A_1m", "B_1m", "C_1m"]
    add_datasets(tmp_path, datasets)
    write_config(tmp_path, data_dir="data", train={"init": "fleet"})
    packing = ("--group-components", *components) if components else ()
    plan = snakemake(tmp_path, "-n", "--groups", *groups, *packing)

    output = plan.stdout + plan.stderr
    said = "rnnfleet: train.init fleet: the preprocess jobs go in group dataset-preprocess, not with their train"
    assert said in output
    per_job = 1 if profile == "slurm" else len(datasets)  # profiles/slurm-packed: 10 datasets a job
    jobs = group_jobs(output)
    assert jobs[0][1].get("pretrain") == 1  # outside any group: a SLURM job of its own
    assert sorted(jobs[1:]) == sorted(
        [("dataset-preprocess", {"preprocess": per_job})] * (len(datasets) // per_job)
        + [("dataset", {"train": per_job})] * (len(datasets) // per_job)
    ), output


# ---- the pretraining fails: every dataset trains from scratch, and the run says so ------------


def test_a_failed_pretraining_leaves_every_dataset_trained_from_scratch_with_why(tmp_path):
    datasets = ["A_1m", "B_1m"]
    add_datasets(tmp_path, datasets)
    write_config(tmp_path, data_dir="data", train={"init": "fleet"})
    result = snakemake(tmp_path, check=False, env={PRETRAIN_CRASH: "1"})

    assert result.returncode != 0  # the run ends failed, naming the pretrain job
    # One line naming the job and why (Snakemake's own block under it left out).
    assert "ERROR: pretrain: internal error RuntimeError: test fault" in result.stderr, result.stderr[-3000:]
    assert "Error in rule pretrain" not in result.stderr
    errors = [line for line in (tmp_path / "logs/pretrain/fleet.log").read_text().splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "test fault" in errors[0], errors
    why = "from scratch: the fleet's pretraining failed: " + errors[0].removeprefix("ERROR: ")
    assert "rnnfleet: train goes on without models/.fleet/pretrained.pt: the job making it failed (2 jobs)" in (
        result.stderr
    )
    table = summary_by_dataset(tmp_path)
    for name in datasets:
        assert load_checkpoint(tmp_path / f"models/{name}.pt")["lineage"]["init"]["from"] == "scratch"
        assert f"{name}: trains {why}" in (tmp_path / f"logs/train/{name}.log").read_text()
        assert (table[name]["status"], table[name]["init"], table[name]["init_note"]) == ("ok", "scratch", why)


# ---- the cutoff serves the most datasets; the model file is checked before any job ---------


def test_an_older_history_is_left_out_of_the_cutoff_and_the_run_says_how_many_were_read(tmp_path):
    """EARLY's history ends before the others begin: the cutoff that serves the most is SHORT's
    first embargo bar, not EARLY's; EARLY is left out with why and trains from scratch, and the
    run's last line, the table and the start page say 2 of 3 were read."""
    for seed, name in enumerate(("SHORT_1m", "OTHER_1m")):
        write_fleet_dataset(tmp_path, name, FLEET[name], seed)
    write_fleet_dataset(tmp_path, "EARLY_1m", 400, 7, start="2023-12-31")
    write_config(tmp_path, data_dir="data", train={"init": "fleet", "compare_init": True, "compare_init_seeds": 2})
    output = snakemake(tmp_path).stderr
    assert "is trained 4 times (2 seeds a start)" in output
    lineage = json.loads((tmp_path / "models/.fleet/pretrained.json").read_text())
    short = load_arrays(tmp_path / "prep/SHORT_1m.npz")
    assert (lineage["cutoff_dataset"], lineage["cutoff_ns"]) == ("SHORT_1m", int(short.row_times[short.train_end]))
    assert lineage["trained_on"] == ["OTHER_1m", "SHORT_1m"]
    assert lineage["left_out"]["EARLY_1m"].startswith("its validation starts before the cutoff: at 2023-12-31")
    coverage = "pretrained on 2 of 3 dataset(s), 1 left out: its validation starts before the cutoff (1)"
    assert f"({coverage})" in output
    table = summary_by_dataset(tmp_path)
    assert (
        table["EARLY_1m"]["init"] == "scratch"
        and "before the fleet pretraining's cutoff" in table["EARLY_1m"]["init_note"]
    )
    assert {row["init_pretraining"] for row in table.values()} == {coverage}
    assert f"The pretraining: {coverage}." in (tmp_path / "results/report_start.rst").read_text()
    # Two seeds a start: each dataset compared gets a test across its seeds (two of each can
    # never be told apart: the smallest p-value of an exact test of 2 against 2 is 1/3).
    for name in ("SHORT_1m", "OTHER_1m"):
        row = table[name]
        metrics = json.loads((tmp_path / f"metrics/{name}.json").read_text())
        assert row["init_seeds"] == "2" and float(row["init_seeds_pvalue"]) >= 1 / 3
        assert row["init_verdict"] == NO_DIFFERENCE and float(row["init_qvalue"]) >= float(row["init_seeds_pvalue"])
        assert metrics["val_loss"] <= metrics["init_fleet_val_loss"] and row["init"] == "fleet"  # its best seed


def test_a_damaged_or_missing_pretrained_model_is_named_before_any_job_and_spares_the_fits_from_scratch(
    fleet_run, tmp_path
):
    folder = copy_of_run(fleet_run[0], tmp_path)
    untracked(folder)
    pretrained = folder / "models/.fleet/pretrained.pt"
    good, made = pretrained.read_bytes(), pretrained.stat()
    # Deleted while every model is up to date: named before any job, with the command; nothing runs.
    pretrained.unlink()
    missing = snakemake(folder, "-n")
    said = (
        "rnnfleet: ERROR: models/.fleet/pretrained.pt is missing (its lineage models/.fleet/pretrained.json is there)"
    )
    assert said in missing.stdout + missing.stderr and "Nothing to be done" in missing.stdout
    pretrained.write_bytes(good)
    os.utime(pretrained, ns=(made.st_atime_ns, made.st_mtime_ns))
    write_fleet_dataset(folder, "EARLY_1m", 400, 7, start="2023-12-31")  # trains from scratch: before the cutoff
    snakemake(folder)
    pretrained.write_bytes(good[:-64] + bytes(64))
    damaged = (
        "rnnfleet: ERROR: models/.fleet/pretrained.pt is damaged: its SHA-256 is not the one "
        "models/.fleet/pretrained.json records"
    )
    redo = "the trainings that start from it fail until it is redone: snakemake --forcerun pretrain"
    dry_run = snakemake(folder, "-n")
    said = dry_run.stdout + dry_run.stderr
    assert damaged in said and redo in said, said
    assert "re-train: the fleet's pretrained model file changed on disk since, not by its pretraining" in said
    assert "no new bars" not in said
    # Every training forced: EARLY, from scratch, trains; each of the others fails with one line.
    forced = snakemake(folder, "--forcerun", "train", check=False)
    assert forced.returncode != 0 and damaged in forced.stderr
    assert load_checkpoint(folder / "models/EARLY_1m.pt")["lineage"]["init"]["from"] == "scratch"
    table = summary_by_dataset(folder)
    assert table["EARLY_1m"]["status"] == "ok"
    for name in FLEET:
        log = (folder / f"logs/train/{name}.log").read_text()
        errors = [line for line in log.splitlines() if line.startswith("ERROR")]
        assert len(errors) == 1 and "pretrained.pt: damaged" in errors[0] and "--forcerun pretrain" in errors[0], log
        assert "Traceback" not in log
        assert table[name]["status"] != "ok"
    # Deleted where the run needs it: it is redone, over every dataset present, and the run says why.
    pretrained.unlink()
    redone = snakemake(folder, "-n")
    said = "rnnfleet: the fleet's pretraining runs: its model file models/.fleet/pretrained.pt is missing; it serves"
    assert said in redone.stdout + redone.stderr and planned_rules(redone.stdout)["pretrain"] == 1


def test_removing_a_dataset_re_runs_neither_the_pretraining_nor_any_model(fleet_run, tmp_path):
    folder = copy_of_run(fleet_run[0], tmp_path)
    untracked(folder)
    models = {name: (folder / f"models/{name}.pt").stat().st_mtime_ns for name in FLEET}
    (folder / "data/OTHER_1m.csv").unlink()
    plan = snakemake(folder, "-n")
    assert "pretrain" not in planned_rules(plan.stdout) and "train" not in planned_rules(plan.stdout), plan.stdout
    snakemake(folder)
    kept = [name for name in FLEET if name != "OTHER_1m"]
    assert {name: (folder / f"models/{name}.pt").stat().st_mtime_ns for name in kept} == {
        name: models[name] for name in kept
    }
    assert sorted(summary_by_dataset(folder)) == sorted(kept)
    # The next forced pretraining serves the datasets present then.
    snakemake(folder, "--forcerun", "pretrain")
    assert json.loads((folder / "models/.fleet/pretrained.json").read_text())["datasets"] == sorted(kept)


def test_a_fine_tune_that_keeps_the_pretrained_weights_says_so(fleet_run, tmp_path):
    """A fine-tune whose learning rate moves nothing: no epoch beats the weights it started
    from (best epoch 0), and its log, init_note and init_fleet_best_epoch say so."""
    folder = copy_of_run(fleet_run[0], tmp_path)
    untracked(folder)
    config = yaml.safe_load((folder / "config.yaml").read_text())
    config["train"]["finetune_lr"] = 1e-12
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    snakemake(folder)
    table = summary_by_dataset(folder)
    started = [name for name in FLEET if table[name]["init"] == "fleet"]
    assert started
    for name in started:
        said = "best epoch 0: the pretrained weights kept unchanged"
        assert f"{name}: {said}" in (folder / f"logs/train/{name}.log").read_text()
        assert said in table[name]["init_note"] and table[name]["init_fleet_best_epoch"] == "0"


def test_compare_init_seeds_from_the_command_line(fleet_run, tmp_path):
    """train.compare_init_seeds as --config hands it over (text): the run's compare_init line
    counts its fits, and a value below 1 is one line naming the key."""
    folder = copy_of_run(fleet_run[0], tmp_path)
    untracked(folder)
    dry_run = snakemake(folder, "-n", "--config", 'train={"compare_init_seeds": "3"}')
    assert planned_rules(dry_run.stdout)["train"] == len(FLEET)  # a train setting: every model
    assert "is trained 6 times (3 seeds a start)" in dry_run.stdout + dry_run.stderr
    bad = snakemake(folder, "-n", "--config", 'train={"compare_init_seeds": "0"}', check=False)
    assert bad.returncode != 0 and "config key 'train.compare_init_seeds' = 0 is not allowed" in bad.stderr
