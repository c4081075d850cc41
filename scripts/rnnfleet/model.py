"""The RNN and how to rebuild it from a saved model file."""

from __future__ import annotations

import os

import torch
from torch import nn

CELLS = {"lstm": nn.LSTM, "gru": nn.GRU}


class SequenceRegressor(nn.Module):
    """LSTM or GRU over a window of bars; a linear head on the last step predicts the target."""

    def __init__(self, input_size: int, cell: str, hidden_size: int, num_layers: int, dropout: float):
        super().__init__()
        self.rnn = CELLS[cell](
            input_size=input_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
            dropout=dropout if num_layers > 1 else 0.0,
            batch_first=True,
        )
        self.head = nn.Linear(hidden_size, 1)

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        """windows: (batch, seq_len, input_size) -> (batch,) predictions."""
        outputs, _ = self.rnn(windows)
        return self.head(outputs[:, -1]).squeeze(-1)


def build_model(model_config: dict) -> SequenceRegressor:
    """model_config: input_size, cell, hidden_size, num_layers, dropout (as saved in the model file)."""
    return SequenceRegressor(
        input_size=int(model_config["input_size"]),
        cell=str(model_config["cell"]),
        hidden_size=int(model_config["hidden_size"]),
        num_layers=int(model_config["num_layers"]),
        dropout=float(model_config["dropout"]),
    )


def load_model(path: str | os.PathLike, device: str | torch.device = "cpu") -> tuple[SequenceRegressor, dict]:
    """Rebuild a trained model from `models/<dataset>.pt`, in eval mode on `device`.

    Returns (model, checkpoint); checkpoint holds `model_config`, `normalisation`,
    `features`, `metrics` and `versions` (see README "Outputs").
    """
    from rnnfleet.checkpoint import load_checkpoint

    checkpoint = load_checkpoint(path)
    model = build_model(checkpoint["model_config"])
    model.load_state_dict(checkpoint["state_dict"])
    return model.to(device).eval(), checkpoint
