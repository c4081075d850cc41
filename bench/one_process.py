"""Reference: rnnfleet's own functions called in one warm process, one dataset after another.

python bench/one_process.py DATA_DIR OUT_DIR CONFIG_JSON --threads T
No orchestration: the same preprocess_one + train_one the workflow runs, minus Snakemake.
"""

import argparse
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))

from rnnfleet.runner.device import tune_cpu_allocator  # noqa: E402

tune_cpu_allocator()

from snakemake.utils import validate  # noqa: E402

from rnnfleet.runner.jobs import preprocess_one, train_one  # noqa: E402
from rnnfleet.train.fit import Settings  # noqa: E402

SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "schemas", "config.schema.yaml")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("data_dir")
    parser.add_argument("out_dir")
    parser.add_argument("config_json", help="the workflow's config as JSON (model, train, preprocess)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    config = json.loads(args.config_json)
    validate(config, schema=SCHEMA)  # the schema's defaults filled in, as the workflow's config
    train = {k: v for k, v in config["train"].items() if k not in ("threads", "gpu_mem", "warm_workers")}
    for path in sorted(glob.glob(os.path.join(args.data_dir, config.get("pattern", "*1m*.csv")))):
        name = os.path.splitext(os.path.basename(path))[0]
        started = time.time()
        arrays_path = os.path.join(args.out_dir, "prep", name + ".npz")
        preprocess_one(
            [path],
            arrays_path,
            seq_len=train["seq_len"],
            horizon=train["horizon"],
            val_fraction=config["preprocess"]["val_fraction"],
        )
        train_one(
            dataset=name,
            arrays_path=arrays_path,
            model_path=os.path.join(args.out_dir, "models", name + ".pt"),
            metrics_path=os.path.join(args.out_dir, "metrics", name + ".json"),
            settings=Settings(config["model"], train, config["evaluate"], config["update"], config["columns"]),
            threads=args.threads,
            gpu_mem_gb=config["train"]["gpu_mem"],
        )
        print(json.dumps({"dataset": name, "seconds": time.time() - started}), flush=True)


if __name__ == "__main__":
    main()
