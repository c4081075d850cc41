"""The configuration schema read once, with libyaml, and its defaults filled in by rnnfleet
(rules/config.smk) exactly as Snakemake's validate(set_default=True) fills them."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from conftest import REPO
from snakemake.utils import validate

from rnnfleet.workflow.config_check import fill_schema_defaults, load_schema

SCHEMA_PATH = REPO / "schemas" / "config.schema.yaml"
REPO_CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())


def test_the_schema_reads_the_same_as_with_the_pure_python_parser():
    assert load_schema(SCHEMA_PATH) == yaml.safe_load(SCHEMA_PATH.read_text())


@pytest.mark.parametrize(
    "given",
    [
        {},
        REPO_CONFIG,
        {"train": {"epochs": 3}},
        {"model": {"cell": "gru", "hidden_size": 4}},
        {"model": {"builder": "my_model.py:build"}},
        {"predict": {"datasets": "all"}, "tracking": {}},
        {"datasets": {"sheet": "datasets.csv"}},
    ],
    ids=["empty", "repo-config", "one-train-key", "rnn-keys", "builder", "nested-sections", "sheet"],
)
def test_defaults_are_filled_in_as_snakemakes_validate_fills_them(given):
    ours, snakemakes = copy.deepcopy(given), copy.deepcopy(given)
    fill_schema_defaults(ours, load_schema(SCHEMA_PATH))
    validate(snakemakes, str(SCHEMA_PATH), set_default=True)
    assert json.dumps(ours) == json.dumps(snakemakes)  # the same keys, values and order
    assert ours != given  # defaults were filled in: the comparison is not between two no-ops


def test_a_default_filled_in_is_a_copy_so_editing_it_leaves_the_schema_alone():
    schema = load_schema(SCHEMA_PATH)
    config: dict = {}
    fill_schema_defaults(config, schema)
    config["features"].append("my_feature")
    assert schema["properties"]["features"]["default"] == ["ohlc_returns", "log_volume"]


def test_a_config_that_breaks_the_schema_is_refused():
    with pytest.raises(ValueError, match="invalid configuration"):
        fill_schema_defaults({"train": {"epochs": "many"}}, load_schema(SCHEMA_PATH))
