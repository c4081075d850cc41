"""A head start from the fleet (train.init fleet, rnnfleet.train.pretraining): does pretraining on the
whole fleet and fine-tuning each dataset's model beat training each from scratch, and at what
cost, on two generated fleets side by side in one run:

- `shared`: every dataset's returns follow one nonlinear response to its recent returns
  (x_t = 0.45 tanh(2 x_{t-1}) - 0.25 x_{t-2} |x_{t-3}| + noise), each dataset its own scale
  and noise level;
- `unrelated`: each dataset its own response (random coefficients and signs).

    .venv/bin/python bench/bench_transfer.py                       # 16 datasets of 3,000 bars
    .venv/bin/python bench/bench_transfer.py --datasets 64 --rows 3000
    .venv/bin/python bench/bench_transfer.py --memory 1000                # peak memory of the pretraining

Per fleet, in this process on one CPU thread (one torch thread, as a train job), the same
arrays, model and settings (LSTM 1x16, seq 30, batch 128, at most --epochs epochs, patience 3):
- scratch: each dataset trained from random weights (rnnfleet.train.evaluate.train_and_evaluate);
- fleet: rnnfleet.train.pretraining.pretrain on the array files, then each dataset trained from its
  weights with a fresh optimizer (train.finetune_lr = train.lr), as a train job does;
- one model for all: the pretrained model's own test skill on each dataset (a forward pass).
Test skill is rnnfleet.train.evaluate.score_test_period's (1 - test MSE / the naive forecast's) on
each dataset's test period, which neither training reads. Prints per fleet the mean test
skill of each, the paired difference fleet - scratch (mean, datasets better/worse, a
sign-flip permutation p-value over datasets), epochs, and wall and CPU time (the pretraining
included) with the ratios fleet / scratch; appends one JSON line to bench/out/transfer.jsonl.
Times are the trainings' own (no Snakemake, no job starts); on a shared machine the CPU
time is the one to compare (the wall time includes waiting for a core).

    .venv/bin/python bench/bench_transfer.py --workflow --datasets 64 --rows 3000

--workflow: instead, the workflow's own verdict. Per fleet, the same bars in a
fresh folder, a config.yaml with the same model and train settings plus train.init fleet,
train.compare_init true and the `pretrain:` windows, and the real `snakemake --cores
<cores>`; from results/metrics.csv: the fleet's verdict on its start (a sign test across
datasets, rnnfleet.scores.start_verdicts.fleet_start_verdict), the mean test skill of the kept models (test_skill; init: which start was
kept) against the fits from scratch (init_scratch_test_skill) and from the fleet's start
(init_fleet_test_skill), the paired difference kept - scratch (datasets better / worse, a
sign-flip p-value over datasets), and the run's wall time (the pretraining and job starts included).
Appends one JSON line with "mode": "workflow" to <out>/transfer.jsonl.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "scripts"))

MODEL = {"cell": "lstm", "hidden_size": 16, "num_layers": 1, "dropout": 0.0}
SEQ_LEN = 30


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", type=int, default=16)
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-windows", type=int, default=500, help="pretrain.train_windows")
    parser.add_argument("--val-windows", type=int, default=200, help="pretrain.val_windows")
    parser.add_argument("--out", default=str(BENCH / "out"))
    parser.add_argument(
        "--memory", type=int, metavar="N", help="instead: the pretraining's peak memory over N generated array files"
    )
    parser.add_argument("--memory-rows", type=int, default=20_000, help="rows of each of those files")
    parser.add_argument(
        "--workflow", action="store_true", help="instead: the workflow's own verdicts (snakemake, train.compare_init)"
    )
    parser.add_argument("--cores", type=int, default=os.cpu_count(), help="--workflow: snakemake --cores")
    return parser.parse_args()


def fleet_returns(kind: str, datasets: int, rows: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One array of finite log returns per dataset of a `shared` or `unrelated` fleet."""
    fleet = []
    while len(fleet) < datasets:
        if kind == "shared":
            a, b = 0.45, -0.25
        else:
            a, b = rng.uniform(-0.45, 0.45), rng.uniform(-0.25, 0.25)
        noise, scale = rng.uniform(0.8, 1.2), rng.uniform(0.5, 2.0) * 1e-3
        x = np.zeros(rows)
        shocks = rng.normal(0, noise, rows)
        with np.errstate(over="ignore", invalid="ignore"):
            for t in range(3, rows):
                x[t] = a * np.tanh(2 * x[t - 1]) + b * x[t - 2] * abs(x[t - 3]) + shocks[t]
        if np.isfinite(x).all():  # the quadratic term can run away after a few large shocks: drawn again
            fleet.append(scale * x)
    return fleet


