"""Does a paired test of two single fits on one dataset measure the start, or the seed? On the
real fleet of ../shared/data (each pair cut to its last --days days, prepared by the real
`snakemake` with the repo's config.yaml defaults but the target), each dataset is trained
from scratch twice in this process, seeds 0 and 1, the same settings and windows, and the two
fits' test-window losses are compared by the Diebold-Mariano test the table used for
init_dm_pvalue (rnnfleet.scores.test_period.diebold_mariano, the evaluate.block_bars lag).
Nothing but the seed differs, so every "significant" p-value is the seed's.

    .venv/bin/python bench/bench_seed_against_seed.py --days 3 --target realised_volatility --horizon 30

Prints per dataset the two test skills and the p-value, then how many of the datasets the
test calls different at 5%; appends one JSON line to <out>/seed_against_seed.jsonl.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import yaml

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(BENCH))


def parse_args():
    from bench_fleet_start_real import FLEET_ARCHIVE

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archive", default=str(FLEET_ARCHIVE))
    parser.add_argument("--days", type=float, default=3.0)
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--target", default="realised_volatility")
    parser.add_argument("--horizon", type=int, default=30)
    parser.add_argument("--out", default=str(BENCH / "out"))
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    import torch
    from bench_fleet_start_real import write_pairs
    from bench_update import append_record

    from rnnfleet.prep.arrays_file import load_arrays
    from rnnfleet.scores.test_period import bootstrap_block, diebold_mariano, skill
    from rnnfleet.train.evaluate import train_and_evaluate
    from rnnfleet.train.loop import LoopSettings
    from rnnfleet.train.start_comparison import first_horizon_losses

    torch.set_num_threads(1)
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config |= {"data_dir": "data", "pattern": "*.csv", "target": args.target}
    config["train"] |= {"horizon": args.horizon}
    rows = []
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        names = write_pairs(args.archive, folder, args.days, args.pairs)
        (folder / "config.yaml").write_text(yaml.safe_dump(config))
        prepared = [f"prep/{Path(name).stem}.npz" for name in names]  # the arrays alone: no training
        command = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--cores", "2", *prepared]
        subprocess.run(command, cwd=folder, check=True, capture_output=True)
        loop = LoopSettings.of(config["train"] | {"device": "cpu"})
        block = int(config["evaluate"]["block_bars"])
        for path in sorted((folder / "prep").glob("*.npz")):
            arrays = load_arrays(path)
            fits = [
                train_and_evaluate(arrays, config["model"], replace(loop, seed=seed), torch.device("cpu"))
                for seed in (0, 1)
            ]
            losses = [first_horizon_losses(arrays, fit.evaluated, loop.seq_len) for fit in fits]
            statistic, p_value = diebold_mariano(losses[1][0], losses[0][0], bootstrap_block(block, len(losses[0][0])))
            rows.append(
                {
                    "dataset": path.stem,
                    "seed0_test_skill": skill(*losses[0]),
                    "seed1_test_skill": skill(*losses[1]),
                    "dm_stat": statistic,
                    "dm_pvalue": p_value,
                }
            )
            print(
                f"{path.stem}: test skill seed 0 {rows[-1]['seed0_test_skill']:+.4f}, seed 1 "
                f"{rows[-1]['seed1_test_skill']:+.4f}; Diebold-Mariano seed 1 - seed 0 {statistic:+.2f}, p {p_value:.3g}",
                flush=True,
            )
    called = sum(row["dm_pvalue"] < 0.05 for row in rows)
    print(
        f"{len(rows)} pairs x {args.days:g} days, {args.target} h{args.horizon}: seed 1 against seed 0 from scratch, "
        f"the same settings: called different at 5% on {called} of {len(rows)}"
    )
    append_record(
        args.out,
        "seed_against_seed",
        {"at": time.time(), "days": args.days, "target": args.target, "horizon": args.horizon, "rows": rows},
    )


if __name__ == "__main__":
    main()
