"""The peers: rnnfleet against neuralforecast's LSTM fitted once per dataset, same data, one run.

    .venv/bin/python bench/bench_peers.py                        # 24 one-day datasets, both precisions each
    .venv/bin/python bench/bench_peers.py --datasets 6 --days 30  # multi-day datasets
    .venv/bin/python bench/bench_peers.py --datasets 48 --variants snakemake
    .venv/bin/python bench/bench_peers.py --datasets 2 --epochs 1 --no-peer   # rnnfleet's side only

Generated datasets of --days days (1,440 one-minute bars a day). rnnfleet trains them with the
workflow's defaults (LSTM 64x2, seq 60, batch 128, 20 epochs, early stopping with patience
3; `snakemake --cores <cores>` in a fresh folder: `snakemake`, and `fp32` with train.amp:
off). The peer, neuralforecast's `LSTM` (bench/peer_neuralforecast.py, <cores> processes x
1 thread), is fitted once per dataset on rnnfleet's own arrays (the same normalised
features, targets, training, validation and test rows), with the same window length,
batch, learning rate, epochs (as steps: an epoch's worth of windows per validation check)
and patience, and forecasts every test window one step ahead; in float32 (`neuralforecast`,
Lightning's default) and in bf16 (`neuralforecast-bf16`, precision "bf16-mixed"), as rnnfleet
runs in both (`fp32`, and `snakemake` with train.amp auto: bf16 where the CPU computes it
natively). The ratios at equal precision come first: the others mix the precision's speed-up
into the comparison. Both test skills are
computed on the same test windows against the same naive baseline (rnnfleet.scores.test_period).
The peer's wall time is its whole program (imports, processes, fits, forecasts), as
rnnfleet's is its whole run (Snakemake, preprocessing, training, scores, table, figures).

neuralforecast is never a dependency of rnnfleet: the bench installs it (with this venv's
torch) into a venv of its own, --peers-venv (default bench/out/peers-venv, made once).
Prints the models/min of each side, their ratio and the mean test skills; appends one JSON
line to bench/out/peers.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO / "scripts"))

from bench_speed import metrics_of, timed  # noqa: E402

from rnnfleet.synthetic import write_synthetic_csv  # noqa: E402

BARS_PER_DAY = 1440
PEER = "neuralforecast"
# The peer's sides: Lightning's precision of each.
PEER_PRECISIONS = {PEER: "32-true", f"{PEER}-bf16": "bf16-mixed"}
NEURALFORECAST = "neuralforecast==3.3.0"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", type=int, default=24)
    parser.add_argument("--days", type=int, default=1, help="days of bars a dataset")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--patience", type=int, default=3)
    parser.add_argument(
        "--variants",
        default=f"snakemake,{PEER}-bf16,fp32,{PEER}",
        help=f"the sides in the order run: snakemake (amp auto), fp32 (amp off), {PEER} (float32), {PEER}-bf16 "
        "(bf16-mixed); a peer's side after a side of rnnfleet's",
    )
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    parser.add_argument(
        "--no-peer", action="store_true", help=f"rnnfleet's sides and the arrays' export only, no {PEER}"
    )
    parser.add_argument("--peers-venv", default=str(BENCH / "out" / "peers-venv"))
    parser.add_argument("--out", default=str(BENCH / "out"))
    return parser.parse_args(argv)


def peers_python(venv: Path) -> Path:
    """The python of a venv holding neuralforecast and this venv's torch, made if missing."""
    import torch

    python = venv / "bin" / "python"
    installed = venv / ".installed"
    if installed.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    # this torch build first (CPU or CUDA as here): a plain install would pull another one
    subprocess.run([*pip, "--no-deps", f"torch=={torch.__version__}", "--extra-index-url", TORCH_INDEX], check=True)
    subprocess.run([*pip, NEURALFORECAST, f"torch=={torch.__version__}"], check=True)
    installed.touch()
    return python


def workflow_config(args: argparse.Namespace, data_dir: Path, amp: str) -> dict:
    """The workflow's defaults, but for the epochs and patience of this bench."""
    return {
        "data_dir": str(data_dir),
        "train": {"epochs": args.epochs, "patience": args.patience, "amp": amp, "threads": 1},
    }


def run_rnnfleet(args: argparse.Namespace, data_dir: Path, work: Path, amp: str) -> dict:
    import yaml

    work.mkdir(parents=True)
    (work / "config.yaml").write_text(yaml.safe_dump(workflow_config(args, data_dir, amp)))
    command = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work)]
    seconds, _ = timed([*command, "--cores", str(args.cores)], cwd=work)
    metrics = metrics_of(work)
    return {
        "seconds": seconds,
        "test_skill": {m["dataset"]: m["test_skill"] for m in metrics},
        "epochs_run": statistics.mean(m["epochs_run"] for m in metrics),
        "amp": sorted({m["amp"] for m in metrics}),
    }


def export_arrays(prep: Path, folder: Path, seq_len: int) -> dict[str, dict]:
    """rnnfleet's array files as plain .npz for the peer (features, targets, where the
    validation and test parts start, the training windows); returns each dataset's test rows
    and targets, for scoring the peer's forecasts."""
    import numpy as np

    from rnnfleet.prep.arrays_file import load_arrays
    from rnnfleet.train.loop import usable_windows

    folder.mkdir(parents=True, exist_ok=True)
    tests = {}
    for path in sorted(prep.glob("*.npz")):
        arrays = load_arrays(path)
        windows = usable_windows(arrays, seq_len)
        np.savez(
            folder / path.name,
            features=arrays.features,
            targets=arrays.targets,
            val_start=arrays.val_start,
            test_start=arrays.split.test_start,
            train_windows=len(windows.train),
        )
        ends = windows.test + (seq_len - 1)
        tests[path.stem] = {"rows": ends - arrays.split.test_start, "actual": arrays.targets[ends]}
    return tests


