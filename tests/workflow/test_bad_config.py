"""Bad settings stop the real workflow before any job runs, with the key and what it allows."""

from __future__ import annotations

import csv

import pytest
from conftest import add_datasets, pending_jobs, snakemake, trained_folder, write_config

CASES = {
    "misspelled key": (
        {"train": {"lrr": 0.01}},
        [],
        "unknown config key 'train.lrr' (did you mean 'lr'?); allowed under 'train': seq_len, horizon, horizons, quantiles, batch_size",
    ),
    "misspelled section": ({"modle": {"cell": "gru"}}, [], "unknown config key 'modle' (did you mean 'model'?)"),
    "wrong type": (
        {"train": {"epochs": "five"}},
        [],
        "config key 'train.epochs' = 'five' is not allowed; allowed: an integer >= 1",
    ),
    "wrong type on the command line": (
        {},
        ["--config", 'train={"batch_size": "big"}'],
        "config key 'train.batch_size' = 'big' is not allowed; allowed: an integer >= 1",
    ),
    "negative learning rate": (
        {"train": {"lr": -0.1}},
        [],
        "config key 'train.lr' = -0.1 is not allowed; allowed: a number > 0 (Adam learning rate)",
    ),
    "value not in the list": (
        {"model": {"cell": "rnn"}},
        [],
        "config key 'model.cell' = 'rnn' is not allowed; allowed: one of lstm, gru",
    ),
    "unknown feature": (
        {"features": ["ohlc_returns", "vwap"]},
        [],
        "config key 'features.1' = 'vwap' is not allowed; allowed: a string matching ^(ohlc_returns|log_volume|",
    ),
    "unknown target": (
        {"target": "price"},
        [],
        "config key 'target' = 'price' is not allowed; allowed: one of log_return, abs_log_return, "
        "realised_volatility, direction",
    ),
    "quantiles of a classification target": (
        {"target": "direction", "train": {"quantiles": [0.1, 0.9]}},
        [],
        "config key 'train.quantiles' = [0.1, 0.9]: target direction is a classification",
    ),
    "quantiles of a classification target on the command line": (
        {"target": "direction"},
        ["--config", 'train={"quantiles": [0.1, 0.9]}'],
        "config key 'train.quantiles' = [0.1, 0.9]: target direction is a classification",
    ),
    "a horizon given twice": (
        {"train": {"horizons": [1, 5, 5]}},
        [],
        "config key 'train.horizons' = [1, 5, 5] is not allowed",
    ),
    "key of the built-in model misspelled": (
        {"model": {"hiden_size": 8}},
        [],
        "unknown config key 'model.hiden_size' (did you mean 'hidden_size'?); allowed under 'model': builder, cell",
    ),
    "learning rate NaN": (
        {"train": {"lr": float("nan")}},
        [],
        "config key 'train.lr' = nan is not allowed; allowed: a finite number > 0 (Adam learning rate)",
    ),
    "learning rate NaN on the command line": (
        {},
        ["--config", 'train={"lr": ".nan"}'],
        "config key 'train.lr' = nan is not allowed; allowed: a finite number > 0 (Adam learning rate)",
    ),
    "learning rate infinite": (
        {"train": {"lr": float("inf")}},
        [],
        "config key 'train.lr' = inf is not allowed; allowed: a finite number > 0 (Adam learning rate)",
    ),
    "learning rate infinite on the command line": (
        {},
        ["--config", 'train={"lr": ".inf"}'],
        "config key 'train.lr' = inf is not allowed; allowed: a finite number > 0 (Adam learning rate)",
    ),
    "misspelled time zone": (
        {"format": {"timezone": "Europe/Berln"}},
        [],
        "config key 'format.timezone' = 'Europe/Berln' is not allowed (did you mean 'Europe/Berlin'?); allowed: auto",
    ),
    "unknown time zone": (
        {"format": {"timezone": "Mars/Olympus"}},
        [],
        "config key 'format.timezone' = 'Mars/Olympus' is not allowed; allowed: auto or a time zone name",
    ),
    "unknown time zone on the command line": (
        {},
        ["--config", 'format={"timezone": "Mars/Olympus"}'],
        "config key 'format.timezone' = 'Mars/Olympus' is not allowed; allowed: auto or a time zone name",
    ),
    "empty models folder": (
        {"paths": {"models": ""}},
        [],
        "config key 'paths.models' = '' is not allowed; allowed: a string, not empty",
    ),
    "empty models folder on the command line": (
        {},
        ["--config", 'paths={"models": ""}'],
        "config key 'paths.models' = '' is not allowed; allowed: a string, not empty",
    ),
    "models folder naming a file": (
        {"paths": {"models": "data/A_1m.csv"}},
        [],
        "config key 'paths.models' = 'data/A_1m.csv' is a file, not a folder; allowed: a folder",
    ),
    "models folder naming a file, in a dry-run": (
        {"paths": {"models": "data/A_1m.csv"}},
        ["-n"],
        "config key 'paths.models' = 'data/A_1m.csv' is a file, not a folder; allowed: a folder",
    ),
    "features as one string": (
        {"features": "ohlc_returns"},
        [],
        "config key 'features' = 'ohlc_returns' is not allowed; allowed: a list of a built-in feature (ohlc_returns",
    ),
    "missing model file": (
        {"model": {"builder": "my_model.py:build"}},
        [],
        "my_model.py: no such file (config key 'model.builder' = 'my_model.py:build'; paths are relative to",
    ),
    "missing data folder": (
        {"data_dir": "no_such_folder"},
        [],
        "config key 'data_dir' = 'no_such_folder' is not a folder",
    ),
    "pattern matching nothing": (
        {"pattern": "*_1h.csv"},
        [],
        "config key 'pattern' = '*_1h.csv' matches no file in data_dir 'data' (it holds A_1m.csv)",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_setting_fails_before_any_job_naming_the_key(tmp_path, case):
    overrides, arguments, message = CASES[case]
    add_datasets(tmp_path, ["A_1m"])
    write_config(tmp_path, **{"data_dir": "data", **overrides})
    result = snakemake(tmp_path, *arguments, check=False)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert message in output, output
    assert "Building DAG" not in output
    # The line alone, not inside Snakemake's "WorkflowError in file .../rules/config.smk, line 53:".
    assert "WorkflowError" not in output and ".smk" not in output, output
    assert not (tmp_path / "logs").exists() and not (tmp_path / "prep").exists()


def test_a_project_folders_bad_setting_is_one_line_naming_its_config_file(tmp_path):
    add_datasets(tmp_path, ["A_1m"])
    write_config(tmp_path, data_dir="data", train={"lrr": 0.01})
    (tmp_path / "config").mkdir()
    (tmp_path / "config.yaml").rename(tmp_path / "config" / "config.yaml")
    result = snakemake(tmp_path, "-n", check=False)
    assert result.returncode == 1
    lines = (result.stdout + result.stderr).strip().splitlines()
    lines = [line for line in lines if not line.startswith("Using workflow specific profile")]  # Snakemake's own
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        "invalid configuration (config/config.yaml): unknown config key 'train.lrr' (did you mean 'lr'?); allowed "
    )
    command_line = snakemake(tmp_path, "-n", "--config", 'train={"epochs": 0}', check=False).stderr.splitlines()
    assert (
        "invalid configuration (config/config.yaml or --config): config key 'train.epochs' = 0 is not allowed; "
        + ("allowed: an integer >= 1")
        in command_line
    ), command_line


def test_an_etc_gmt_zone_gets_a_note_that_its_sign_is_inverted(tmp_path):
    add_datasets(tmp_path, ["A_1m"])
    write_config(tmp_path, data_dir="data", format={"timezone": "Etc/GMT-2"})
    result = snakemake(tmp_path, "-n")
    assert (
        "rnnfleet: note: format.timezone 'Etc/GMT-2' is UTC+2, 2 hour(s) ahead of UTC: the Etc/GMT zones invert "
        "the sign (POSIX)"
    ) in result.stderr, result.stderr


def test_every_bad_setting_is_reported_at_once(tmp_path):
    add_datasets(tmp_path, ["A_1m"])
    write_config(tmp_path, data_dir="data", train={"lr": 0, "epochs": 0})
    result = snakemake(tmp_path, check=False)
    assert "config key 'train.lr' = 0 is not allowed" in result.stderr
    assert "config key 'train.epochs' = 0 is not allowed" in result.stderr


def test_seq_len_longer_than_every_dataset_fails_each_preprocess_naming_the_key(tmp_path):
    # Checked per dataset (its preprocess job counts its rows), not at parse time: counting
    # the rows of 10,000 files before the first job would cost more than the jobs' own reads.
    add_datasets(tmp_path, ["A_1m", "B_1m"])
    write_config(tmp_path, data_dir="data", train={"seq_len": 5000})
    result = snakemake(tmp_path, check=False)
    assert result.returncode != 0
    assert not (tmp_path / "logs" / "train").exists()  # no training started
    with open(tmp_path / "results" / "metrics.csv") as table:
        rows = list(csv.DictReader(table))
    assert [row["status"] for row in rows] == ["data error", "data error"]  # the same until changed
    for row in rows:
        assert "too few rows for one training window" in row["error"] and "train.seq_len=5000" in row["error"]
    assert "2 of 2 datasets are not done" in result.stderr


def test_cuda_asked_for_where_there_is_none_is_a_user_error_naming_the_key(monkeypatch):
    import torch

    from rnnfleet.errors import UserError
    from rnnfleet.runner.device import choose_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match=r"config key 'train.device' = 'cuda:1' cannot run on this machine \("):
        choose_device("cuda:1")