def fleet_rng(kind: str, args) -> np.random.Generator:
    return np.random.default_rng(args.seed + (0 if kind == "shared" else 1))


def train_settings(args) -> dict:
    """The `train:` settings of every training here, in process and in the workflow."""
    return {
        "seq_len": SEQ_LEN,
        "batch_size": 128,
        "epochs": args.epochs,
        "lr": 2e-3,
        "patience": 3,
        "seed": 0,
        "amp": "off",
    }


def write_fleet_bars(kind: str, args, folder: Path, rng: np.random.Generator) -> dict[str, Path]:
    """{dataset: its CSV of bars in folder} of a generated `shared` or `unrelated` fleet."""
    from rnnfleet.synthetic import write_bars_of_returns

    paths = {}
    for number, returns in enumerate(fleet_returns(kind, args.datasets, args.rows, rng)):
        paths[f"{kind}{number:03d}"] = folder / f"{kind}{number:03d}.csv"
        write_bars_of_returns(paths[f"{kind}{number:03d}"], returns, rng, spread=2e-4, decimals=8)
    return paths


def test_skill(arrays, result) -> float:
    from rnnfleet.train.evaluate import score_test_period

    return score_test_period(arrays, result.evaluated, SEQ_LEN, cost_bps=0.0, block_bars=60, bootstrap=20)["test_skill"]


def sign_flip_pvalue(differences: np.ndarray, rng: np.random.Generator, draws: int = 20_000) -> float:
    """Two-sided p-value of the mean paired difference over datasets (random sign flips)."""
    observed = abs(differences.mean())
    signs = rng.choice([-1.0, 1.0], size=(draws, len(differences)))
    return float(((np.abs((signs * differences).mean(axis=1)) >= observed - 1e-15).sum() + 1) / (draws + 1))


