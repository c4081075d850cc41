"""An example of your own model for rnnfleet: a causal 1-D convolution over the window, then a GRU.

rnnfleet calls build(input_size=<number of features>, **<the other keys of config `model:`>)
once per training, trains what it returns with its usual loop, and saves only the weights;
forecasts call build again with the same keys. It must return a torch.nn.Module that maps a
batch of windows (batch, seq_len, input_size) to one output per window: (batch,) or (batch, 1).
"""

import torch
from torch import nn


class ConvGRU(nn.Module):
    def __init__(self, input_size: int, channels: int, kernel_size: int, hidden_size: int):
        super().__init__()
        self.left_padding = kernel_size - 1  # causal: no step sees a later bar
        self.conv = nn.Conv1d(input_size, channels, kernel_size)
        self.gru = nn.GRU(channels, hidden_size, batch_first=True)
        self.head = nn.Linear(hidden_size, 1)

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        steps = nn.functional.pad(windows.transpose(1, 2), (self.left_padding, 0))
        steps = torch.relu(self.conv(steps)).transpose(1, 2)
        outputs, _ = self.gru(steps)
        return self.head(outputs[:, -1])  # (batch, 1)


def build(input_size: int, channels: int = 16, kernel_size: int = 3, hidden_size: int = 32) -> nn.Module:
    return ConvGRU(input_size, channels, kernel_size, hidden_size)