def test_settings_this_machine_cannot_run_stop_the_run_before_any_job_and_keep_the_metrics(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: train.device: cuda and train.amp: fp16 run here")
    trained_folder(tmp_path, ["A_1m"])
    metrics = (tmp_path / "metrics/A_1m.json").read_bytes()
    add_datasets(tmp_path, ["B_1m"])  # a training to run with either setting
    cases = {
        'train={"device": "cuda"}': "config key 'train.device' = 'cuda' cannot run on this machine (",
        'train={"amp": "fp16"}': "config key 'train.amp' = 'fp16' cannot run on this machine: float16 autocast needs "
        "a CUDA GPU, and training would run on the CPU (no CUDA GPU here); set train.amp: auto, off or bf16; "
        "nothing was run",
    }
    for setting, line in cases.items():
        result = snakemake(tmp_path, "--config", setting, check=False)
        assert result.returncode != 0 and line in result.stderr, result.stderr[-2000:]
        assert "Traceback" not in result.stderr and "rule train:" not in result.stderr
        assert (tmp_path / "metrics/A_1m.json").read_bytes() == metrics
    assert list(pending_jobs(snakemake(tmp_path, "-n").stdout, "train")) == ["B_1m"]  # A_1m stays trained


def test_a_time_zone_only_pandas_knows_is_allowed():
    # Not in the IANA database zoneinfo reads, yet a zone pandas reads times in (pytz's name).
    import zoneinfo

    from rnnfleet.workflow.config_check import timezone_problems

    with pytest.raises(zoneinfo.ZoneInfoNotFoundError):
        zoneinfo.ZoneInfo("dateutil/UTC")
    assert timezone_problems({"format": {"timezone": "dateutil/UTC"}}) == []
    assert timezone_problems({"format": {"timezone": "Europe/Athens"}}) == []


def test_a_forecast_of_an_unknown_dataset_is_one_line_before_any_job(tmp_path):
    add_datasets(tmp_path, ["A_1m"])
    write_config(tmp_path, data_dir="data")
    for arguments in (["predictions/NOPE_1m.csv"], ["-n", "models/NOPE_1m.pt"]):
        result = snakemake(tmp_path, *arguments, check=False)
        output = result.stdout + result.stderr
        assert result.returncode != 0
        assert (
            f"{arguments[-1]}: no dataset 'NOPE_1m': no file in data_dir 'data' matching '*1m*' gives that name; "
            "nothing was run"
        ) in output, output
        assert "KeyError" not in output and "InputFunctionException" not in output
        assert not (tmp_path / "logs").exists() and not (tmp_path / "prep").exists()


def test_a_yaml_error_names_the_file_line_and_column(tmp_path):
    add_datasets(tmp_path, ["A_1m"])
    (tmp_path / "config.yaml").write_text("data_dir: data\ntrain: {epochs: 2\nmodel:\n  cell: lstm\n")
    result = snakemake(tmp_path, "-n", check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "config.yaml: not valid YAML at line 3, column 6: expected ',' or '}', but got ':'" in output, output
