"""ONNX files of trained models (rnnfleet.forecast.export_onnx), in this process: ONNX Runtime's outputs
equal rnnfleet predict's forecasts, bounds, quantiles and prices on the same bars (built-in
LSTM and GRU, several horizons and quantiles, a direction target, a user's builder and
feature in tensor operations) at batches of 1 and 64; the metadata read back; what cannot be
exported refused in one line with no file left; a graph that computes otherwise refused.
The command and the workflow target: tests/workflow/test_export_run.py."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import REPO, TINY_ROWS

pytest.importorskip("onnxruntime", reason="the export's optional packages: pip install -r requirements-onnx.txt")
import onnx  # noqa: E402
import onnxruntime  # noqa: E402

from rnnfleet.cli.predict import main as predict_main  # noqa: E402
from rnnfleet.forecast import export_onnx  # noqa: E402
from rnnfleet.forecast.export_onnx import ExportRefused, export_model, read_metadata  # noqa: E402
from rnnfleet.prep import feature_graphs  # noqa: E402
from rnnfleet.prep.prepare import prepare_dataset, read_clean_bars  # noqa: E402
from rnnfleet.synthetic import synthetic_bars  # noqa: E402
from rnnfleet.train.evaluate import train_and_evaluate  # noqa: E402
from rnnfleet.train.loop import LoopSettings  # noqa: E402
from rnnfleet.train.modelfile import (
    build_checkpoint,  # noqa: E402
    calibration_record,  # noqa: E402
    save_checkpoint,  # noqa: E402
)
from rnnfleet.train.updating import rnnfleet_version  # noqa: E402

SEQ_LEN = 16
TRAIN = {"seq_len": SEQ_LEN, "batch_size": 64, "epochs": 2, "lr": 0.003, "patience": 2, "seed": 0, "amp": "off"}
ROWS = TINY_ROWS * 2
# Compared with rnnfleet predict: a difference up to this share of the target's training std
# (of a probability: as is), plus this share of the value (a float32 output's own rounding).
OF_SCALE, OF_VALUE = 1e-5, 1e-6
# name: (model settings, horizon(s), quantiles, target, features)
MODELS = {
    "lstm": ({"cell": "lstm", "hidden_size": 8, "num_layers": 2, "dropout": 0.0}, 2, [], "log_return", None),
    "gru_heads_quantiles": (
        {"cell": "gru", "hidden_size": 8, "num_layers": 1, "dropout": 0.0},
        [1, 5],
        [0.1, 0.25, 0.75, 0.9],
        "log_return",
        ["ohlc_returns", "log_volume", "hl_range", "volume_change"],
    ),
    "direction": ({"cell": "lstm", "hidden_size": 8, "num_layers": 1, "dropout": 0.0}, 3, [], "direction", None),
    "volatility_quantiles": (
        {"cell": "gru", "hidden_size": 8, "num_layers": 1, "dropout": 0.0},
        [2, 4],
        [0.05, 0.95],
        "realised_volatility",
        None,
    ),
}
TENSOR_FEATURE = "def spread(bars):\n    return (bars['high'] - bars['low']) / bars['close']\n"
NUMPY_FEATURE = (
    "import numpy as np\n\ndef spread(bars):\n"
    "    return np.log(bars['high'].to_numpy(dtype=float) / bars['low'].to_numpy(dtype=float))\n"
)
BRANCHING_BUILDER = """import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.gru = nn.GRU(input_size, hidden_size, batch_first=True)
        self.head = nn.Linear(hidden_size, 1)

    def forward(self, windows):
        outputs, _ = self.gru(windows)
        last = self.head(outputs[:, -1]).squeeze(-1)
        return last if float(windows.mean()) > 0 else -last


def build(input_size, hidden_size=8):
    return Net(input_size, hidden_size)