def one_fleet(kind: str, args, folder: Path) -> dict:
    import torch

    from rnnfleet.prep.arrays_file import save_arrays
    from rnnfleet.prep.prepare import prepare_dataset
    from rnnfleet.train.evaluate import train_and_evaluate
    from rnnfleet.train.loop import LoopSettings, StartState, usable_windows, window_outputs, window_view
    from rnnfleet.train.models import build_model
    from rnnfleet.train.pretraining import pretrain, pretrain_settings, settings_fingerprint

    rng = fleet_rng(kind, args)
    device = torch.device("cpu")
    train = train_settings(args)
    loop = LoopSettings.of(train)
    arrays_of, paths = {}, {}
    for name, csv_path in write_fleet_bars(kind, args, folder, rng).items():
        arrays, _ = prepare_dataset(csv_path, seq_len=SEQ_LEN, horizon=1, val_fraction=0.15, test_fraction=0.15)
        arrays_of[name], paths[name] = arrays, str(folder / f"{name}.npz")
        save_arrays(arrays, paths[name])

    train_and_evaluate(
        arrays, MODEL, replace(loop, epochs=1), device
    )  # warm-up: the first training pays for torch's start
    scratch, scratch_clock, scratch_epochs = {}, Clock(), []
    for name, arrays in arrays_of.items():
        with scratch_clock:
            result = train_and_evaluate(arrays, MODEL, loop, device)
        scratch[name], scratch_epochs = test_skill(arrays, result), [*scratch_epochs, result.trained.epochs_run]

    pretrain_windows = {"train_windows": args.train_windows, "val_windows": args.val_windows}
    settings = pretrain_settings(MODEL, train, {}, pretrain_windows, {})
    pretrain_clock, fleet_clock = Clock(), Clock()
    with pretrain_clock, fleet_clock:
        checkpoint, lineage = pretrain(
            paths, {**settings, "settings_sha256": settings_fingerprint(settings)}, device, log=quiet
        )
    fleet, fleet_epochs, one_for_all = {}, [], {}
    pretrained = build_model(MODEL, arrays_of[next(iter(arrays_of))].features.shape[1], SEQ_LEN)
    pretrained.load_state_dict(checkpoint["state_dict"])
    for name, arrays in arrays_of.items():
        with fleet_clock:
            result = train_and_evaluate(arrays, MODEL, loop, device, StartState(checkpoint["state_dict"], None, 0))
        fleet[name], fleet_epochs = test_skill(arrays, result), [*fleet_epochs, result.trained.epochs_run]
        numbers = torch.from_numpy(usable_windows(arrays, SEQ_LEN).test)
        windows = window_view(torch.from_numpy(arrays.features), SEQ_LEN)
        outputs = window_outputs(pretrained, windows, None, numbers)
        one_for_all[name] = test_skill(
            arrays, result._replace(evaluated=replace(result.evaluated, test_outputs=outputs))
        )

    differences = np.array([fleet[name] - scratch[name] for name in arrays_of])
    return {
        "fleet": kind,
        "datasets": args.datasets,
        "rows": args.rows,
        "pretrain_windows": pretrain_windows,
        "scratch_mean_test_skill": statistics.mean(scratch.values()),
        "fleet_mean_test_skill": statistics.mean(fleet.values()),
        "one_for_all_mean_test_skill": statistics.mean(one_for_all.values()),
        "difference_mean": float(differences.mean()),
        "fleet_better": int((differences > 0).sum()),
        "fleet_worse": int((differences < 0).sum()),
        "sign_flip_pvalue": sign_flip_pvalue(differences, rng),
        "scratch_epochs_mean": statistics.mean(scratch_epochs),
        "fleet_epochs_mean": statistics.mean(fleet_epochs),
        "pretrain_epochs": lineage["scores"]["epochs_run"],
        "pretrain_val_skill": lineage["scores"]["skill"],
        "scratch_seconds": scratch_clock.wall,
        "fleet_seconds": fleet_clock.wall,
        "pretrain_seconds": pretrain_clock.wall,
        "time_ratio": fleet_clock.wall / scratch_clock.wall,
        "scratch_cpu_seconds": scratch_clock.cpu,
        "fleet_cpu_seconds": fleet_clock.cpu,
        "pretrain_cpu_seconds": pretrain_clock.cpu,
        "cpu_ratio": fleet_clock.cpu / scratch_clock.cpu,
    }


