"""Which settings changed since a model was trained, from Snakemake's record of a job's params
(rnnfleet.workflow.settings_changes), and the warning block that names them; the hook that runs
it once the DAG is built (rnnfleet.hooks.snakemake_hooks.after_building_dag)."""

from __future__ import annotations

import pytest

from rnnfleet.hooks import snakemake_hooks
from rnnfleet.settings import PREPROCESS_CONFIG_KEYS, TRAIN_PARAM_CONFIG_KEYS
from rnnfleet.workflow.settings_changes import Change, report_lines, settings_changes

MODEL = {
    "builder": "rnnfleet.train.models:build_rnn",
    "cell": "lstm",
    "hidden_size": 8,
    "num_layers": 1,
    "dropout": 0.0,
}
TRAIN = {"seq_len": 16, "batch_size": 64, "epochs": 2, "patience": 2}
COLUMNS = {"time": "time", "close": "close"}
EVALUATE = {"cost_bps": 1.0, "block_bars": 0, "bootstrap": 1000}


def recorded_difference(before: dict, now: dict) -> tuple[list[str], list[str]]:
    """(only_old, only_new) as Snakemake's ParamsChange holds them: the reprs, unnamed."""
    old = {repr(value) for value in before.values()}
    new = {repr(value) for value in now.values()}
    return sorted(old - new), sorted(new - old)


def changes(before: dict, now: dict, config_keys=TRAIN_PARAM_CONFIG_KEYS) -> list[Change]:
    return settings_changes(now, *recorded_difference(before, now), config_keys)


def train_params(**sections) -> dict:
    return {"model": MODEL, "train": TRAIN, "columns": COLUMNS, "evaluate": EVALUATE} | sections


def test_a_changed_train_key_is_named_with_its_values_then_and_now():
    found = changes(train_params(), train_params(train=TRAIN | {"epochs": 3}))
    assert found == [Change("train.epochs", "2", "3")]


def test_keys_of_two_sections_changed_at_once_are_each_named_under_their_own_section():
    now = train_params(train=TRAIN | {"epochs": 20}, model=MODEL | {"hidden_size": 64, "cell": "gru"})
    assert sorted(changes(train_params(), now)) == [
        Change("model.cell", "lstm", "gru"),
        Change("model.hidden_size", "8", "64"),
        Change("train.epochs", "2", "20"),
    ]


def test_unchanged_settings_give_no_change():
    assert changes(train_params(), train_params()) == []


def test_a_key_the_record_does_not_have_is_named_as_not_set_before():
    found = changes(train_params(), train_params(model=MODEL | {"bidirectional": True}))
    assert found == [Change("model.bidirectional", "(not set)", "true")]


def test_another_builder_names_its_own_keys_and_the_builtin_keys_it_drops():
    mine = {"builder": "mine.py:build", "hidden": 16}
    found = changes(train_params(), train_params(model=mine))
    assert Change("model.builder", "rnnfleet.train.models:build_rnn", "mine.py:build") in found
    assert Change("model.hidden", "(not set)", "16") in found
    assert Change("model.cell", "lstm", "(not set)") in found


def preprocess_params(**settings) -> dict:
    return {
        "columns": COLUMNS,
        "read_format": "auto",
        "max_bad_fraction": 0.05,
        "max_gap": "5min",
        "seq_len": 16,
        "horizon": 1,
        "val_fraction": 0.2,
        "test_fraction": 0.15,
        "features": ["ohlc_returns", "log_volume"],
        "target": "log_return",
        "files_fingerprint": "a1b2",
    } | settings


def test_a_preprocess_setting_is_named_by_its_config_key():
    found = changes(preprocess_params(), preprocess_params(val_fraction=0.3), PREPROCESS_CONFIG_KEYS)
    assert found == [Change("preprocess.val_fraction", "0.2", "0.3")]


