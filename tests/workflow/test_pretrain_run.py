"""train.init fleet through the real snakemake: one pretrain job before the fine-tunes, its
cutoff across datasets, what re-runs it and what does not (rules/pretrain.smk, rnnfleet.pretraining)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import copy_of_run, planned_rules, snakemake, summary_by_dataset, write_bars_of_returns, write_config

from rnnfleet.data import load_arrays
from rnnfleet.pretraining import FLEET_START_BETTER, FLEET_START_WORSE, NO_DIFFERENCE, file_sha256
from rnnfleet.train.modelfile import load_checkpoint

# SHORT's training part ends first: its first embargo bar is the fleet's cutoff. LONG's bars
# from PLANTED_ROW on follow each other (a return repeats the one before): inside SHORT's
# validation and test periods in time, and inside LONG's own training part.
PLANTED_ROW = 300
FLEET = {"SHORT_1m": 400, "LONG_1m": 900, "OTHER_1m": 500}
START = "2024-01-01"


def write_fleet_dataset(folder: Path, name: str, rows: int, seed: int, start: str = START) -> None:
    rng = np.random.default_rng(seed)
    returns = rng.normal(0, 1e-3, rows)
    if name == "LONG_1m":
        for row in range(PLANTED_ROW, rows):
            returns[row] = 0.9 * returns[row - 1] + rng.normal(0, 2e-4)
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
    write_config(folder, data_dir="data", train={"init": "fleet", "finetune_lr": 0.002, "compare_init": True})
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


def test_compare_init_keeps_validations_choice_and_the_report_leads_with_the_verdict(fleet_run):
    folder, _ = fleet_run
    table = summary_by_dataset(folder)
    for name in FLEET:
        metrics = json.loads((folder / f"metrics/{name}.json").read_text())
        fleet_preferred = metrics["init_fleet_val_loss"] <= metrics["init_scratch_val_loss"]
        assert table[name]["init"] == metrics["init_kept"] == ("fleet" if fleet_preferred else "scratch")
        assert load_checkpoint(folder / f"models/{name}.pt")["lineage"]["init"]["from"] == table[name]["init"]
        assert metrics["val_loss"] == min(metrics["init_fleet_val_loss"], metrics["init_scratch_val_loss"])
        kept_skill = metrics[f"init_{metrics['init_kept']}_test_skill"]
        assert float(table[name]["test_skill"]) == pytest.approx(kept_skill)
        for column in ("init_scratch_test_skill", "init_pretrained_test_skill", "init_dm_stat"):
            float(table[name][column])
        assert 0 <= float(table[name]["init_dm_pvalue"]) <= float(table[name]["init_qvalue"]) + 1e-12 <= 1 + 1e-12
        assert table[name]["init_verdict"] in (FLEET_START_BETTER, FLEET_START_WORSE, NO_DIFFERENCE)
    start_page = (folder / "results/report_start.rst").read_text()
    assert "**The fleet's start.** It beat scratch on " in start_page
    assert f"of {len(FLEET)} datasets after the fleet's correction" in start_page
    assert start_page.index("**The fleet's start.**") < start_page.index("**The fleet.**")


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


def test_a_dataset_added_later_trains_alone_and_one_before_the_cutoff_from_scratch(fleet_run, tmp_path):
    folder = copy_of_run(fleet_run[0], tmp_path)
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
