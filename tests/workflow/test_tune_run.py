"""`snakemake tune` through the real snakemake (rules/tune.smk, rnnfleet.tune): the search
runs, resumes with a larger budget and plans nothing unchanged; two workers share one study;
the test period never reaches a trial's value; the held-out verdict names its counts; a bad
`tune:` value is one line naming its key."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from conftest import (
    add_datasets,
    kill_hard,
    most_at_once,
    planned_rules,
    snakemake,
    start_paused_run,
    write_config,
)

from rnnfleet.prep.arrays_file import load_arrays, save_arrays
from rnnfleet.train.modelfile import load_checkpoint

DATASETS = ["AAA_1m", "BBB_1m", "CCC_1m"]
ROWS = 600
SPACE = {"train.lr": {"low": 0.0005, "high": 0.01, "log": True}, "model.hidden_size": [4, 8]}
TUNE = {"space": SPACE, "trials": 3, "sample": 2, "epochs": 1, "holdout": 1, "seed": 0}


def tune_folder(folder: Path, **tune) -> Path:
    add_datasets(folder, DATASETS, rows=ROWS)
    write_config(folder, data_dir="data", tune={**TUNE, **tune})
    return folder


def trials(folder: Path) -> list[dict]:
    with open(folder / "results/tune/trials.csv", newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> tuple[Path, list[dict], str]:
    """A search of 3 trials: the folder, its trials.csv rows and snakemake's output."""
    folder = tune_folder(tmp_path_factory.mktemp("tune"))
    result = snakemake(folder, "tune")
    return folder, trials(folder), result.stdout + result.stderr


def test_a_larger_budget_continues_the_study_and_an_unchanged_one_plans_nothing(first_run):
    folder, first, _ = first_run
    assert [row["number"] for row in first] == ["0", "1", "2"]
    assert all(row["state"] in ("COMPLETE", "PRUNED") for row in first)
    assert planned_rules(snakemake(folder, "tune", "-n").stdout) == {}
    snakemake(folder, "tune", "--config", 'tune={"trials": 5}')
    second = trials(folder)
    assert [row["number"] for row in second] == ["0", "1", "2", "3", "4"]
    assert second[:3] == first  # the first trials are those of the study, unchanged
    assert sum(row["state"] in ("COMPLETE", "PRUNED") for row in second) == 5
    assert planned_rules(snakemake(folder, "tune", "-n", "--config", 'tune={"trials": 5}').stdout) == {}
    best = yaml.safe_load((folder / "results/tune/best.yaml").read_text())
    complete = [row for row in second if row["state"] == "COMPLETE"]
    assert best["evidence"]["best_value"] == min(float(row["value"]) for row in complete)
    assert best["evidence"]["complete_trials"] == len(complete)
    assert set(best["settings"]) == set(SPACE)


def test_the_held_out_verdict_names_its_counts(first_run):
    folder, first, output = first_run
    verdict = (folder / "results/tune/verdict.txt").read_text().strip()
    assert re.fullmatch(
        r"tune \(held-out datasets\): too few datasets to tell \(1, fewer than 6\): "
        r"better on [01] of 1 datasets, test skill [+-]\d\.\d{4} \[.*\]",
        verdict,
    ), verdict
    assert verdict in output  # printed at the end of the run
    complete = sum(row["state"] == "COMPLETE" for row in first)
    assert f"tune: the best of {complete} trials" in output
    sample = yaml.safe_load((folder / "results/tune/best.yaml").read_text())["evidence"]["sample"]
    skills = json.loads((folder / "results/tune/verdict.json").read_text())["skills"]
    assert len(sample) == 2 and list(skills) == sorted(set(DATASETS) - set(sample))
    better = sum(entry["chosen"] > entry["defaults"] for entry in skills.values())
    assert f"better on {better} of 1 datasets" in verdict
    page = (folder / "results/tune/tune.html").read_text()
    assert page.count("data:image/png;base64,") >= 2


def test_the_test_period_does_not_change_the_search(first_run, tmp_path):
    """The same search over arrays whose test rows are absurd gives the same trials."""
    _, first, _ = first_run
    folder = tune_folder(tmp_path)
    snakemake(folder, *(f"prep/{name}.npz" for name in DATASETS))
    for name in DATASETS:
        path = folder / "prep" / f"{name}.npz"
        raw = load_arrays(path, normalised=False)
        start = raw.split.test_start
        targets, features = raw.raw_targets.copy(), raw.raw_features.copy()
        targets[start:], features[start:] = 1e6, -1e6
        save_arrays(replace(raw, raw_targets=targets, raw_features=features), path)
        assert load_arrays(path).targets[start:].min() > 1e3  # the poison is there to be read
    snakemake(folder, "results/tune/trials.csv")
    assert untimed(trials(folder)) == untimed(first)


