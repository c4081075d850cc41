"""How much GPU memory to declare per training, measured on this machine's GPU.

    .venv/bin/python scripts/size_gpu_mem.py                  # largest dataset in config.yaml's data_dir
    .venv/bin/python scripts/size_gpu_mem.py --csv data/EURUSD_1m.csv --device 1

Trains --steps batches of one dataset with config.yaml's model and training settings,
measures the peak GPU memory of that training (allocator peak + CUDA context and
libraries), and prints the train.gpu_mem to declare, the --resources gpu_mem= that fits the
visible cards, and how many trainings that runs at once. Exits 2, saying why, without CUDA.
"""

import argparse
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from rnnfleet.runner.sizing import GIB, arrays_for_steps, declared_gb, measure_footprint, no_cuda_reason, plan  # noqa: E402
from rnnfleet.settings import preprocess_settings  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", default="config.yaml")
    parser.add_argument("--csv", help="dataset to measure (default: the largest one in data_dir)")
    parser.add_argument("--device", type=int, default=0, help="CUDA device index to measure on")
    parser.add_argument("--steps", type=int, default=20, help="training batches to run")
    parser.add_argument("--margin", type=float, default=0.15, help="headroom added to the measured peak")
    return parser.parse_args()


def largest_dataset(config: dict) -> Path:
    candidates = [path for path in Path(config["data_dir"]).glob(config["pattern"]) if path.is_file()]
    if not candidates:
        sys.exit(f"no file matching '{config['pattern']}' in data_dir '{config['data_dir']}': pass --csv")
    return max(candidates, key=lambda path: path.stat().st_size)


def read_config(path: str | Path) -> dict:
    """The config file with the schema's defaults filled in, as the workflow sees it."""
    from snakemake.utils import validate

    config = yaml.safe_load(Path(path).read_text())
    validate(config, schema=str(REPO / "schemas" / "config.schema.yaml"), set_default=True)
    return config


def prepared_arrays(config: dict, csv_path: str | Path):
    """The dataset exactly as its preprocess job prepares it (the same settings object)."""
    from rnnfleet.prep.prepare import prepare_dataset

    return prepare_dataset(csv_path, **preprocess_settings(config))[0]


def main():
    args = parse_args()
    reason = no_cuda_reason()
    if reason:
        print(reason, file=sys.stderr)
        print(
            "On CPU, gpu_mem does not matter: --cores and train.threads decide how many train at once.", file=sys.stderr
        )
        sys.exit(2)
    import torch

    from rnnfleet.runner.gpu_slots import visible_gpus
    from rnnfleet.train.loop import LoopSettings

    config = read_config(args.configfile)
    train = config["train"]
    loop = LoopSettings.of(train)
    csv_path = Path(args.csv) if args.csv else largest_dataset(config)
    arrays = prepared_arrays(config, csv_path)
    short_arrays = arrays_for_steps(arrays, args.steps, loop.seq_len, loop.batch_size)
    footprint = measure_footprint(args.device, short_arrays, config["model"], loop)
    declared = declared_gb(footprint, args.margin)
    cards = visible_gpus()
    fit = plan(declared, [card.capacity_gb for card in cards])
    name = torch.cuda.get_device_name(args.device)

    print(f"Measured on cuda:{args.device} ({name}): {csv_path.name}, {arrays.rows:,} rows, {args.steps} steps")
    print(f"  allocator peak (max_memory_reserved)     {footprint.allocator_peak_bytes / GIB:6.2f} GiB")
    print(f"  CUDA context, libraries, workspaces      {footprint.outside_allocator_bytes / GIB:6.2f} GiB")
    print(f"  one training's peak                      {footprint.peak_bytes / GIB:6.2f} GiB")
    print(f"Declare in config.yaml (peak + {args.margin:.0%}, whole GB):   train: gpu_mem: {declared}")
    for card, fits in zip(cards, fit.per_card, strict=True):
        print(f"  cuda:{card.index} holds {card.capacity_gb} GB: {fits} trainings at once")
    print(f"Run with:  snakemake --resources gpu_mem={fit.resources_gb}   ->  {fit.at_once} trainings at once")
    print(f"  (each also takes train.threads={train['threads']} core(s): --cores must allow as many)")
    if fit.at_once == 0:
        print("No visible card can hold one training: use a smaller batch_size or model.")


if __name__ == "__main__":
    main()