def peer_skill(forecasts: list[float], test: dict) -> float:
    """The test skill of the peer's forecasts on rnnfleet's test windows, against the naive
    baseline of the log-return target (a zero return, 0 in scaled units)."""
    import numpy as np

    from rnnfleet.scores import test_period

    outputs = np.asarray(forecasts, np.float64)[test["rows"]]
    losses = test_period.window_losses(outputs, test["actual"], classification=False)
    naive = test_period.window_losses(np.zeros_like(outputs), test["actual"], classification=False)
    return test_period.skill(losses, naive)


def run_peer(args: argparse.Namespace, python: Path, arrays: Path, work: Path, tests: dict, precision: str) -> dict:
    command = [str(python), str(BENCH / "peer_neuralforecast.py"), str(arrays), str(work)]
    command += ["--processes", str(args.cores), "--epochs", str(args.epochs), "--patience", str(args.patience)]
    seconds, _ = timed([*command, "--precision", precision])
    skills = {}
    for dataset, test in tests.items():
        outcome = json.loads((work / f"{dataset}.json").read_text())
        skills[dataset] = peer_skill(outcome["test_forecasts"], test)
    return {"seconds": seconds, "test_skill": skills, "precision": "bf16" if "bf16" in precision else "fp32"}


def side_precision(outcome: dict) -> str:
    """bf16 or fp32: what a side computed in (rnnfleet's from its metrics' amp)."""
    if "precision" in outcome:
        return outcome["precision"]
    return "bf16" if outcome["amp"] == ["bf16"] else "fp32"


def load_text() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def print_comparison(args: argparse.Namespace, results: dict[str, dict]) -> dict:
    """Each side's models/min and mean test skill; each rnnfleet side's ratio to the peer."""
    summary: dict = {
        "datasets": args.datasets,
        "days": args.days,
        "epochs": args.epochs,
        "patience": args.patience,
        "sides": {},
    }
    print(f"\n{'side':<16}{'seconds':>9}{'models/min':>12}{'mean test skill':>17}")
    for name, outcome in results.items():
        per_min = args.datasets * 60 / outcome["seconds"]
        skill = statistics.mean(outcome["test_skill"].values())
        summary["sides"][name] = {**outcome, "models_per_min": per_min, "mean_test_skill": skill}
        print(f"{name:<16}{outcome['seconds']:9.1f}{per_min:12.1f}{skill:+17.4f}")
    ours = {name: side for name, side in summary["sides"].items() if name not in PEER_PRECISIONS}
    peers = {name: side for name, side in summary["sides"].items() if name in PEER_PRECISIONS}
    pairs = [(name, peer) for name in ours for peer in peers]
    # Equal precision first: the comparison of the two programs; then across precisions.
    pairs.sort(key=lambda pair: side_precision(ours[pair[0]]) != side_precision(peers[pair[1]]))
    for name, peer in pairs:
        side, other = ours[name], peers[peer]
        ratio = side["models_per_min"] / other["models_per_min"]
        difference = side["mean_test_skill"] - other["mean_test_skill"]
        precisions = f"{side_precision(side)} / {side_precision(other)}"
        equal = side_precision(side) == side_precision(other)
        summary[f"{name}_vs_{peer}"] = {
            "ratio": ratio,
            "test_skill_difference": difference,
            "precisions": precisions,
            "equal_precision": equal,
        }
        print(
            f"{'equal precision' if equal else 'across precisions'} ({precisions}): {name} / {peer}: {ratio:.2f}x, "
            f"test skill {difference:+.4f} (rnnfleet - {peer})"
        )
    return summary


def main(argv=None) -> None:
    args = parse_args(argv)
    python = None if args.no_peer else peers_python(Path(args.peers_venv))
    root = Path(tempfile.mkdtemp(prefix="rnnfleet-peers-"))
    data_dir = root / "data"
    rows = args.days * BARS_PER_DAY
    for index in range(args.datasets):
        write_synthetic_csv(data_dir / f"S{index:04d}_1m.csv", rows, 1000 + index)
    print(
        f"{args.datasets} datasets x {rows} bars, LSTM 64x2, seq 60, batch 128, {args.epochs} epochs, "
        f"patience {args.patience}, {args.cores} cores; load {load_text()}"
    )
    results: dict[str, dict] = {}
    amps = {"snakemake": "auto", "fp32": "off"}
    sides = [name for name in args.variants.split(",") if name in amps or python is not None]
    if sides[0] in PEER_PRECISIONS:
        raise SystemExit(f"{PEER} trains on rnnfleet's arrays: name a side of rnnfleet's before it in --variants")
    tests: dict[str, dict] = {}
    for name in sides:
        if name in PEER_PRECISIONS:
            peer_work = root / name
            results[name] = run_peer(args, python, root / "peer-arrays", peer_work, tests, PEER_PRECISIONS[name])
        else:
            results[name] = run_rnnfleet(args, data_dir, root / name, amps[name])
            if len(results) == 1:  # the peer trains on the arrays of the first side
                tests = export_arrays(root / name / "prep", root / "peer-arrays", seq_len=60)
        print(f"  {name:<14}{results[name]['seconds']:7.1f} s  load {load_text()}", flush=True)
    summary = print_comparison(args, results)
    summary["load_after"] = load_text()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with open(Path(args.out) / "peers.jsonl", "a") as handle:
        handle.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), **summary}) + "\n")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