def untimed(rows: list[dict]) -> list[dict]:
    """trials.csv's rows without when each trial ran: what a search's result is."""
    return [{key: value for key, value in row.items() if key not in ("started", "seconds")} for row in rows]


def test_two_workers_share_one_study(tmp_path):
    folder = tune_folder(tmp_path, workers=2, trials=6)
    snakemake(folder, "results/tune/trials.csv")
    numbers = {}
    for worker in (0, 1):
        log = (folder / f"logs/tune/worker-{worker}.log").read_text()
        numbers[worker] = re.findall(rf"tune worker {worker}: trial (\d+) \{{", log)
        assert numbers[worker], log
    assert not set(numbers[0]) & set(numbers[1])
    rows = trials(folder)
    finished = [row for row in rows if row["state"] in ("COMPLETE", "PRUNED")]
    assert len(finished) == 6
    assert {row["worker"] for row in finished} == {"0", "1"}
    assert sorted(int(number) for number in numbers[0] + numbers[1]) == sorted(int(row["number"]) for row in finished)


@pytest.mark.parametrize("budget, expected", [(2, lambda peak: peak == 1), (4, lambda peak: peak == 2)])
def test_gpu_mem_bounds_the_trials_at_once(tmp_path, budget, expected):
    """Two workers of gpu_mem 2 each: --resources gpu_mem=2 runs one at a time, 4 both."""
    folder = tune_folder(tmp_path, workers=2, trials=4)
    snakemake(folder, "--until", "preprocess")  # both workers ready at once
    snakemake(folder, "results/tune/trials.csv", "--cores", "4", "--resources", f"gpu_mem={budget}")
    intervals = []
    for row in trials(folder):
        started = datetime.fromisoformat(row["started"]).timestamp()
        intervals.append((started, started + float(row["seconds"])))
    assert expected(most_at_once(intervals)), intervals


def test_a_killed_worker_loses_only_its_running_trial(tmp_path):
    """Killed (SIGKILL, run and job) in its first trial's first epoch: the next run's worker
    tells that trial FAIL, which does not count, and runs the whole budget."""
    folder = tune_folder(tmp_path / "run")
    run, job_pid = start_paused_run(folder, "epoch", "results/tune/trials.csv")
    kill_hard(run, job_pid)
    snakemake(folder, "results/tune/trials.csv")
    rows = trials(folder)
    assert [(row["number"], row["state"], row["note"]) for row in rows[:1]] == [
        ("0", "FAIL", "its worker stopped before it ended")
    ]
    assert [row["number"] for row in rows if row["state"] in ("COMPLETE", "PRUNED")] == ["1", "2", "3"]
    log = (folder / "logs/tune/worker-0.log").read_text()
    assert "trial(s) [0] left running by a stopped worker told FAIL (not counted)" in log


def test_settings_no_fit_can_take_stop_the_search_in_one_line(tmp_path):
    """Windows longer than the datasets: every trial fails; the worker stops after 3 with one
    line, and the run writes none of the fleet's results (it trained no model)."""
    folder = tune_folder(tmp_path, space={"train.seq_len": [5000]})
    result = snakemake(folder, "tune", check=False)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and errors[0].startswith("ERROR: tune: 3 trials in a row failed, the search stops"), errors
    assert sorted(path.name for path in (folder / "results").iterdir()) == ["tune"]