"""


@pytest.fixture(scope="module")
def bars_csv(tmp_path_factory):
    """A bars CSV; the ONNX file is given its numbers as they are (double), as rnnfleet predict reads them."""
    path = tmp_path_factory.mktemp("export") / "A_1m.csv"
    synthetic_bars(ROWS, seed=11).to_csv(path, index=False)  # floats written with repr: they read back exactly
    return path


def trained_model(csv_path, name: str, model: dict, horizon, quantiles, target, features=None, folder=None):
    """A model file of these settings, trained on csv_path (a few epochs), as the train job writes it."""
    options = {"features": features} if features else {}
    arrays, _ = prepare_dataset(csv_path, SEQ_LEN, horizon, val_fraction=0.2, target=target, **options)
    torch.manual_seed(0)
    result = train_and_evaluate(arrays, model, LoopSettings.of({**TRAIN, "quantiles": quantiles}), torch.device("cpu"))
    checkpoint = build_checkpoint(name, result.trained, arrays, model, TRAIN, {"val_loss": result.evaluated.val_loss})
    checkpoint["calibration"] = calibration_record(result.evaluated)  # as the train job adds it
    path = (folder or csv_path.parent) / f"{name}.pt"
    save_checkpoint(checkpoint, path)
    return path


@pytest.fixture(scope="module")
def models(bars_csv):
    torch.set_num_threads(1)
    return {name: trained_model(bars_csv, name, *settings) for name, settings in MODELS.items()}


def windows_of(csv_path, count: int, window_bars: int) -> np.ndarray:
    """The last `count` windows of window_bars bars of the CSV, float64 OHLCV, oldest bar first."""
    values = pd.read_csv(csv_path)[["open", "high", "low", "close", "volume"]].to_numpy(np.float64)
    return np.stack([values[end - window_bars : end] for end in range(len(values) - count + 1, len(values) + 1)])


def run_file(path, windows: np.ndarray) -> dict[str, np.ndarray]:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, {"bars": windows}), strict=True))


def largest_difference(onnx_columns: dict, forecasts: pd.DataFrame, target_std) -> float:
    """Asserts every forecast column of rnnfleet predict's CSV is in the ONNX outputs and equal
    to OF_SCALE of the target's std plus OF_VALUE of the value; returns the largest
    difference in units of the target's std (closes: relative to the close)."""
    assert set(onnx_columns) == set(forecasts.columns) - {"time", "close", "horizon", "target"}
    largest = 0.0
    for name, values in onnx_columns.items():
        wanted = forecasts[name].to_numpy(np.float64)
        scale = forecasts["close"].to_numpy() if name.startswith("forecast_close") else target_std
        difference = np.abs(values - wanted)
        assert np.all(difference <= OF_SCALE * scale + OF_VALUE * np.abs(wanted)), name
        largest = max(largest, float(np.max(difference / scale)))
    return largest


@pytest.mark.parametrize("name", list(MODELS))
def test_onnx_runtime_gives_rnnfleet_predicts_forecasts_bounds_and_prices_at_batches_of_1_and_64(
    models, bars_csv, tmp_path, name, record_property
):
    model_path, out = models[name], tmp_path / f"{name}.onnx"
    bars = read_clean_bars(bars_csv, None, 0.0)
    exported = export_model(model_path, bars, out)
    assert out.exists() and exported.comparison.worst <= 1.0
    assert predict_main(["--model", str(model_path), "--csv", str(bars_csv), "--out", str(tmp_path / "f.csv")]) == 0
    forecasts = pd.read_csv(tmp_path / "f.csv").iloc[-64:].reset_index(drop=True)
    plan = export_onnx.export_plan(torch.load(model_path, weights_only=True), {})
    target_std = 1.0 if MODELS[name][3] == "direction" else plan.scales.min()
    windows = windows_of(bars_csv, 64, SEQ_LEN + 1)
    close = windows[:, -1, 3].astype(np.float64)
    batch = export_onnx.predict_columns(run_file(out, windows), plan, close)
    largest = largest_difference(batch, forecasts, target_std)
    for one in (0, 63):  # a batch of 1
        alone = export_onnx.predict_columns(run_file(out, windows[one : one + 1]), plan, close[one : one + 1])
        largest = max(largest, largest_difference(alone, forecasts.iloc[one : one + 1], target_std))
    record_property("largest_difference", largest)
    print(f"{name}: largest difference {largest:.3g} (of the target's std; closes relative)")
    expected_outputs = {"forecast"} | ({"quantiles"} if MODELS[name][2] else set())
    expected_outputs |= set() if name == "direction" else {"lower", "upper"}
    if MODELS[name][3] == "log_return":
        expected_outputs |= {"forecast_close", "forecast_close_lower", "forecast_close_upper"}
    assert set(run_file(out, windows[:1])) == expected_outputs