def test_changed_data_files_alone_are_not_a_settings_change():
    found = changes(preprocess_params(), preprocess_params(files_fingerprint="c3d4"), PREPROCESS_CONFIG_KEYS)
    assert found == []


def test_a_setting_changed_with_the_data_files_keeps_its_value_then():
    # The fingerprint's old value (text) is not taken for a number's; for another text's (the
    # target's) the record cannot tell which was which, and only the new value is named.
    now = preprocess_params(files_fingerprint="c3d4", val_fraction=0.3)
    assert changes(preprocess_params(), now, PREPROCESS_CONFIG_KEYS) == [
        Change("preprocess.val_fraction", "0.2", "0.3")
    ]
    now = preprocess_params(files_fingerprint="c3d4", target="direction")
    assert changes(preprocess_params(), now, PREPROCESS_CONFIG_KEYS) == [Change("target", None, "direction")]


def test_two_values_of_one_type_changed_at_once_are_named_with_their_new_values():
    now = preprocess_params(val_fraction=0.3, max_bad_fraction=0.1)
    assert sorted(changes(preprocess_params(), now, PREPROCESS_CONFIG_KEYS)) == [
        Change("preprocess.max_bad_fraction", None, "0.1"),
        Change("preprocess.val_fraction", None, "0.3"),
    ]


def test_a_recorded_value_that_is_not_a_literal_is_not_read():
    now = train_params(train=TRAIN | {"epochs": 3})
    found = settings_changes(now, ["__import__('os').system('false')"], [repr(now["train"])], TRAIN_PARAM_CONFIG_KEYS)
    assert found == [Change(f"train.{key}", "(not set)", str(value)) for key, value in sorted(now["train"].items())]


def test_one_set_of_changes_is_one_line_with_the_first_datasets_and_how_many_more():
    change = (Change("model.hidden_size", "32", "64"), Change("train.epochs", "2", "20"))
    datasets = {f"D{number:02d}_1m": change for number in range(12)}
    lines = report_lines(datasets)
    assert lines[0] == (
        "rnnfleet: 12 model(s) will be re-trained because settings changed: "
        "model.hidden_size 32 -> 64; train.epochs 2 -> 20 (datasets: D00_1m, D01_1m, D02_1m and 9 more)"
    )
    assert len(lines) == 2 and "settings it was trained with" in lines[1]


def test_different_changes_get_a_line_each_largest_first():
    lines = report_lines(
        {
            "A_1m": (Change("train.epochs", "2", "3"),),
            "B_1m": (Change("train.epochs", "5", "3"),),
            "C_1m": (Change("train.epochs", "5", "3"),),
        }
    )
    assert lines[:3] == [
        "rnnfleet: 3 model(s) will be re-trained because settings changed:",
        "  train.epochs 5 -> 3 (datasets: B_1m, C_1m)",
        "  train.epochs 2 -> 3 (datasets: A_1m)",
    ]


def test_nothing_changed_gives_no_lines():
    assert report_lines({}) == [] and report_lines({"A_1m": ()}) == []


def workflow_class():
    import snakemake.api  # noqa: F401  (snakemake.workflow imported alone is an import circle)
    from snakemake.workflow import Workflow

    return Workflow


@pytest.fixture
def stock_build_dag():
    Workflow = workflow_class()
    stock = Workflow.__dict__.get("_build_dag")
    yield
    if stock is None:
        if "_build_dag" in Workflow.__dict__:
            delattr(Workflow, "_build_dag")
    else:
        Workflow._build_dag = stock


def test_the_callback_runs_with_the_dag_after_snakemake_built_it(stock_build_dag, monkeypatch):
    Workflow = workflow_class()
    steps = []
    monkeypatch.setattr(Workflow, "_build_dag", lambda self: steps.append("built"))
    snakemake_hooks.after_building_dag(lambda dag: steps.append(("reported", dag)))

    class FakeWorkflow:
        dag = "the dag"

    Workflow._build_dag(FakeWorkflow())
    assert steps == ["built", ("reported", "the dag")]
