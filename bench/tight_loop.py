"""The limit: a tight hand-written loop, 2 processes x 1 thread, bf16 autocast (float32 with --fp32).

python bench/tight_loop.py DATA_DIR OUT_DIR --epochs 2 --processes 2 [--fp32]
What a careful user writes for many small datasets on a CPU, in plain PyTorch: the files
shared out over `processes` processes of one torch thread each; per file the features
computed once into one contiguous tensor, windows as `unfold` views, a batch one gather by
a shuffled index, no per-step sync, the model in bfloat16 autocast where asked, glibc's
allocator told to keep freed memory (rnnfleet's own setting: without it each new model's
buffers come from fresh zeroed pages, bench/README.md has the cost; --glibc-defaults
leaves glibc's defaults); after the last epoch one validation pass and the state_dict
saved. The same features, normalisation, training windows (those rnnfleet trains on:
before the validation part, less its embargo) and model as rnnfleet, so validation losses
compare; no early stopping, no test period, no scores beyond the validation loss. Prints
one JSON line per model.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import multiprocessing
import os
import sys
import time

import torch
from naive_loop import Net, part_windows, read_features
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from rnnfleet.runner.device import tune_cpu_allocator  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--fp32", action="store_true", help="float32 throughout (no bf16 autocast)")
    parser.add_argument("--glibc-defaults", action="store_true", help="leave glibc's allocator settings as they are")
    parser.add_argument("--seq-len", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--cell", default="lstm")
    parser.add_argument("--val-fraction", type=float, default=0.2)
    parser.add_argument("--test-fraction", type=float, default=0.15)
    return parser.parse_args(argv)


def train_file(path: str, args: argparse.Namespace) -> dict:
    """One dataset: features once, the epochs, one validation pass, the state_dict saved."""
    started = time.perf_counter()
    torch.manual_seed(0)
    feats, target, val_start = read_features(path, args.val_fraction + args.test_fraction)
    features = torch.from_numpy(feats.astype("float32"))
    targets = torch.from_numpy(target.astype("float32"))
    windows = features.unfold(0, args.seq_len, 1).transpose(1, 2)  # window w ends at row w + seq_len - 1
    window_targets = targets[args.seq_len - 1 :]
    train_windows, val_windows = part_windows(len(target), val_start, args.seq_len, args.val_fraction)
    val_numbers = torch.arange(val_windows.start, val_windows.stop)

    model = Net(feats.shape[1], args.hidden_size, args.num_layers, args.dropout, args.cell)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    dtype = None if args.fp32 else torch.bfloat16
    for _ in range(args.epochs):
        model.train()
        order = torch.randperm(train_windows)
        for start in range(0, train_windows, args.batch_size):
            batch = order[start : start + args.batch_size]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is not None):
                predictions = model(windows[batch]).float()
            loss = nn.functional.mse_loss(predictions, window_targets[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is not None):
        val_loss = nn.functional.mse_loss(model(windows[val_numbers]).float(), window_targets[val_numbers]).item()
    name = os.path.splitext(os.path.basename(path))[0]
    torch.save(model.state_dict(), os.path.join(args.out_dir, name + ".pt"))
    steps = args.epochs * math.ceil(train_windows / args.batch_size)
    windows = {"train_windows": train_windows, "val_windows": len(val_numbers)}
    return {"dataset": name, "val_loss": val_loss, "steps": steps, **windows, "seconds": time.perf_counter() - started}


def one_thread(tune_allocator: bool) -> None:
    torch.set_num_threads(1)
    if tune_allocator:
        tune_cpu_allocator()


def main() -> None:
    args = parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    paths = sorted(glob.glob(os.path.join(args.data_dir, "*1m*.csv")))
    # fork: the children start with torch imported, as the parent has not used its threads yet
    with multiprocessing.get_context("fork").Pool(
        args.processes, initializer=one_thread, initargs=(not args.glibc_defaults,)
    ) as pool:
        for outcome in pool.imap_unordered(train_file_of_args, [(path, args) for path in paths]):
            print(json.dumps(outcome), flush=True)


def train_file_of_args(path_and_args: tuple[str, argparse.Namespace]) -> dict:
    return train_file(*path_and_args)


if __name__ == "__main__":
    main()
