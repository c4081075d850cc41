"""Fixed-seed identity of the train path: two code trees train the same small fleets from the
same bars with the same seed, and every tensor of every model file and every metric (less the
timings) must be identical. A refactor that claims "no behaviour change" runs this.

    .venv/bin/python bench/identity_check.py --base 42b7815       # a worktree of that commit against this tree
    .venv/bin/python bench/identity_check.py --trees /a/tree /b/tree
    .venv/bin/python bench/identity_check.py --trees . --write fingerprints.json

Scenarios, each its own folder of generated bars (two datasets of day files, 1,440 bars a day,
a 16-unit LSTM, one thread a job, seed 0):
  scratch   the defaults otherwise
  heads     train.horizons [1, 3] and train.quantiles [0.1, 0.5, 0.9]
  folds     evaluate.folds 2 (walk-forward folds before the production fit)
  update    trained, then one more day of bars and a second run (an update of each model)
  fleet     train.init fleet (the fleet's pretraining, then fine-tunes)
What is compared: every tensor in models/**/*.pt (by SHA-256 of its bytes, with dtype and
shape), every other value in those files, metrics/*.json and results/forecasts.csv, with the
values that are times, durations or versions of the code left out. Exit status 1 on any
difference, each one printed.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO / "scripts"))

from rnnfleet.synthetic import synthetic_bars  # noqa: E402

BARS_PER_DAY = 1440
DAYS = 4
DATASETS = ("AAA", "BBB")

BASE_CONFIG = {
    "data_dir": "data",
    "datasets": {"files": "{dataset}-1m-*"},
    "model": {"cell": "lstm", "hidden_size": 16, "num_layers": 1, "dropout": 0.0},
    "train": {"seq_len": 20, "batch_size": 128, "epochs": 3, "patience": 2, "threads": 1, "seed": 0},
    "evaluate": {"bootstrap": 100},
}
SCENARIOS = {
    "scratch": {},
    "heads": {"train": {"horizons": [1, 3], "quantiles": [0.1, 0.5, 0.9]}},
    "folds": {"evaluate": {"folds": 2}},
    "update": {},
    "fleet": {"train": {"init": "fleet"}, "pretrain": {"train_windows": 200, "val_windows": 100}},
}
# Keys whose values are times, durations, paths, hosts or versions: they differ between runs.
VOLATILE = re.compile(
    r"(seconds|^time$|_time$|^made|_at$|date|duration|elapsed|host|versions?$|platform|pid$|rss|^at$|pretrained_sha256|settings_sha256)",
    re.I,
)

# The pretrained model's file holds its time of making, so its digest, and the words that quote
# it, differ from run to run; the tensors and settings behind them are compared.
DIGEST = re.compile(r"sha256 [0-9a-f]{12,64}")


def merged(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def write_days(data: Path, days: range) -> None:
    for number, dataset in enumerate(DATASETS):
        bars = synthetic_bars((DAYS + 1) * BARS_PER_DAY, seed=100 + number)
        for day in days:
            part = bars.iloc[day * BARS_PER_DAY : (day + 1) * BARS_PER_DAY]
            part.to_csv(data / f"{dataset}-1m-{day:02d}.csv", index=False, float_format="%.6f")


def run_snakemake(tree: Path, folder: Path) -> None:
    environment = dict(os.environ, PYTHONPATH=str(tree / "scripts"))
    command = [sys.executable, "-m", "snakemake", "-s", str(tree / "Snakefile"), "-d", str(folder), "--cores", "2"]
    result = subprocess.run(command, cwd=folder, capture_output=True, text=True, env=environment)
    if result.returncode != 0:
        raise SystemExit(f"snakemake ({tree}) in {folder} failed:\n{result.stderr[-3000:]}")


def value_fingerprint(value):
    """A JSON-able stand-in for value: tensors and arrays by dtype, shape and SHA-256 of their bytes."""
    if isinstance(value, torch.Tensor):
        data = value.detach().cpu().contiguous()
        raw = data.reshape(-1).view(torch.uint8) if data.dtype != torch.bool else data.to(torch.uint8)
        return {"dtype": str(data.dtype), "shape": list(data.shape), "sha256": hashlib.sha256(raw.numpy()).hexdigest()}
    if isinstance(value, dict):
        return {str(key): value_fingerprint(item) for key, item in value.items() if not VOLATILE.search(str(key))}
    if isinstance(value, (list, tuple)):
        return [value_fingerprint(item) for item in value]
    if isinstance(value, str) and value.startswith("{"):
        with contextlib.suppress(ValueError):
            return value_fingerprint(json.loads(value))
    if isinstance(value, str):
        return DIGEST.sub("sha256 <digest>", value)
    if hasattr(value, "tolist"):
        return value_fingerprint(torch.as_tensor(value))
    return value if isinstance(value, (int, float, str, bool)) or value is None else repr(value)


def folder_fingerprints(folder: Path) -> dict:
    found = {}
    for path in sorted((folder / "models").rglob("*.pt")):
        found[str(path.relative_to(folder))] = value_fingerprint(
            torch.load(path, map_location="cpu", weights_only=True)
        )
    for path in sorted((folder / "metrics").glob("*.json")):
        found[str(path.relative_to(folder))] = value_fingerprint(json.loads(path.read_text()))
    forecasts = folder / "results" / "forecasts.csv"
    if forecasts.exists():
        with forecasts.open() as rows:
            found["results/forecasts.csv"] = [value_fingerprint(row) for row in csv.DictReader(rows)]
    return found


def tree_fingerprints(tree: Path, scratch: Path) -> dict:
    """Every scenario run by the code of tree, in folders under scratch."""
    fingerprints = {}
    for name, extra in SCENARIOS.items():
        folder = scratch / "run" / name  # one path for every tree: paths in the files agree
        shutil.rmtree(folder, ignore_errors=True)
        (folder / "data").mkdir(parents=True)
        (folder / "config.yaml").write_text(json.dumps(merged(BASE_CONFIG, extra)))
        write_days(folder / "data", range(DAYS))
        run_snakemake(tree, folder)
        if name == "update":
            write_days(folder / "data", range(DAYS, DAYS + 1))
            run_snakemake(tree, folder)
        fingerprints[name] = folder_fingerprints(folder)
        print(f"{tree}: {name}: {len(fingerprints[name])} files", flush=True)
    return fingerprints


def differences(left, right, where: str = "") -> list[str]:
    if isinstance(left, dict) and isinstance(right, dict):
        found = [f"{where}/{key}: only in the first" for key in left.keys() - right.keys()]
        found += [f"{where}/{key}: only in the second" for key in right.keys() - left.keys()]
        for key in sorted(left.keys() & right.keys()):
            found += differences(left[key], right[key], f"{where}/{key}")
        return found
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        return [
            line
            for index, pair in enumerate(zip(left, right, strict=True))
            for line in differences(*pair, f"{where}[{index}]")
        ]
    return [] if left == right else [f"{where}: {left!r} != {right!r}"[:400]]


def base_worktree(commit: str, scratch: Path) -> Path:
    tree = scratch / f"base-{commit}"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(tree), commit], check=True)
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", help="a commit: its worktree is the first tree, this checkout the second")
    parser.add_argument("--trees", nargs="+", type=Path, help="one or two code trees (checkouts)")
    parser.add_argument("--write", type=Path, help="write the (first) tree's fingerprints here as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rnnfleet-identity-") as name:
        scratch = Path(name)
        trees = [base_worktree(args.base, scratch), REPO] if args.base else [tree.resolve() for tree in args.trees]
        try:
            prints = [tree_fingerprints(tree, scratch) for tree in trees]
        finally:
            if args.base:
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(trees[0])], check=False)
    if args.write:
        args.write.write_text(json.dumps(prints[0], indent=1, sort_keys=True))
    if len(prints) < 2:
        return
    found = differences(*prints)
    for line in found:
        print(line)
    tensors = json.dumps(prints[0]).count('"sha256"')
    print(f"{trees[0]} against {trees[1]}: {len(found)} difference(s) over {tensors} tensors and every metric")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
