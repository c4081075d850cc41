"""The fleet's head start on a real fleet: the 16 Binance pairs of ../shared/data (the same
43,200 minutes each), each cut to its last --days days, trained by the real `snakemake` with
train.init fleet and train.compare_init true (every dataset also trained from scratch in the
same job), the repo's config.yaml defaults otherwise, plus any --set.

    .venv/bin/python bench/bench_fleet_start_real.py --days 3 --target realised_volatility --horizon 30
    .venv/bin/python bench/bench_fleet_start_real.py --days 30 --target log_return --horizon 1
    .venv/bin/python bench/bench_fleet_start_real.py --days 3 --target realised_volatility --horizon 30 \
        --set pretrain.train_windows=5000 --set train.finetune_lr=0.0003

Prints, from results/metrics.csv and the pretraining's lineage: how many datasets the
pretraining used and left out; the mean test skill of the fits from the fleet's start
(init_fleet_test_skill), from scratch (init_scratch_test_skill), of the models kept by
validation's choice (test_skill) and of the pretrained model alone; on how many datasets the
start's fit and the kept model beat scratch, with a sign test across datasets
(rnnfleet.scores.start_verdicts.fleet_start_verdict); how many fits from the start kept the
pretrained weights (best epoch 0); and the fleet's training time from the start (the
pretraining plus the fine-tunes) against from scratch (the fits' own seconds). Appends one
JSON line to <out>/fleet_start_real.jsonl.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO / "scripts"))
FLEET_ARCHIVE = REPO.parent / "shared" / "data" / "realfleet-binance-2021.tar.xz"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archive", default=str(FLEET_ARCHIVE))
    parser.add_argument("--days", type=float, default=3.0, help="each pair's last this many days")
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--target", default="realised_volatility")
    parser.add_argument("--horizon", type=int, default=30)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a dotted config key")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--out", default=str(BENCH / "out"))
    return parser.parse_args()


def write_pairs(archive: str, folder: Path, days: float, pairs: int) -> list[str]:
    """Each pair's CSV cut to its last `days` days of minutes (header kept) in folder/data."""
    data = folder / "data"
    data.mkdir(parents=True)
    names = []
    with tarfile.open(archive) as packed:
        members = sorted((m for m in packed.getmembers() if m.name.endswith("_1m.csv")), key=lambda m: m.name)
        for member in members[:pairs]:
            lines = packed.extractfile(member).read().decode().splitlines()
            kept = [lines[0], *lines[1:][-int(days * 1440) :]]
            name = Path(member.name).name
            (data / name).write_text("\n".join(kept) + "\n")
            names.append(name)
    return names


def with_setting(config: dict, dotted: str) -> None:
    key, value = dotted.split("=", 1)
    *path, last = key.split(".")
    section = config
    for part in path:
        section = section.setdefault(part, {})
    section[last] = yaml.safe_load(value)


def main() -> None:
    args = parse_args()
    from bench_update import append_record, snakemake

    from rnnfleet.scores.start_verdicts import fleet_start_verdict

    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config |= {"data_dir": "data", "pattern": "*.csv", "target": args.target}
    config["train"] |= {"horizon": args.horizon, "init": "fleet", "compare_init": True, "threads": 1}
    config["export"] = {**config.get("export", {}), "onnx": False}
    for dotted in args.set:
        with_setting(config, dotted)
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        write_pairs(args.archive, folder, args.days, args.pairs)
        (folder / "config.yaml").write_text(yaml.safe_dump(config))
        seconds = snakemake(folder, args.cores)
        with open(folder / "results" / "metrics.csv", newline="") as table:
            rows = [row for row in csv.DictReader(table) if row.get("init_scratch_test_skill")]
        lineage = json.loads((folder / "models" / ".fleet" / "pretrained.json").read_text())
        with open(folder / "benchmarks" / "pretrain" / "fleet.tsv") as tsv:
            pretrain_seconds = float(list(csv.DictReader(tsv, delimiter="\t"))[0]["s"])

    def column(name: str) -> np.ndarray:
        return np.array([float(row[name]) for row in rows])

    fleet, scratch, kept = column("init_fleet_test_skill"), column("init_scratch_test_skill"), column("test_skill")
    verdict = fleet_start_verdict(list(fleet - scratch))
    kept_verdict = fleet_start_verdict(list(kept - scratch))
    fleet_seconds = pretrain_seconds + column("init_fleet_seconds").sum()
    scratch_seconds = column("init_scratch_seconds").sum()
    result = {
        "days": args.days,
        "target": args.target,
        "horizon": args.horizon,
        "set": args.set,
        "datasets": len(rows),
        "pretrained_on": len(lineage["trained_on"]),
        "left_out": lineage["left_out"],
        "fleet_mean_test_skill": float(fleet.mean()),
        "scratch_mean_test_skill": float(scratch.mean()),
        "kept_mean_test_skill": float(kept.mean()),
        "pretrained_mean_test_skill": statistics.mean(float(row["init_pretrained_test_skill"]) for row in rows),
        "fleet_better": verdict.better,
        "fleet_sign_p": verdict.p_value,
        "fleet_mean_difference": verdict.mean,
        "fleet_interval": [verdict.low, verdict.high],
        "kept_better": kept_verdict.better,
        "kept_sign_p": kept_verdict.p_value,
        "kept_fleet": sum(row["init"] == "fleet" for row in rows),
        "best_epoch_0": sum(row.get("init_fleet_best_epoch") == "0" for row in rows),
        "pretrain_seconds": pretrain_seconds,
        "fleet_seconds": fleet_seconds,
        "scratch_seconds": scratch_seconds,
        "time_ratio": fleet_seconds / scratch_seconds,
        "snakemake_seconds": seconds,
    }
    print(
        f"{len(rows)} pairs x {args.days:g} days, {args.target} h{args.horizon} {' '.join(args.set)}: pretraining on "
        f"{result['pretrained_on']} ({len(result['left_out'])} left out); mean test skill from the start "
        f"{result['fleet_mean_test_skill']:+.4f}, scratch {result['scratch_mean_test_skill']:+.4f}, kept "
        f"{result['kept_mean_test_skill']:+.4f} (the start kept on {result['kept_fleet']}), the pretrained model "
        f"alone {result['pretrained_mean_test_skill']:+.4f}; start - scratch {verdict.mean:+.4f} "
        f"[{verdict.low:+.4f}, {verdict.high:+.4f}], better on {verdict.better} of {len(rows)} (sign test p "
        f"{verdict.p_value:.3f}); kept - scratch {kept_verdict.mean:+.4f}, better on {kept_verdict.better} "
        f"(p {kept_verdict.p_value:.3f}); best epoch 0 on {result['best_epoch_0']}; time from the start "
        f"{fleet_seconds:.0f}s (pretraining {pretrain_seconds:.0f}s) vs scratch {scratch_seconds:.0f}s: ratio "
        f"{result['time_ratio']:.2f}; snakemake {seconds:.0f}s"
    )
    append_record(args.out, "fleet_start_real", {"at": time.time(), **result})


if __name__ == "__main__":
    main()