def test_a_datasets_sheets_own_settings_win_over_the_trials_and_the_verdicts(tmp_path):
    """A sheet that sets train.lr for every dataset: each trial's fits take it over the
    trial's lr (every trial scores the same), and so do both arms of the verdict (the chosen
    settings and the defaults fit alike), as a train job takes it over tune.apply's."""
    add_datasets(tmp_path, DATASETS, rows=ROWS)
    (tmp_path / "config").mkdir()
    rows = "".join(f"{name}\t{name}.csv\t0.003\n" for name in DATASETS)
    (tmp_path / "config" / "datasets.tsv").write_text("dataset\tfiles\ttrain.lr\n" + rows)
    write_config(
        tmp_path,
        data_dir="data",
        datasets={"files": "", "sheet": "config/datasets.tsv"},
        tune={**TUNE, "space": {"train.lr": SPACE["train.lr"]}},
    )
    snakemake(tmp_path, "tune")
    rows = trials(tmp_path)
    assert len({row["train.lr"] for row in rows}) == 3
    assert all(row["state"] == "COMPLETE" for row in rows) and len({row["value"] for row in rows}) == 1
    log = (tmp_path / "logs/tune/worker-0.log").read_text()
    assert "settings of its own (datasets sheet) over each trial's: {'train.lr': 0.003}" in log
    skills = json.loads((tmp_path / "results/tune/verdict.json").read_text())["skills"]
    assert len(skills) == 1 and all(entry["chosen"] == entry["defaults"] for entry in skills.values())


@pytest.mark.parametrize(
    ("tune", "line"),
    [
        ({"space": {}}, "config key 'tune.space' = {} is not allowed"),
        (
            {"space": {"train.lr": {"low": 0.1, "high": 0.01}}},
            "config key 'tune.space.train.lr': low 0.1 > high 0.01",
        ),
        ({"space": {"train.lrr": [0.1]}}, "unknown config key 'tune.space.train.lrr'"),
        ({"space": {"model.cell": []}}, "config key 'tune.space.model.cell' = [] is not allowed"),
        ({"trails": 5}, "unknown config key 'tune.trails' (did you mean 'trials'?)"),
    ],
    ids=["empty space", "low above high", "unknown setting", "no choices", "unknown key"],
)
def test_a_bad_tune_value_is_one_line_naming_its_key(tmp_path, tune, line):
    add_datasets(tmp_path, DATASETS[:1], rows=200)
    config = {**TUNE, **tune}
    write_config(tmp_path, data_dir="data", tune=config)
    result = snakemake(tmp_path, "tune", "-n", check=False)
    assert result.returncode == 1
    lines = [text for text in result.stderr.splitlines() if text.strip() and not text.startswith("Using workflow")]
    assert len(lines) == 1 and lines[0].startswith(f"invalid configuration (config.yaml): {line}"), result.stderr


def test_tune_apply_makes_its_settings_the_trainings_params(tmp_path):
    """tune.apply: the models re-train with best.yaml's settings, and back without it (the other
    tune: keys re-train nothing); a file that is not there is one line naming the key."""
    folder = tune_folder(tmp_path)
    target = "models/AAA_1m.pt"
    snakemake(folder, target)
    assert load_checkpoint(folder / target)["model_config"]["hidden_size"] == 8  # the tests' tiny model
    # The search's own settings are no training's params.
    other_search = 'tune={"trials": 9, "seed": 3, "epochs": 4, "workers": 2}'
    assert planned_rules(snakemake(folder, target, "-n", "--config", other_search).stdout) == {}
    (folder / "best.yaml").write_text(yaml.safe_dump({"settings": {"model.hidden_size": 4, "train.lr": 0.002}}))
    write_config(folder, data_dir="data", tune={**TUNE, "apply": "best.yaml"})
    assert planned_rules(snakemake(folder, target, "-n").stdout).get("train") == 1
    snakemake(folder, target)
    checkpoint = load_checkpoint(folder / target)
    assert checkpoint["model_config"]["hidden_size"] == 4 and checkpoint["train_config"]["lr"] == 0.002
    # The model records where its settings came from.
    tuned_from = json.loads((folder / "metrics/AAA_1m.json").read_text())["tuned_from"]
    digest = hashlib.sha256((folder / "best.yaml").read_bytes()).hexdigest()
    assert tuned_from == {
        "file": "best.yaml",
        "sha256": digest,
        "settings": {"model.hidden_size": 4, "train.lr": 0.002},
    }
    assert planned_rules(snakemake(folder, target, "-n").stdout) == {}
    write_config(folder, data_dir="data", tune={**TUNE, "apply": ""})
    assert planned_rules(snakemake(folder, target, "-n").stdout).get("train") == 1
    write_config(folder, data_dir="data", tune={**TUNE, "apply": "missing.yaml"})
    result = snakemake(folder, target, "-n", check=False)
    lines = [text for text in result.stderr.splitlines() if text.strip() and not text.startswith("Using workflow")]
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert lines[0].startswith("invalid configuration: config key 'tune.apply' = 'missing.yaml': cannot read it")
