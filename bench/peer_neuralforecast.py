"""The peer: neuralforecast's LSTM fitted once per dataset, run by bench/bench_peers.py in its own venv.

python bench/peer_neuralforecast.py ARRAYS_DIR OUT_DIR --processes 2 --epochs 20 --patience 3 --precision bf16-mixed ...
ARRAYS_DIR holds one <dataset>.npz per dataset as bench_peers.py exports it from rnnfleet's
array files: the same normalised features and scaled targets, and the rows where the
validation and test parts start. Each dataset is one series: y at row t + 1 is the target of
the window ending at row t (so a one-step forecast made at row t sees what rnnfleet's
window sees: the features, the close's return among them, up to row t), the other features
historical exogenous columns. One fit per dataset (cross_validation, refit off): trained on
the rows before the test part, the last validation-part rows for early stopping (checked
once per epoch's worth of steps, patience in checks), then one-step forecasts over every
test row. The files shared out over `processes` processes of one torch thread each. Writes
<dataset>.json (the test forecasts in row order, seconds) to OUT_DIR.
"""

from __future__ import annotations

import argparse
import glob
import json
import logging
import math
import multiprocessing
import os
import time
import warnings

import numpy as np


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("arrays_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--patience", type=int, default=3)
    parser.add_argument("--seq-len", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument(
        "--precision", default="32-true", help='Lightning\'s precision: 32-true (its default) or "bf16-mixed"'
    )
    return parser.parse_args()


def series_frame(features: np.ndarray, targets: np.ndarray):
    """The dataset as one neuralforecast series (rows + 1 time steps): y[t + 1] = targets[t],
    exogenous x<i>[t] = features[t, i] (the last step's features are never an input)."""
    import pandas as pd

    rows = len(targets)
    frame = pd.DataFrame({"unique_id": "s", "ds": np.arange(rows + 1), "y": np.r_[0.0, targets].astype(np.float64)})
    padded = np.vstack([features, np.zeros((1, features.shape[1]), features.dtype)])
    for column in range(features.shape[1]):
        frame[f"x{column}"] = padded[:, column].astype(np.float64)
    return frame


def fit_and_forecast(path: str, args: argparse.Namespace) -> dict:
    """One dataset: one fit, then the one-step forecast of every test row."""
    from neuralforecast import NeuralForecast
    from neuralforecast.losses.pytorch import MSE
    from neuralforecast.models import LSTM

    started = time.perf_counter()
    arrays = np.load(path)
    features, targets = arrays["features"], arrays["targets"]
    val_start, test_start, rows = int(arrays["val_start"]), int(arrays["test_start"]), len(targets)
    train_windows = int(arrays["train_windows"])
    steps_per_epoch = math.ceil(train_windows / args.batch_size)
    exogenous = [f"x{column}" for column in range(features.shape[1])]
    model = LSTM(
        h=1,
        input_size=args.seq_len,
        encoder_n_layers=args.num_layers,
        encoder_hidden_size=args.hidden_size,
        decoder_hidden_size=args.hidden_size,
        decoder_layers=1,
        hist_exog_list=exogenous,
        loss=MSE(),
        valid_loss=MSE(),
        learning_rate=args.lr,
        max_steps=args.epochs * steps_per_epoch,
        val_check_steps=steps_per_epoch,
        early_stop_patience_steps=args.patience,
        batch_size=1,
        windows_batch_size=args.batch_size,
        inference_windows_batch_size=2048,
        scaler_type="identity",  # the arrays are normalised by their training part already
        random_seed=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        accelerator="cpu",
        precision=args.precision,  # a Lightning Trainer argument, passed on by neuralforecast
        devices=1,
    )
    forecaster = NeuralForecast(models=[model], freq=1)
    forecasts = forecaster.cross_validation(
        df=series_frame(features, targets),
        n_windows=None,
        val_size=test_start - val_start,
        test_size=rows - test_start,
        step_size=1,
        refit=False,
        verbose=False,
    ).sort_values("ds")
    name = os.path.splitext(os.path.basename(path))[0]
    outcome = {
        "dataset": name,
        "test_forecasts": forecasts["LSTM"].astype(float).tolist(),  # rows test_start .. rows - 1
        "seconds": time.perf_counter() - started,
    }
    with open(os.path.join(args.out_dir, name + ".json"), "w") as handle:
        json.dump(outcome, handle)
    return {"dataset": name, "seconds": outcome["seconds"]}


def one_quiet_thread() -> None:
    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    for name in ("pytorch_lightning", "lightning", "lightning.pytorch", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)


def fit_of(path_and_args: tuple[str, argparse.Namespace]) -> dict:
    return fit_and_forecast(*path_and_args)


def main() -> None:
    args = parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    paths = sorted(glob.glob(os.path.join(args.arrays_dir, "*.npz")))
    with multiprocessing.get_context("spawn").Pool(args.processes, initializer=one_quiet_thread) as pool:
        for outcome in pool.imap_unordered(fit_of, [(path, args) for path in paths]):
            print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