def workflow_fleet(kind: str, args, folder: Path) -> dict:
    """The workflow's own answer on one generated fleet: its bars in a fresh folder, a
    config.yaml with train.init fleet and train.compare_init, the real `snakemake`, then the
    fleet's verdict across datasets and the test skills: the kept model's (test_skill, where init says which start it kept), the
    fit from scratch's (init_scratch_test_skill) and the fit from the fleet's start's."""
    import yaml
    from bench_update import snakemake

    from rnnfleet.scores.start_verdicts import fleet_start_verdict

    folder.mkdir(parents=True)
    write_fleet_bars(kind, args, folder / "data", fleet_rng(kind, args))
    train = train_settings(args) | {"threads": 1, "init": "fleet", "compare_init": True}
    config = {"data_dir": "data", "pattern": "*.csv", "model": MODEL, "train": train}
    config["pretrain"] = {"train_windows": args.train_windows, "val_windows": args.val_windows}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    seconds = snakemake(folder, args.cores)
    with open(folder / "results" / "metrics.csv", newline="") as table:
        rows = list(csv.DictReader(table))
    verdict = fleet_start_verdict(
        [float(row["init_fleet_test_skill"]) - float(row["init_scratch_test_skill"]) for row in rows]
    )
    kept_gains = np.array([float(row["test_skill"]) - float(row["init_scratch_test_skill"]) for row in rows])
    return {
        "fleet": kind,
        "datasets": len(rows),
        "rows": args.rows,
        "seed": args.seed,
        "cores": args.cores,
        "better": verdict.better,
        "worse": verdict.worse,
        "sign_pvalue": verdict.p_value,
        "verdict": verdict.words,
        "kept_fleet": sum(row["init"] == "fleet" for row in rows),
        "kept_mean_test_skill": statistics.mean(float(row["test_skill"]) for row in rows),
        "scratch_mean_test_skill": statistics.mean(float(row["init_scratch_test_skill"]) for row in rows),
        "fleet_mean_test_skill": statistics.mean(float(row["init_fleet_test_skill"]) for row in rows),
        "kept_better": int((kept_gains > 0).sum()),
        "kept_worse": int((kept_gains < 0).sum()),
        "kept_sign_flip_pvalue": sign_flip_pvalue(kept_gains, np.random.default_rng(args.seed)),
        "seconds": seconds,
    }


def print_workflow_fleet(result: dict) -> None:
    gain = result["kept_mean_test_skill"] - result["scratch_mean_test_skill"]
    print(
        f"{result['fleet']:9s} {result['datasets']} x {result['rows']} bars, workflow: {result['verdict']}; "
        f"mean test skill kept {result['kept_mean_test_skill']:+.4f} (the fleet's start kept on "
        f"{result['kept_fleet']}), scratch {result['scratch_mean_test_skill']:+.4f}, fleet start "
        f"{result['fleet_mean_test_skill']:+.4f}; kept - scratch {gain:+.4f} (better on {result['kept_better']}, worse on "
        f"{result['kept_worse']}, sign-flip p {result['kept_sign_flip_pvalue']:.3f}); snakemake --cores {result['cores']}: {result['seconds']:.1f}s"
    )


class Clock:
    """Wall and this process's CPU seconds, summed over the spans timed (CPU time is the
    trainings' own work, which other work on a shared machine does not inflate)."""

    def __init__(self):
        self.wall = self.cpu = 0.0

    def __enter__(self):
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *_exc):
        self.wall += time.perf_counter() - self._wall
        self.cpu += time.process_time() - self._cpu


def quiet(*_args) -> None:
    pass


def generated_arrays(rows: int, rng: np.random.Generator):
    """PreparedArrays of random features and targets, split as preprocess splits (no CSV read)."""
    from rnnfleet.prep.arrays import PreparedArrays
    from rnnfleet.prep.split import SplitSettings

    split = SplitSettings(SEQ_LEN, 1, 0.15, 0.15).points(rows)
    return PreparedArrays(
        features=rng.standard_normal((rows, 5)).astype(np.float32),
        targets=rng.standard_normal(rows).astype(np.float32),
        feature_mean=np.zeros(5, np.float32),
        feature_std=np.ones(5, np.float32),
        target_std=1.0,
        train_end=split.train_end,
        val_start=split.val_start,
        val_end=split.val_end,
        test_start=split.test_start,
        last_close=100.0,
        horizon=1,
        feature_names=tuple(f"f{number}" for number in range(5)),
        row_times=np.datetime64("2024-01-01", "ns").astype(np.int64) + np.arange(rows, dtype=np.int64) * 60 * 10**9,
    )


