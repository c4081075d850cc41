"""The datasets sheet reader (rnnfleet.workflow.dataset_sheet): rows of dataset, files and
dotted-key overrides become datasets, their files and their own configurations; every bad row
is one line naming the sheet, the line and the problem."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from snakemake.utils import validate

from rnnfleet.errors import UserError
from rnnfleet.synthetic import write_synthetic_csv
from rnnfleet.workflow.dataset_sheet import read_dataset_sheet

CONFIG_SCHEMA_PATH = REPO / "schemas" / "config.schema.yaml"
CONFIG_SCHEMA = yaml.safe_load(CONFIG_SCHEMA_PATH.read_text())
ROW_SCHEMA = yaml.safe_load((REPO / "schemas" / "datasets.schema.yaml").read_text())


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with data/ETH/ETH-1.csv, data/ETH/ETH-2.csv and data/EUR_1m.csv."""
    monkeypatch.chdir(tmp_path)
    for seed, name in enumerate(["ETH/ETH-1.csv", "ETH/ETH-2.csv", "EUR_1m.csv"]):
        write_synthetic_csv(tmp_path / "data" / name, 30, seed)
    return tmp_path


def default_config(**overrides) -> dict:
    """The configuration as the workflow holds it: schema defaults, the rnn model's keys filled in."""
    config = dict(overrides)
    validate(config, schema=str(CONFIG_SCHEMA_PATH))
    model = {"builder": "rnn", "cell": "lstm", "hidden_size": 64, "num_layers": 2, "dropout": 0.1}
    config["model"] = {**model, **config.get("model", {})}
    return config


def read(text: str, config: dict | None = None, name: str = "datasets.tsv"):
    Path(name).write_text(text)
    return read_dataset_sheet(name, "data", config or default_config(), CONFIG_SCHEMA, ROW_SCHEMA)


def problem_of(text: str, config: dict | None = None) -> str:
    with pytest.raises(UserError) as raised:
        read(text, config)
    return str(raised.value)


def test_rows_give_datasets_their_files_and_their_own_typed_settings(folder):
    sheet = read(
        "dataset\tfiles\tformat.timezone\ttarget\tmodel.hidden_size\ttrain.lr\n"
        "ETH\tETH/ETH-1.csv\tEurope/Athens\t\t16\t\n"
        "ETH\tETH/ETH-2.csv\t\t\t\t0.01\n"
        "EUR\tEUR_1m.csv\t\tdirection\t\t\n"
    )
    assert sheet.found.files == {
        "ETH": [os.path.join("data", "ETH", "ETH-1.csv"), os.path.join("data", "ETH", "ETH-2.csv")],
        "EUR": [os.path.join("data", "EUR_1m.csv")],
    }
    eth, eur = sheet.configs["ETH"], sheet.configs["EUR"]
    assert (eth["format"]["timezone"], eth["target"], eth["model"]["hidden_size"], eth["train"]["lr"]) == (
        "Europe/Athens",
        "log_return",
        16,
        0.01,
    )
    assert (eur["format"]["timezone"], eur["target"], eur["model"]["hidden_size"]) == ("auto", "direction", 64)
    assert eth["model"]["cell"] == "lstm" and eth["train"]["epochs"] == 20  # the rest is the config's


def test_a_glob_takes_the_bar_files_it_matches_and_a_csv_sheet_reads_the_same(folder):
    (folder / "data" / "ETH" / "notes.md").write_text("not bars\n")
    sheet = read("dataset,files\n# a comment line\n\nETH,ETH/*\n", name="datasets.csv")
    assert sheet.found.files == {"ETH": sorted(str(path) for path in Path("data/ETH").glob("ETH-*.csv"))}


def test_datasets_without_overrides_get_no_configuration_and_equal_overrides_share_one(folder):
    write_synthetic_csv(folder / "data" / "BTC_1m.csv", 30, 7)
    sheet = read("dataset\tfiles\ttarget\nETH\tETH/*.csv\tdirection\nEUR\tEUR_1m.csv\tdirection\nBTC\tBTC_1m.csv\t\n")
    assert set(sheet.configs) == {"ETH", "EUR"}
    assert sheet.configs["ETH"] is sheet.configs["EUR"]


def test_the_fingerprint_changes_when_a_file_is_replaced_by_one_with_an_older_time(folder):
    before = read("dataset\tfiles\nEUR\tEUR_1m.csv\n").found.fingerprints["EUR"]
    path = folder / "data" / "EUR_1m.csv"
    status = path.stat()
    write_synthetic_csv(path, 31, 99)
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns - 10**9))
    assert read("dataset\tfiles\nEUR\tEUR_1m.csv\n").found.fingerprints["EUR"] != before


def test_a_checksum_file_beside_a_data_file_is_found(folder):
    (folder / "data" / "EUR_1m.csv.CHECKSUM").write_text("0" * 64 + "  EUR_1m.csv\n")
    sheet = read("dataset\tfiles\nEUR\tEUR_1m.csv\nETH\tETH/*.csv\n")
    assert sheet.found.checksummed == {os.path.join("data", "EUR_1m.csv")}