@pytest.mark.parametrize("price", [60_000.0, 0.0001])
def test_at_the_prices_people_trade_the_file_is_within_1e_5_of_the_target_std_of_predict(price, tmp_path):
    """Bars at BTC's price level and at a small coin's, fed as the platform has them (double):
    a float32 input moved a one-minute feature by a tenth of its spread at 60,000."""
    path = tmp_path / "P_1m.csv"
    bars = synthetic_bars(ROWS, seed=5)
    for column in ("open", "high", "low", "close"):
        bars[column] = bars[column] * (price / bars["close"].iloc[0])
    bars.to_csv(path, index=False)
    model_path = trained_model(path, "P_1m", *MODELS["lstm"])
    out = tmp_path / "P_1m.onnx"
    exported = export_model(model_path, read_clean_bars(path, None, 0.0), out)
    assert predict_main(["--model", str(model_path), "--csv", str(path), "--out", str(tmp_path / "f.csv")]) == 0
    forecasts = pd.read_csv(tmp_path / "f.csv").iloc[-64:].reset_index(drop=True)
    plan = export_onnx.export_plan(torch.load(model_path, weights_only=True), {})
    windows = windows_of(path, 64, SEQ_LEN + 1)
    outputs = run_file(out, windows)
    target_std = plan.scales.min()
    assert np.max(np.abs(outputs["forecast"][:, 0] - forecasts["forecast"])) <= 1e-5 * target_std
    closes = np.abs(outputs["forecast_close"][:, 0] - forecasts["forecast_close"]) / forecasts["close"]
    assert np.max(closes) <= 1e-9  # double closes: no float32 step of 0.004 at 60,000
    assert exported.comparison.target_difference <= 1e-5
    print(f"price {price:g}: {exported.comparison.text()}")


def test_the_file_takes_double_bars_at_opset_17_with_a_dynamic_batch_and_says_what_it_is(models, bars_csv, tmp_path):
    model_path, out = models["gru_heads_quantiles"], tmp_path / "A.onnx"
    export_model(model_path, read_clean_bars(bars_csv, None, 0.0), out)
    proto = onnx.load(str(out))
    onnx.checker.check_model(proto)
    assert max(entry.version for entry in proto.opset_import if entry.domain in ("", "ai.onnx")) <= 17
    (graph_input,) = proto.graph.input  # the bars only: the initial states are inside the graph
    dims = graph_input.type.tensor_type.shape.dim
    assert graph_input.name == "bars" and graph_input.type.tensor_type.elem_type == onnx.TensorProto.DOUBLE
    assert [dims[0].dim_param, dims[1].dim_value, dims[2].dim_value] == ["batch", SEQ_LEN + 1, 5]
    types = {output.name: output.type.tensor_type.elem_type for output in proto.graph.output}
    assert {name for name, kind in types.items() if kind == onnx.TensorProto.DOUBLE} == {
        "forecast_close",
        "forecast_close_lower",
        "forecast_close_upper",
    }
    assert {kind for name, kind in types.items() if not name.startswith("forecast_close")} == {onnx.TensorProto.FLOAT}
    described = read_metadata(out)
    assert described["dataset"] == "gru_heads_quantiles" and described["bar_interval"] == "1min"
    assert described["timezone"] == "UTC (assumed)" and described["input_columns"] == "open,high,low,close,volume"
    assert described["input_type"] == "double"
    assert described["seq_len"] == str(SEQ_LEN) and described["horizons"] == "1,5"
    assert described["quantiles"] == "0.1,0.25,0.5,0.75,0.9" and described["interval_coverages"] == "0.8,0.5"
    assert described["model_sha256"] == hashlib.sha256(model_path.read_bytes()).hexdigest()
    assert described["rnnfleet_version"] == rnnfleet_version()
    assert (
        described["outputs"]
        == "forecast,quantiles,lower,upper,forecast_close,forecast_close_lower,forecast_close_upper"
    )
    assert described["output_quantiles"].startswith("[batch, horizons, quantiles]")