def peak_memory(datasets: int, rows: int) -> dict:
    """The pretraining's peak resident memory over `datasets` array files of `rows` rows (one
    epoch), against the bytes of those files: it reads a bounded number of windows of each."""
    import resource  # Unix only: imported here, not at the top

    import torch

    from rnnfleet.prep.arrays_file import save_arrays
    from rnnfleet.train.pretraining import pretrain, pretrain_settings, settings_fingerprint

    rng = np.random.default_rng(0)
    train = {"seq_len": SEQ_LEN, "batch_size": 512, "epochs": 1, "lr": 2e-3, "patience": 1, "seed": 0, "amp": "off"}
    settings = pretrain_settings(MODEL, train, {}, {"train_windows": 2000, "val_windows": 500}, {})
    with tempfile.TemporaryDirectory() as folder:
        paths = {}
        for number in range(datasets):
            paths[f"d{number:05d}"] = str(Path(folder) / f"d{number:05d}.npz")
            save_arrays(generated_arrays(rows, rng), paths[f"d{number:05d}"])
        files_bytes = sum(Path(path).stat().st_size for path in paths.values())
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.perf_counter()
        _, lineage = pretrain(
            paths, {**settings, "settings_sha256": settings_fingerprint(settings)}, torch.device("cpu"), quiet
        )
        seconds = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    windows = sum(seen["train_windows"] + seen["val_windows"] for seen in lineage["bars"].values())
    return {
        "datasets": datasets,
        "rows": rows,
        "files_mb": files_bytes / 2**20,
        "peak_rss_before_mb": before / 1024,
        "peak_rss_mb": after / 1024,
        "windows": windows,
        "seconds": seconds,
    }


def main() -> None:
    args = parse_args()
    import torch

    import rnnfleet.train.loop

    torch.set_num_threads(1)
    rnnfleet.train.loop.log = quiet  # no per-epoch lines
    if args.memory:
        memory = peak_memory(args.memory, args.memory_rows)
        print(
            f"pretraining over {memory['datasets']} array files of {memory['rows']} rows ({memory['files_mb']:.0f} MB): "
            f"{memory['windows']} windows read, peak RSS {memory['peak_rss_mb']:.0f} MB "
            f"({memory['peak_rss_before_mb']:.0f} MB before it), {memory['seconds']:.1f}s for one epoch"
        )
        return
    from bench_update import append_record

    if args.workflow:
        with tempfile.TemporaryDirectory() as folder:
            results = [workflow_fleet(kind, args, Path(folder) / kind) for kind in ("shared", "unrelated")]
        for result in results:
            print_workflow_fleet(result)
        append_record(args.out, "transfer", {"at": time.time(), "mode": "workflow", "results": results})
        return
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for kind in ("shared", "unrelated"):
            results.append(one_fleet(kind, args, Path(folder)))
    for result in results:
        print(
            f"{result['fleet']:9s} {result['datasets']} x {result['rows']} bars: mean test skill scratch "
            f"{result['scratch_mean_test_skill']:+.4f}, fleet start {result['fleet_mean_test_skill']:+.4f}, "
            f"one model for all {result['one_for_all_mean_test_skill']:+.4f}; fleet - scratch "
            f"{result['difference_mean']:+.4f} (better on {result['fleet_better']}, worse on {result['fleet_worse']}, "
            f"sign-flip p {result['sign_flip_pvalue']:.3f}); epochs {result['scratch_epochs_mean']:.1f} vs "
            f"{result['fleet_epochs_mean']:.1f} (+ pretraining {result['pretrain_epochs']}); wall "
            f"{result['scratch_seconds']:.1f}s vs {result['fleet_seconds']:.1f}s "
            f"(pretraining {result['pretrain_seconds']:.1f}s): ratio {result['time_ratio']:.2f}; CPU "
            f"{result['scratch_cpu_seconds']:.1f}s vs {result['fleet_cpu_seconds']:.1f}s "
            f"(pretraining {result['pretrain_cpu_seconds']:.1f}s): ratio {result['cpu_ratio']:.2f}"
        )
    append_record(args.out, "transfer", {"at": time.time(), "results": results})


if __name__ == "__main__":
    main()