BAD_SHEETS = {
    "a missing file": (
        "dataset\tfiles\nEUR\tEUR_1m.csv\n\nETH\tETH/ETH-3.csv\n",
        "datasets sheet 'datasets.tsv' line 4 (dataset ETH): files 'ETH/ETH-3.csv': no such file in data_dir 'data'",
    ),
    "a glob matching nothing": (
        "dataset\tfiles\nETH\tETH/*.parquet\n",
        "datasets sheet 'datasets.tsv' line 2 (dataset ETH): files 'ETH/*.parquet' matches no bar file under "
        "data_dir 'data'",
    ),
    "a folder": (
        "dataset\tfiles\nETH\tETH\n",
        "datasets sheet 'datasets.tsv' line 2 (dataset ETH): files 'ETH' is a folder; allowed: a file, or a glob "
        "such as 'ETH/*.csv'",
    ),
    "an unknown key": (
        "dataset\tfiles\tformat.timezon\nETH\tETH/*.csv\tEurope/Athens\n",
        "datasets sheet 'datasets.tsv' line 1: unknown column 'format.timezon' (did you mean 'format.timezone'?)",
    ),
    "an unknown section": (
        "dataset\tfiles\tpaths.models\nETH\tETH/*.csv\tother\n",
        "datasets sheet 'datasets.tsv' line 1: unknown column 'paths.models'",
    ),
    "a run-wide key": (
        "dataset\tfiles\ttrain.threads\nETH\tETH/*.csv\t4\n",
        "datasets sheet 'datasets.tsv' line 1: column 'train.threads' is a setting of the whole run",
    ),
    "the model builder": (
        "dataset\tfiles\tmodel.builder\nETH\tETH/*.csv\tmine.py:build\n",
        "datasets sheet 'datasets.tsv' line 1: column 'model.builder' is a setting of the whole run",
    ),
    "an unknown time zone": (
        "dataset\tfiles\tformat.timezone\nEUR\tEUR_1m.csv\t\nETH\tETH/*.csv\tMars/Olympus\n",
        "datasets sheet 'datasets.tsv' line 3 (dataset ETH): config key 'format.timezone' = 'Mars/Olympus' is not "
        "allowed; allowed: auto or a time zone name",
    ),
    "a value of the wrong type": (
        "dataset\tfiles\ttrain.epochs\nETH\tETH/*.csv\tmany\n",
        "datasets sheet 'datasets.tsv' line 2 (dataset ETH): config key 'train.epochs' = 'many' is not allowed; "
        "allowed: an integer >= 1",
    ),
    "a target not in the list": (
        "dataset\tfiles\ttarget\nETH\tETH/*.csv\tprice\n",
        "datasets sheet 'datasets.tsv' line 2 (dataset ETH): config key 'target' = 'price' is not allowed",
    ),
    "two values for one dataset": (
        "dataset\tfiles\ttarget\nETH\tETH/ETH-1.csv\tdirection\nETH\tETH/ETH-2.csv\tlog_return\n",
        "datasets sheet 'datasets.tsv' line 3 (dataset ETH): target = 'log_return' differs from 'direction' on line 2",
    ),
    "a file of two datasets": (
        "dataset\tfiles\nETH\tETH/*.csv\nETH2\tETH/ETH-2.csv\n",
        f"datasets sheet 'datasets.tsv' line 3 (dataset ETH2): {os.path.join('data', 'ETH', 'ETH-2.csv')!r} is also "
        "a file of dataset ETH (line 2)",
    ),
    "a bad dataset name": (
        "dataset\tfiles\n-ETH\tETH/*.csv\n",
        "datasets sheet 'datasets.tsv' line 2: column 'dataset' = '-ETH' is not allowed",
    ),
    "an empty files cell": (
        "dataset\tfiles\nETH\t\n",
        "datasets sheet 'datasets.tsv' line 2: column 'files' = '' is not allowed",
    ),
    "no files column": (
        "dataset\tpath\nETH\tETH/*.csv\n",
        "datasets sheet 'datasets.tsv' line 1: the header has no column 'files'",
    ),
    "too many cells": (
        "dataset\tfiles\nETH\tETH/*.csv\textra\n",
        "datasets sheet 'datasets.tsv' line 2: has 3 cells, the header 2",
    ),
}


@pytest.mark.parametrize("case", list(BAD_SHEETS))
def test_a_bad_row_is_one_line_naming_the_sheet_line_and_problem(folder, case):
    text, expected = BAD_SHEETS[case]
    problem = problem_of(text)
    assert problem.startswith(expected), problem
    assert "\n" not in problem


def test_every_bad_row_is_reported_at_once(folder):
    problem = problem_of("dataset\tfiles\nETH\tETH/none.csv\nEUR\tnone.csv\n")
    assert [line.split(":")[0] for line in problem.splitlines()] == [
        "datasets sheet 'datasets.tsv' line 2 (dataset ETH)",
        "datasets sheet 'datasets.tsv' line 3 (dataset EUR)",
    ]


def test_a_missing_sheet_names_the_config_key(folder):
    with pytest.raises(UserError, match="^config key 'datasets.sheet' = 'none.tsv': no such file"):
        read_dataset_sheet("none.tsv", "data", default_config(), CONFIG_SCHEMA, ROW_SCHEMA)


def test_another_builder_takes_model_keys_its_function_declares(folder):
    config = default_config()
    config["model"] = {"builder": "my_model.py:build"}
    sheet = read("dataset\tfiles\tmodel.width\nETH\tETH/*.csv\t32\n", config)
    assert sheet.configs["ETH"]["model"] == {"builder": "my_model.py:build", "width": 32}


def test_the_sheet_schema_allows_the_columns_of_every_section_the_sheet_reads():
    from rnnfleet.workflow.dataset_sheet import SECTIONS, TOP_LEVEL_KEYS

    pattern = yaml.safe_load((REPO / "schemas" / "datasets.schema.yaml").read_text())["propertyNames"]["pattern"]
    for key in [*TOP_LEVEL_KEYS, *(f"{section}.some_key" for section in SECTIONS)]:
        assert re.fullmatch(pattern, key), key
    assert not re.fullmatch(pattern, "paths.models")