def plugin_model(bars_csv, tmp_path, builder: str | None, feature: str | None, time_feature: bool = False):
    """A model trained with a user's builder (the source of one written in tmp_path, or
    "examples": examples/tcn_gru.py) and/or feature file written in tmp_path (all trusted)."""
    trusted, model, features = [], {"cell": "gru", "hidden_size": 8, "num_layers": 1, "dropout": 0.0}, None
    if builder == "examples":
        example = str(REPO / "examples" / "tcn_gru.py")
        model, trusted = {"builder": f"{example}:build", "channels": 4, "hidden_size": 8}, [example]
    elif builder:
        (tmp_path / "net.py").write_text(builder)
        model, trusted = {"builder": f"{tmp_path / 'net.py'}:build", "hidden_size": 8}, [str(tmp_path / "net.py")]
    if feature:
        (tmp_path / "feat.py").write_text(feature)
        features, trusted = ["ohlc_returns", f"{tmp_path / 'feat.py'}:spread"], [*trusted, str(tmp_path / "feat.py")]
    if time_feature:
        features = ["ohlc_returns", "time_of_day"]
    path = trained_model(bars_csv, "P", model, 2, [], "log_return", features, folder=tmp_path)
    return path, trusted


def test_the_examples_builder_and_a_feature_in_tensor_operations_export_like_the_built_in_ones(bars_csv, tmp_path):
    model_path, trusted = plugin_model(bars_csv, tmp_path, "examples", TENSOR_FEATURE)
    exported = export_model(model_path, read_clean_bars(bars_csv, None, 0.0), tmp_path / "P.onnx", trusted)
    assert exported.comparison.worst <= 1.0 and (tmp_path / "P.onnx").exists()
    assert exported.metadata["features"].endswith("feat.py:spread")


@pytest.mark.parametrize(
    ("builder", "feature", "time_feature", "named", "why"),
    [
        (BRANCHING_BUILDER, None, False, "net.py: function build", "does not trace"),
        (None, NUMPY_FEATURE, False, "feat.py: function spread", "cannot be put in the ONNX graph"),
        (None, None, True, "feature 'time_of_day'", "needs the bars' times"),
    ],
    ids=["builder-that-branches-on-data", "numpy-feature", "time-feature"],
)
def test_what_cannot_be_a_graph_is_refused_in_one_line_naming_it_and_no_file_is_left(
    bars_csv, tmp_path, builder, feature, time_feature, named, why
):
    model_path, trusted = plugin_model(bars_csv, tmp_path, builder, feature, time_feature)
    out = tmp_path / "P.onnx"
    with pytest.raises(ExportRefused) as refused:
        export_model(model_path, read_clean_bars(bars_csv, None, 0.0), out, trusted)
    message = str(refused.value)
    assert named in message and why in message and "\n" not in message
    assert list(tmp_path.glob("*.onnx*")) == [] and list(tmp_path.glob(".P.onnx*")) == []


def test_a_graph_that_computes_otherwise_is_refused_and_an_earlier_file_removed(
    models, bars_csv, tmp_path, monkeypatch
):
    """The check before writing: a feature computed one bar late (as an off-by-one in the graph
    would) differs from rnnfleet predict's forecasts, and no file of this model is left."""
    out = tmp_path / "A.onnx"
    out.write_bytes(b"an export of an earlier model")
    late = export_onnx.GRAPH_FEATURES["ohlc_returns"]
    monkeypatch.setitem(export_onnx.GRAPH_FEATURES, "ohlc_returns", lambda bars: feature_graphs.previous(late(bars)))
    with pytest.raises(
        ExportRefused, match=r"differ from rnnfleet predict's .* nothing written; the earlier .* removed"
    ):
        export_model(models["lstm"], read_clean_bars(bars_csv, None, 0.0), out)
    assert not out.exists()
