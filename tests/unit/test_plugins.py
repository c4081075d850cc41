"""Plug-ins without Snakemake: resolving references, checking builders and feature functions,
and every target training against its own naive baseline."""

from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from conftest import REPO

from rnnfleet.errors import UserError
from rnnfleet.plugins import PluginRefused, imported_sha256, model_file_sources, resolve, sha256_of
from rnnfleet.prep.features import BUILTIN_FEATURES, compute_feature_matrix
from rnnfleet.prep.prepare import prepare_dataset
from rnnfleet.prep.targets import TARGETS
from rnnfleet.synthetic import synthetic_bars, write_synthetic_csv
from rnnfleet.train.evaluate import train_and_evaluate
from rnnfleet.train.loop import LoopSettings
from rnnfleet.train.models import BUILDERS, SequenceRegressor, build_model

MODEL = {"cell": "lstm", "hidden_size": 16, "num_layers": 1, "dropout": 0.0}
TRAIN = {"seq_len": 16, "batch_size": 64, "epochs": 6, "lr": 0.003, "patience": 3, "seed": 0}


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """tmp_path as the working folder, which relative plug-in paths start from."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write_plugin(folder, name: str, source: str) -> str:
    path = folder / "mine" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(source)
    return f"mine/{name}"


def test_builtins_and_user_functions_resolve_to_plain_functions(in_tmp):
    path = write_plugin(in_tmp, "double.py", "def double(bars):\n    return bars['close'] * 2\n")
    assert resolve("rnn", BUILDERS, "model.builder") is BUILDERS["rnn"]
    double = resolve(f"{path}:double", BUILTIN_FEATURES, "features")
    assert double(pd.DataFrame({"close": [1.0]}))[0] == 2.0
    assert resolve(f"{path}:double", BUILTIN_FEATURES, "features") is double  # imported once


def test_a_changed_file_is_imported_again_in_the_same_process(in_tmp):
    # A warm worker runs job after job in one process (rnnfleet.runner.warm): a file edited
    # between two runs must not keep its old version there.
    path = write_plugin(in_tmp, "scale.py", "def scale(bars):\n    return bars['close'] * 2\n")
    bars = pd.DataFrame({"close": [1.0]})
    assert resolve(f"{path}:scale", BUILTIN_FEATURES, "features")(bars)[0] == 2.0
    (in_tmp / path).write_text("def scale(bars):\n    return bars['close'] * 30\n")  # another size too
    assert resolve(f"{path}:scale", BUILTIN_FEATURES, "features")(bars)[0] == 30.0


def test_the_hash_recorded_for_a_model_file_is_of_the_bytes_last_imported(in_tmp):
    path = write_plugin(in_tmp, "scale.py", "def scale(bars):\n    return bars['close'] * 2\n")
    resolve(f"{path}:scale", BUILTIN_FEATURES, "features")
    assert imported_sha256(["ohlc_returns", f"{path}:scale"]) == {path: sha256_of((in_tmp / path).read_bytes())}
    (in_tmp / path).write_text("def scale(bars):\n    return bars['close'] * 3\n")
    assert imported_sha256([f"{path}:scale"]) == {path: sha256_of(b"def scale(bars):\n    return bars['close'] * 2\n")}
    resolve(f"{path}:scale", BUILTIN_FEATURES, "features")  # a warm worker's next job
    assert imported_sha256([f"{path}:scale"]) == {path: sha256_of((in_tmp / path).read_bytes())}


def test_a_model_files_plugin_runs_the_bytes_that_were_vetted_not_the_file_as_it_is_later(in_tmp):
    # The time between the check and the import: the file replaced after its hash matched
    # must not be what runs.
    trained = b"def scale(bars):\n    return bars['close'] * 2\n"
    path = write_plugin(in_tmp, "vetted.py", trained.decode())
    sources = model_file_sources([f"{path}:scale"], {path: sha256_of(trained)}, "A.pt", trusted=())
    marker = in_tmp / "replacement-ran"
    (in_tmp / path).write_text(f"open({str(marker)!r}, 'w').close()\ndef scale(bars):\n    return bars['close'] * 99\n")
    scale = resolve(f"{path}:scale", BUILTIN_FEATURES, "features", sources)
    assert scale(pd.DataFrame({"close": [1.0]}))[0] == 2.0 and not marker.exists()
    with pytest.raises(UserError, match="not among the model file's vetted plug-in files"):
        resolve("mine/other.py:scale", BUILTIN_FEATURES, "features", sources)  # not read from the disk either


@pytest.mark.skipif(os.name == "nt", reason="symbolic links need extra rights on Windows")
def test_a_symlink_in_the_folder_to_a_file_outside_it_counts_as_outside(in_tmp, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere") / "evil.py"
    outside.write_text("def build(input_size):\n    pass\n")
    (in_tmp / "mine").mkdir()
    (in_tmp / "mine" / "link.py").symlink_to(outside)
    recorded = {"mine/link.py": sha256_of(outside.read_bytes())}
    with pytest.raises(PluginRefused) as refused:
        model_file_sources(["mine/link.py:build"], recorded, "A.pt", trusted=())
    assert f"outside the project folder {in_tmp.resolve()} (it is {outside.resolve()})" in str(refused.value)
    assert model_file_sources(["mine/link.py:build"], recorded, "A.pt", trusted=["mine/link.py"]) == {
        "mine/link.py": outside.read_bytes()
    }


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("mine/absent.py:build", "mine/absent.py: no such file (config key 'model.builder'"),
        ("mine/model.py:absent", "mine/model.py: has no function 'absent'"),
        ("mine/model.py:SIZE", "mine/model.py: 'SIZE' is not a function"),
        ("mine/broken.py:build", "mine/broken.py: importing it failed (ModuleNotFoundError: No module named 'nope')"),
        ("transformer", "config key 'model.builder' = 'transformer' is neither a built-in (rnn)"),
    ],
)
def test_a_reference_that_cannot_be_resolved_names_the_file_and_function(in_tmp, reference, message):
    write_plugin(in_tmp, "model.py", "SIZE = 3\n")
    write_plugin(in_tmp, "broken.py", "import nope\n")
    with pytest.raises(UserError) as caught:
        build_model({"builder": reference}, input_size=5, seq_len=4)
    assert message in str(caught.value) and "\n" not in str(caught.value)


BUILDERS_THAT_FAIL = {
    "raises": ("def build(input_size, width):\n    raise ValueError('width must be even')\n", "failed to build"),
    "not a module": ("def build(input_size, width):\n    return [width]\n", "returned list, not a torch.nn.Module"),
    "wrong shape": (
        "import torch\ndef build(input_size, width):\n    return torch.nn.Linear(input_size, width)\n",
        "maps a batch of shape (2, 4, 5) to (2, 4, 3); expected (2,) or (2, 1)",
    ),
}


@pytest.mark.parametrize("case", BUILDERS_THAT_FAIL)
def test_a_builder_that_fails_or_returns_the_wrong_thing_is_one_line_naming_it(in_tmp, case):
    source, message = BUILDERS_THAT_FAIL[case]
    path = write_plugin(in_tmp, f"{case.replace(' ', '_')}.py", source)
    with pytest.raises(UserError) as caught:
        build_model({"builder": f"{path}:build", "width": 3}, input_size=5, seq_len=4)
    assert f"{path}: function build" in str(caught.value) and message in str(caught.value)


def test_the_builtin_rnn_is_one_builder_among_others():
    model = build_model({"builder": "rnn", **MODEL}, input_size=5, seq_len=4)
    assert isinstance(model, SequenceRegressor) and model.rnn.hidden_size == 16
    assert isinstance(build_model(MODEL, input_size=5), SequenceRegressor)  # builder defaults to rnn


def test_features_side_by_side_with_warmup_and_names(in_tmp):
    path = write_plugin(in_tmp, "features.py", "def lagged(bars):\n    return bars['close'].shift(3).to_numpy()\n")
    bars = synthetic_bars(50, seed=1)
    bars["timestamp"] = pd.to_datetime(bars["timestamp"], utc=True)
    matrix = compute_feature_matrix(bars, ["ohlc_returns", "time_of_day", f"{path}:lagged"], "A.csv")
    assert matrix.values.shape == (50, 7) and matrix.warmup == 3  # shift(3) needs the longest history
    assert matrix.names[-3:] == ("time_of_day_sin", "time_of_day_cos", f"{path}:lagged")
    np.testing.assert_allclose(matrix.values[3:, 6], bars["close"].to_numpy()[:-3])
    minutes = np.arange(50)  # the bars start at midnight
    np.testing.assert_allclose(matrix.values[:, 4], np.sin(2 * np.pi * minutes / 1440), atol=1e-12)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f(bars):\n    return bars['close'].to_numpy()[:-1]\n", "returned shape (49,); expected (50,) or (50, k)"),
        ("def f(bars):\n    return bars['nope']\n", "failed (KeyError: 'nope')"),
        (
            "import numpy as np\ndef f(bars):\n    x = bars['close'].to_numpy().copy()\n    x[20] = np.nan\n"
            "    return x\n",
            "gives a NaN or infinite value at data row 21, after the first 1 row(s) of warm-up",
        ),
    ],
)
def test_a_feature_function_that_fails_is_one_line_naming_dataset_file_and_function(in_tmp, source, message):
    path = write_plugin(in_tmp, "bad_features.py", source)
    with pytest.raises(UserError) as caught:
        compute_feature_matrix(synthetic_bars(50, seed=1), ["ohlc_returns", f"{path}:f"], "A.csv")
    assert str(caught.value).startswith(f"A.csv: {path}: function f") and message in str(caught.value)


def test_the_schema_lists_exactly_the_registered_builtins():
    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())["properties"]
    assert schema["target"]["enum"] == list(TARGETS)
    feature_pattern = schema["features"]["items"]["pattern"]
    assert feature_pattern.startswith(f"^({'|'.join(BUILTIN_FEATURES)}|")
    assert schema["model"]["properties"]["builder"]["pattern"].startswith(f"^({'|'.join(BUILDERS)}|")


@pytest.fixture(scope="module")
def synthetic_csv(tmp_path_factory):
    return write_synthetic_csv(tmp_path_factory.mktemp("targets") / "A_1m.csv", 2000, 3)


@pytest.mark.slow
@pytest.mark.parametrize("target_name", list(TARGETS))
def test_each_target_trains_and_beats_its_own_naive_baseline(synthetic_csv, target_name):
    """The synthetic bars have AR(2) returns and clustered volatility: every target is
    learnable, and the skill is measured against that target's baseline."""
    target = TARGETS[target_name]
    arrays, _ = prepare_dataset(
        synthetic_csv, TRAIN["seq_len"], 3, 0.2, features=["ohlc_returns", "log_volume"], target=target_name
    )
    assert arrays.target == target_name
    torch.set_num_threads(1)
    result = train_and_evaluate(arrays, MODEL, LoopSettings.of(TRAIN), torch.device("cpu"))
    val_targets = torch.from_numpy(arrays.targets[arrays.split.val_start : arrays.split.val_end])
    train_targets = torch.from_numpy(arrays.targets[TRAIN["seq_len"] - 1 : arrays.train_end])
    if target.classification:  # baseline: the training share of up moves, as a constant probability
        share = train_targets.mean()
        naive = torch.nn.functional.binary_cross_entropy(share.expand_as(val_targets), val_targets)
        assert set(np.unique(arrays.targets)) == {0.0, 1.0}
        assert result.evaluated.val_accuracy is not None and result.evaluated.naive_val_accuracy is not None
    elif target.centred:  # baseline: the training mean, which scaling made 0
        naive = val_targets.pow(2).mean()
        assert abs(float(arrays.targets[: arrays.train_end].mean())) < 1e-4 and arrays.target_mean > 0
    else:  # baseline: a zero return
        naive = val_targets.pow(2).mean()
        assert arrays.target_mean == 0.0
    assert result.evaluated.naive_val_loss == pytest.approx(naive.item(), rel=1e-4)
    assert math.isfinite(result.evaluated.skill) and result.evaluated.skill > 0, (target_name, result.evaluated.skill)


def test_target_values_over_the_horizon():
    close = np.array([10.0, 11.0, 10.0, 12.0])
    returns = np.diff(np.log(close))
    log_close = np.log(close)
    np.testing.assert_allclose(TARGETS["log_return"].values(log_close, 2), np.log([10 / 10, 12 / 11]), atol=1e-15)
    np.testing.assert_allclose(TARGETS["abs_log_return"].values(log_close, 2), np.abs(np.log([1.0, 12 / 11])))
    np.testing.assert_allclose(
        TARGETS["realised_volatility"].values(log_close, 2),
        [np.hypot(returns[0], returns[1]), np.hypot(returns[1], returns[2])],
    )
    np.testing.assert_array_equal(TARGETS["direction"].values(log_close, 1), [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(TARGETS["direction"].values(log_close, 2), [0.0, 1.0])  # unchanged is not up
