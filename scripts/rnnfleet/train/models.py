"""Models: the built-in RNN, building any configured model (built-in or a user's builder,
see rnnfleet.plugins), checking what a builder returns, and rebuilding one from a model file.

A builder is called as builder(input_size=..., **hyper_parameters) and returns a
torch.nn.Module mapping windows (batch, seq_len, input_size) to outputs (batch,) or (batch, 1).
A model of several outputs (train.horizons and train.quantiles: rnnfleet.heads) is asked
for them with outputs=N among the hyper-parameters and maps windows to (batch, N).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

import torch
from torch import nn

from rnnfleet.errors import UserError, one_line
from rnnfleet.plugins import DEFAULT_BUILDER, describe, model_file_sources, resolve

CELLS = {"lstm": nn.LSTM, "gru": nn.GRU}


class SequenceRegressor(nn.Module):
    """LSTM or GRU over a window of bars; a linear head on the last step predicts the target
    (`outputs` values: one per horizon and quantile)."""

    def __init__(self, input_size: int, cell: str, hidden_size: int, num_layers: int, dropout: float, outputs: int = 1):
        super().__init__()
        self.rnn = CELLS[cell](
            input_size=input_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
            dropout=dropout if num_layers > 1 else 0.0,
            batch_first=True,
        )
        self.head = nn.Linear(hidden_size, outputs)
        self.single = outputs == 1

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        """windows: (batch, seq_len, input_size) -> (batch,) predictions, or (batch, outputs)."""
        outputs, _ = self.rnn(windows)
        predictions = self.head(outputs[:, -1])
        return predictions.squeeze(-1) if self.single else predictions


def build_rnn(
    input_size: int,
    cell: str = "lstm",
    hidden_size: int = 64,
    num_layers: int = 2,
    dropout: float = 0.1,
    outputs: int = 1,
) -> SequenceRegressor:
    """The built-in builder `rnn`: an LSTM or GRU with a linear head of `outputs` values."""
    return SequenceRegressor(
        input_size=int(input_size),
        cell=str(cell),
        hidden_size=int(hidden_size),
        num_layers=int(num_layers),
        dropout=float(dropout),
        outputs=int(outputs),
    )


BUILDERS = {"rnn": build_rnn}
NOT_HYPER_PARAMETERS = ("builder", "input_size")


def build_model(
    model_config: dict, input_size: int, seq_len: int | None = None, sources: Mapping[str, bytes] | None = None
) -> nn.Module:
    """The model `model_config` describes (its `builder`, default rnn, and the builder's
    hyper-parameters; `outputs` N > 1: its heads, rnnfleet.heads), for inputs of `input_size`
    features. With seq_len, one tiny batch checks the output shape. UserError naming the file and function when the builder fails,
    returns something that is not an nn.Module, or gives the wrong shape. sources: as for
    rnnfleet.plugins.resolve (a model file's vetted plug-ins)."""
    reference = str(model_config.get("builder", DEFAULT_BUILDER))
    hyper_parameters = {key: value for key, value in model_config.items() if key not in NOT_HYPER_PARAMETERS}
    builder = resolve(reference, BUILDERS, "model.builder", sources)
    where = describe(reference)
    outputs = int(hyper_parameters.get("outputs", 1))
    try:
        model = builder(input_size=int(input_size), **hyper_parameters)
    except Exception as error:
        asked = f" (outputs={outputs}: one per train.horizons and train.quantiles)" if outputs > 1 else ""
        raise UserError(
            f"{where} failed to build the model with input_size={input_size} and the config's "
            f"model keys {sorted(hyper_parameters)}{asked} ({type(error).__name__}: {one_line(error)})"
        ) from None
    if not isinstance(model, nn.Module):
        raise UserError(f"{where} returned {type(model).__name__}, not a torch.nn.Module")
    if seq_len is not None:
        check_output_shape(model, where, input_size, seq_len, outputs)
    return model


@torch.no_grad()
def check_output_shape(model: nn.Module, where: str, input_size: int, seq_len: int, outputs: int = 1) -> None:
    windows = torch.zeros(2, seq_len, input_size)
    training = model.training
    model.eval()
    try:
        predictions = model(windows)
    except Exception as error:
        raise UserError(
            f"{where}: the model fails on a batch of shape (2, {seq_len}, {input_size}) "
            f"({type(error).__name__}: {one_line(error)})"
        ) from None
    finally:
        model.train(training)
    shape = tuple(getattr(predictions, "shape", ()))
    expected = ((2,), (2, 1)) if outputs == 1 else ((2, outputs),)
    if not isinstance(predictions, torch.Tensor) or shape not in expected:
        wanted = (
            "(2,) or (2, 1): one output per window"
            if outputs == 1
            else f"(2, {outputs}): {outputs} outputs per window (train.horizons x train.quantiles)"
        )
        raise UserError(
            f"{where}: the model maps a batch of shape (2, {seq_len}, {input_size}) to "
            f"{shape if isinstance(predictions, torch.Tensor) else type(predictions).__name__}; expected {wanted}"
        )


def vetted_plugins(checkpoint: dict, path: str | os.PathLike, trusted: Iterable[str] = ()) -> dict[str, bytes]:
    """The bytes of every user file the model file at `path` names (builder and features),
    each one the user trusts: named in `trusted`, or inside the working folder with the
    content recorded at training (rnnfleet.plugins.model_file_sources); else PluginRefused,
    and nothing is imported."""
    references = [
        str(checkpoint["model_config"].get("builder", DEFAULT_BUILDER)),
        *checkpoint["features"]["definition"],
    ]
    recorded = checkpoint.get("plugin_sha256")  # absent in files written before it was recorded
    return model_file_sources(references, recorded if isinstance(recorded, dict) else {}, path, trusted)


def rebuild_model(
    checkpoint: dict, sources: Mapping[str, bytes], device: str | torch.device = "cpu", path: object = "model file"
) -> nn.Module:
    """The trained model of the model file at `path`, its builder run from `sources`
    (vetted_plugins), in eval mode on `device`. Weights that do not fit the model the file
    records are a ModelFileError naming the file."""
    from rnnfleet.train.modelfile import ModelFileError

    model_config = checkpoint["model_config"]
    model = build_model(model_config, int(model_config["input_size"]), sources=sources)
    try:
        model.load_state_dict(checkpoint["state_dict"])
    except (RuntimeError, TypeError, AttributeError) as error:  # torch lists every mismatch, one per line
        details = [line.strip() for line in str(error).splitlines()[1:] if line.strip()]
        first = details[0].rstrip(".") if details else one_line(error)
        more = f" and {len(details) - 1} more" if len(details) > 1 else ""
        raise ModelFileError(
            f"{path}: its weights do not fit the model it records ({describe(str(model_config.get('builder', DEFAULT_BUILDER)))}, "
            f"input_size {model_config['input_size']}): {first}{more}; the file was changed after rnnfleet wrote it "
            "(or the builder's code changed): train its dataset again"
        ) from None
    return model.to(device).eval()


def load_model(
    path: str | os.PathLike, device: str | torch.device = "cpu", trusted: Iterable[str] = ()
) -> tuple[nn.Module, dict]:
    """Rebuild a trained model from `models/<dataset>.pt` with the builder it records, in
    eval mode on `device`; a user's file it names is imported only when trusted (see
    vetted_plugins).

    Returns (model, checkpoint); checkpoint holds `model_config`, `normalisation`,
    `features`, `metrics` and `versions` (see docs/outputs.md).
    """
    from rnnfleet.train.modelfile import load_checkpoint

    checkpoint = load_checkpoint(path)
    return rebuild_model(checkpoint, vetted_plugins(checkpoint, path, trusted), device, path), checkpoint
