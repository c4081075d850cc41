"""The settings search's parts in this process (rnnfleet.tune): the space's problems, the
sample and held-out datasets, the arrays cut at their validation end, the budget across
workers and runs, a dead worker's trial, and the verdict's words."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest

from rnnfleet.errors import UserError
from rnnfleet.scores.start_verdicts import fleet_start_verdict, paired_verdict
from rnnfleet.tune.heldout import verdict_line
from rnnfleet.tune.search import (
    Budget,
    fail_abandoned_trials,
    open_study,
    run_worker,
    validation_only,
    validation_ratios,
)
from rnnfleet.tune.space import holdout_datasets, own_settings, sample_datasets, space_problems

RNN = {"builder": "rnn"}


@pytest.mark.parametrize(
    ("space", "problem"),
    [
        ({}, "config key 'tune.space' = {} is not allowed"),
        ({"train.lr": {"low": 2, "high": 1}}, "config key 'tune.space.train.lr': low 2 > high 1"),
        ({"train.lr": {"low": 0, "high": 1, "log": True}}, "config key 'tune.space.train.lr': low 0 with log: true"),
        ({"train.epochs": [1, 2]}, "unknown config key 'tune.space.train.epochs'"),
        ({"model.width": [1, 2]}, "unknown config key 'tune.space.model.width'"),
        ({"model.cell": []}, "config key 'tune.space.model.cell' = [] is not allowed"),
        ({"train.lr": {"low": 1e-4}}, "config key 'tune.space.train.lr' = {'low': 0.0001} is not allowed"),
    ],
)
def test_a_bad_space_is_one_line_naming_its_key(space, problem):
    problems = space_problems(space, RNN)
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_a_good_space_has_no_problem_and_another_builder_takes_its_own_keys():
    space = {"train.lr": {"low": 1e-4, "high": 1e-2, "log": True}, "model.hidden_size": [8, 16]}
    assert space_problems(space, RNN) == []
    assert space_problems({"model.width": [1, 2]}, {"builder": "mine.py:build"}) == []
    assert space_problems({"model.builder": ["rnn"]}, {"builder": "mine.py:build"}) != []


def test_a_datasets_own_settings_are_those_a_fit_learns_from():
    base = {"train": {"lr": 0.001, "seq_len": 60}, "model": {"builder": "rnn"}}
    overrides = {
        "A": {"train.lr": 0.01, "model.hidden_size": 8, "target": "direction", "train.init": "fleet"},
        "B": {"format.timezone": "Europe/Athens"},
        "C": {"train.seq_len": 30},
    }
    assert own_settings(overrides, base, ["A", "B", "D"]) == {"A": {"train.lr": 0.01, "model.hidden_size": 8}}
    assert own_settings(overrides, base, ["C"]) == {"C": {"train.seq_len": 30}}


def test_the_sample_and_the_held_out_datasets_are_disjoint_and_seeded():
    names = [f"D{number}" for number in range(10)]
    sample = sample_datasets(names, 3, 0, [])
    assert sample == sample_datasets(list(reversed(names)), 3, 0, [])  # not the order found
    assert len(sample) == 3 and sample != sample_datasets(names, 3, 1, [])
    held_out = holdout_datasets(names, sample, 4, 0)
    assert len(held_out) == 4 and not set(held_out) & set(sample)
    assert holdout_datasets(names, sample, 100, 0) == sorted(set(names) - set(sample))
    assert sample_datasets(names, 3, 0, ["D7", "D2"]) == ["D2", "D7"]


def test_the_cut_arrays_hold_no_row_of_the_test_period(tmp_path):
    from conftest import write_synthetic_csv

    from rnnfleet.prep.prepare import prepare_dataset

    write_synthetic_csv(tmp_path / "X_1m.csv", 600, 1)
    arrays, _ = prepare_dataset([str(tmp_path / "X_1m.csv")], seq_len=16, horizon=1, val_fraction=0.2)
    split = arrays.split
    assert split.test_start < arrays.rows
    cut = validation_only(arrays)
    assert cut.rows == split.val_end and cut.split.test_start == cut.rows
    assert np.array_equal(cut.targets, arrays.targets[: split.val_end])
    assert len(cut.latest_features) == 0 and len(cut.raw_targets) == 0


def cut_arrays(tmp_path, seeds: range) -> dict:
    from conftest import write_synthetic_csv

    from rnnfleet.prep.prepare import prepare_dataset

    datasets = {}
    for seed in seeds:
        write_synthetic_csv(tmp_path / f"X{seed}_1m.csv", 500, seed)
        arrays, _ = prepare_dataset([str(tmp_path / f"X{seed}_1m.csv")], seq_len=12, horizon=1, val_fraction=0.2)
        datasets[f"X{seed}"] = validation_only(arrays)
    return datasets


# Dropout draws from torch's global random state: fits run in turns must each keep their own.
TURNS_MODEL = {"builder": "rnn", "cell": "lstm", "hidden_size": 8, "num_layers": 2, "dropout": 0.5}
TURNS_TRAIN = {"seq_len": 12, "batch_size": 32, "lr": 0.01, "epochs": 4, "patience": 1, "seed": 3, "amp": "off"}


def test_fits_run_in_turns_are_each_the_fit_it_would_be_alone(tmp_path):
    import torch

    from rnnfleet.train.evaluate import train_and_evaluate
    from rnnfleet.train.loop import LoopSettings

    datasets = cut_arrays(tmp_path, range(3))
    reported = []
    fits = {name: (arrays, TURNS_TRAIN, TURNS_MODEL) for name, arrays in datasets.items()}
    ratios = validation_ratios(fits, torch.device("cpu"), lambda epoch, mean: reported.append((epoch, mean)))
    for name, arrays in datasets.items():
        alone = train_and_evaluate(arrays, dict(TURNS_MODEL), LoopSettings.of(TURNS_TRAIN), torch.device("cpu"))
        assert ratios[name] == alone.evaluated.val_loss / alone.evaluated.naive_val_loss, name
    assert reported and [epoch for epoch, _ in reported] == list(range(1, len(reported) + 1))
    assert all(0 < mean < 2 for _, mean in reported)


def test_a_trial_whose_fits_have_all_ended_is_not_reported_again(tmp_path):
    """One epoch: the round that ends every fit is the last, and nothing may prune it then."""
    import torch

    datasets = cut_arrays(tmp_path, range(2))
    reported = []
    fits = {name: (arrays, TURNS_TRAIN | {"epochs": 1}, TURNS_MODEL) for name, arrays in datasets.items()}
    ratios = validation_ratios(fits, torch.device("cpu"), lambda epoch, mean: reported.append(epoch))
    assert reported == [] and len(ratios) == 2


def test_a_dataset_without_a_baseline_to_score_against_fails_the_trial_naming_it(tmp_path):
    """Targets all zero: the baseline (a zero return) is never wrong; ValueError (the worker
    tells the trial FAIL with it) before anything trains."""
    import dataclasses

    import torch

    (name, arrays), *_ = cut_arrays(tmp_path, range(1)).items()
    flat = dataclasses.replace(arrays, targets=np.zeros_like(arrays.targets))
    with pytest.raises(ValueError, match=f"^{name}: the baseline's validation loss is 0.0: nothing to score against"):
        validation_ratios({name: (flat, TURNS_TRAIN, TURNS_MODEL)}, torch.device("cpu"))


def test_a_report_that_raises_stops_every_fit_of_the_trial(tmp_path):
    import torch

    def prune_after_the_second(epoch, mean):
        if epoch == 2:
            raise optuna.TrialPruned()

    calls = []
    with pytest.raises(optuna.TrialPruned):
        validation_ratios(
            {
                name: (arrays, TURNS_TRAIN | {"patience": 9}, TURNS_MODEL)
                for name, arrays in cut_arrays(tmp_path, range(2)).items()
            },
            torch.device("cpu"),
            lambda epoch, mean: (calls.append(epoch), prune_after_the_second(epoch, mean)),
        )
    assert calls == [1, 2]


def journal_study(tmp_path, name="s"):
    return open_study(str(tmp_path / "journal.log"), name)


def test_a_losing_trial_stops_after_its_first_epoch_on_every_dataset(tmp_path):
    """Successive halving on the trial's mean after each round: the second trial, worse than
    the first after epoch 1 (a learning rate that cannot move the weights), is pruned there."""
    import torch

    from rnnfleet.prep.prepare import prepare_dataset
    from rnnfleet.synthetic import write_bars_of_returns
    from rnnfleet.tune.search import make_objective

    datasets = {}
    for seed in range(2):
        rng = np.random.default_rng(seed)
        returns = np.zeros(1500)
        for t in range(1, len(returns)):  # half of each return carries over: something to learn
            returns[t] = 0.5 * returns[t - 1] + rng.normal(0, 1e-3)
        write_bars_of_returns(tmp_path / f"M{seed}_1m.csv", returns, rng)
        arrays, _ = prepare_dataset([str(tmp_path / f"M{seed}_1m.csv")], seq_len=12, horizon=1, val_fraction=0.2)
        datasets[f"M{seed}"] = validation_only(arrays)
    lines = []
    objective = make_objective(datasets, TURNS_TRAIN, TURNS_MODEL, {}, 3, torch.device("cpu"), lines.append)
    study = journal_study(tmp_path)
    for lr in (0.01, 1e-9):
        study.enqueue_trial({"train.lr": lr})
    run_worker(study, 0, {"train.lr": [0.01, 1e-9]}, objective, Budget(2, None), lines.append)
    first, second = study.get_trials()
    assert (first.state.name, second.state.name) == ("COMPLETE", "PRUNED"), lines
    assert list(second.intermediate_values) == [1]
    assert not [line for line in lines if line.startswith("  trial 1: M")]  # no dataset of it trained to the end


def test_the_budget_counts_the_finished_trials_of_earlier_runs(tmp_path):
    study = journal_study(tmp_path)
    space = {"train.lr": {"low": 0.1, "high": 1.0}}
    first = run_worker(study, 0, space, lambda trial, flat: flat["train.lr"], Budget(2, None), lambda line: None)
    again = run_worker(
        journal_study(tmp_path), 0, space, lambda trial, flat: flat["train.lr"], Budget(3, None), lambda line: None
    )
    assert [trial["number"] for trial in first] == [0, 1] and [trial["number"] for trial in again] == [2]
    assert run_worker(journal_study(tmp_path), 0, space, lambda *_: 0.0, Budget(3, None), lambda line: None) == []


def test_the_minutes_stop_a_worker_after_its_running_trial(tmp_path):
    import time

    def slow(trial, flat):
        time.sleep(0.1)
        return 1.0

    lines = []
    done = run_worker(journal_study(tmp_path), 0, {"model.cell": ["lstm"]}, slow, Budget(100, 0.001), lines.append)
    assert len(done) == 1 and "tune worker 0: tune.minutes (0.001) spent" in lines


def test_a_dead_workers_trial_is_failed_by_its_successor_and_not_counted(tmp_path):
    study = journal_study(tmp_path)
    for worker in (0, 1, 2):  # each dies in its trial
        study.ask().set_user_attr("worker", worker)
    assert fail_abandoned_trials(journal_study(tmp_path), 1, workers=2) == [1]
    assert fail_abandoned_trials(journal_study(tmp_path), 0, workers=2) == [0, 2]  # 2: no such worker now
    states = [trial.state for trial in journal_study(tmp_path).get_trials()]
    assert states == [optuna.trial.TrialState.FAIL] * 3
    done = run_worker(
        journal_study(tmp_path), 0, {"model.cell": ["lstm"]}, lambda *_: 1.0, Budget(1, None), lambda line: None
    )
    assert [trial["number"] for trial in done] == [3]


def test_settings_that_fail_every_fit_stop_the_worker(tmp_path):
    def failing(trial, flat):
        raise ValueError("no validation windows")

    with pytest.raises(UserError, match="3 trials in a row failed, the search stops; the last: no validation windows"):
        run_worker(journal_study(tmp_path), 0, {"model.cell": ["lstm"]}, failing, Budget(10, None), lambda line: None)


def test_the_paired_verdict_names_its_arms_and_the_fleet_start_words_are_unchanged():
    differences = [0.01, 0.02, 0.03, 0.01, 0.02, 0.04, 0.01]
    assert fleet_start_verdict(differences).words.startswith("the fleet's start beat scratch: better on 7 of 7")
    words = paired_verdict([-value for value in differences], "A", "B", "keep B").words
    assert words.startswith("A was worse than B: better on 0 of 7 datasets") and words.endswith(": keep B")
    assert verdict_line({}) == "tune: no held-out dataset (every dataset is in the sample): no verdict"
    line = verdict_line({f"D{n}": {"chosen": 0.1, "defaults": 0.1 - n / 100} for n in range(1, 8)})
    assert line.startswith("tune (held-out datasets): the search's choice beat the defaults: better on 7 of 7")
    assert not math.isnan(paired_verdict([0.1, math.nan], "A", "B", "keep B").mean)


@pytest.mark.slow  # matplotlib and fANOVA's forest: seconds
def test_the_results_hold_every_trial_and_the_best_complete_one(tmp_path):
    import csv

    import yaml

    from rnnfleet.tune.results import write_results

    study = journal_study(tmp_path)
    space = {"train.lr": {"low": 0.001, "high": 0.1, "log": True}, "model.hidden_size": [4, 8]}
    run_worker(
        study, 0, space, lambda trial, flat: flat["train.lr"] * flat["model.hidden_size"], Budget(5, None), print
    )
    study.ask().set_user_attr("worker", 1)  # a dead worker's, still RUNNING
    paths = {name: str(tmp_path / f"{name}.out") for name in ("trials", "best", "page")}
    record = write_results(study, space, {"sample": ["A"]}, paths)
    with open(paths["trials"]) as handle:
        rows = list(csv.DictReader(handle))
    assert [row["state"] for row in rows] == ["COMPLETE"] * 5 + ["RUNNING"]
    best = min(rows[:5], key=lambda row: float(row["value"]))
    assert yaml.safe_load(open(paths["best"])) == record
    assert record["settings"] == {
        "train.lr": float(best["train.lr"]),
        "model.hidden_size": int(best["model.hidden_size"]),
    }
    assert record["evidence"]["complete_trials"] == 5 and record["evidence"]["trials"] == 6
    page = open(paths["page"]).read()
    assert page.count("data:image/png;base64,") == 3 and "Setting importances" in page


def test_the_searchs_results_load_neither_torch_nor_the_train_path():
    """The tune_report job reads the study: torch and the training code are the workers'."""
    import subprocess
    import sys
    from pathlib import Path

    scripts = Path(__file__).resolve().parents[2] / "scripts"
    probe = "import sys, rnnfleet.tune.results; print(sorted(m for m in ('torch', 'rnnfleet.train.loop') if m in sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env={"PYTHONPATH": str(scripts)}
    )
    assert loaded.stdout.strip() == "[]", loaded.stderr
