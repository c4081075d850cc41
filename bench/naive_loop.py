"""Baseline: the sequential loop users write by hand (what rnnfleet replaces).

python bench/naive_loop.py DATA_DIR OUT_DIR --seq-len 60 --batch-size 128 --epochs 3 ...
Per file: pandas.read_csv, features, windows built in a Python loop, TensorDataset +
DataLoader(shuffle=True), batches moved to the device, train, torch.save the state_dict.
torch keeps its default thread settings. Same features, split (training, validation and
rnnfleet's default test period held out, an embargo between them), normalisation and model
as rnnfleet, so validation losses compare and both train on the same windows. Prints one
JSON line per model.
"""

import argparse
import glob
import json
import os
import time

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers, dropout, cell):
        super().__init__()
        rnn = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn = rnn(input_size, hidden_size, num_layers, dropout=dropout, batch_first=True)
        self.fc = nn.Linear(hidden_size, 1)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc(out[:, -1]).squeeze(-1)


def read_features(path: str, val_fraction: float) -> tuple[np.ndarray, np.ndarray, int]:
    """The bars of a CSV file -> (normalised features, scaled next-bar log return, first
    validation row): rnnfleet's default features, normalised by the training part."""
    df = pd.read_csv(path)
    df = df.sort_values("timestamp").drop_duplicates("timestamp")
    prev_close = df["close"].shift(1)
    feats = pd.DataFrame(
        {
            "o": np.log(df["open"] / prev_close),
            "h": np.log(df["high"] / prev_close),
            "l": np.log(df["low"] / prev_close),
            "c": np.log(df["close"] / prev_close),
            "v": np.log1p(df["volume"]),
        }
    )
    target = np.log(df["close"].shift(-1) / df["close"])
    feats, target = feats.iloc[1:-1].to_numpy(), target.iloc[1:-1].to_numpy()
    split = int(round(len(target) * (1 - val_fraction)))
    mean, std = feats[:split].mean(0), feats[:split].std(0)
    return (feats - mean) / std, target / target[: split - 1].std(), split


def part_windows(rows: int, val_start: int, seq_len: int, val_fraction: float) -> tuple[int, range]:
    """(training windows, validation window numbers) of rnnfleet's split of `rows` feature
    rows whose validation part starts at val_start: an embargo (seq_len + horizon + warm-up
    rows) before validation and before the test part. Window w ends at row w + seq_len - 1."""
    embargo = seq_len + 2
    val_rows = int(round(rows * val_fraction))
    first = val_start - (seq_len - 1)
    return first - embargo, range(first, first + val_rows - embargo)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("data_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--seq-len", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--cell", default="lstm")
    parser.add_argument("--val-fraction", type=float, default=0.2)
    parser.add_argument("--test-fraction", type=float, default=0.15)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    os.makedirs(args.out_dir, exist_ok=True)
    torch.manual_seed(0)

    for path in sorted(glob.glob(os.path.join(args.data_dir, "*1m*.csv"))):
        started = time.time()
        feats, target, val_start = read_features(path, args.val_fraction + args.test_fraction)
        xs, ys = [], []
        for end in range(args.seq_len - 1, len(target)):
            xs.append(feats[end - args.seq_len + 1 : end + 1])
            ys.append(target[end])
        x = torch.tensor(np.array(xs), dtype=torch.float32)
        y = torch.tensor(np.array(ys), dtype=torch.float32)
        n_train, val_windows = part_windows(len(target), val_start, args.seq_len, args.val_fraction)
        loader = DataLoader(TensorDataset(x[:n_train], y[:n_train]), batch_size=args.batch_size, shuffle=True)

        model = Net(feats.shape[1], args.hidden_size, args.num_layers, args.dropout, args.cell).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
        loss_fn = nn.MSELoss()
        for _ in range(args.epochs):
            model.train()
            for xb, yb in loader:
                xb, yb = xb.to(device), yb.to(device)
                opt.zero_grad()
                loss = loss_fn(model(xb), yb)
                loss.backward()
                opt.step()
        model.eval()
        with torch.no_grad():
            val_x, val_y = x[val_windows.start : val_windows.stop], y[val_windows.start : val_windows.stop]
            val_loss = loss_fn(model(val_x.to(device)), val_y.to(device)).item()
        name = os.path.splitext(os.path.basename(path))[0]
        torch.save(model.state_dict(), os.path.join(args.out_dir, name + ".pt"))
        windows = {"train_windows": n_train, "val_windows": len(val_windows)}
        print(
            json.dumps({"dataset": name, "val_loss": val_loss, **windows, "seconds": time.time() - started}), flush=True
        )


if __name__ == "__main__":
    main()
