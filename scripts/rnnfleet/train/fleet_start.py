"""The fleet's pretrained model file (rule pretrain, rnnfleet.train.pretraining) as a
dataset's fit meets it: where it lies, how it loads, and whether this dataset may start
from it.

What it promises:
- The file (torch.save of tensors and plain values, written atomically) loads with
  weights_only=True: no code runs.
- fleet_start() lets a dataset's training start from it only when every bar the
  pretraining saw precedes that dataset's own first embargo bar and the model is the same
  (builder, settings, features, target, heads); otherwise it trains from scratch and says
  why in one line.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass
from pathlib import Path

from rnnfleet.bars.joining import file_sha256
from rnnfleet.errors import ERROR_PREFIX

# The folder of the fleet's files under paths.models: a dataset name never starts with a
# dot (rnnfleet.bars.discovery.DATASET_NAME), so no dataset's model can clash with them.
FLEET_FOLDER = ".fleet"
MODEL_NAME = "pretrained.pt"
LINEAGE_NAME = "pretrained.json"
KIND = "rnnfleet fleet pretrained model"
# Train settings that say how a dataset's own fit starts, not what the pretraining learns.
START_KEYS = ("init", "finetune_lr", "compare_init")


def pretrained_paths(models_folder: str) -> tuple[str, str]:
    """(the pretrained model file, its lineage JSON) under paths.models."""
    folder = f"{models_folder}/{FLEET_FOLDER}"
    return f"{folder}/{MODEL_NAME}", f"{folder}/{LINEAGE_NAME}"


def iso(nanoseconds: int) -> str:
    return dt.datetime.fromtimestamp(nanoseconds / 1e9, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def load_pretrained(path: str) -> dict:
    """The pretrained model file's contents (weights_only=True: no code runs) and its lineage."""
    import torch

    from rnnfleet.errors import UserError

    try:
        contents = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - any failure to load is one line naming the file
        raise UserError(f"{path}: the fleet's pretrained model does not load ({error}); re-run rule pretrain") from None
    if not isinstance(contents, dict) or contents.get("kind") != KIND:
        raise UserError(f"{path}: not a pretrained model file of rnnfleet; re-run rule pretrain")
    return {**contents, "lineage": json.loads(contents["lineage_json"])}


@dataclass(frozen=True)
class FleetStart:
    """What a dataset's training knows of the fleet's pretrained model: its weights (None:
    this dataset trains from scratch), its digest and path, and the one line that says which."""

    weights: dict | None
    sha256: str
    path: str
    note: str


def fleet_start(path: str, arrays, model_hparams: dict, train_hparams: dict) -> FleetStart:
    """Whether this dataset's fit may start from the pretrained model at path (see the module
    doc), with the one line its log and table give."""
    contents = load_pretrained(path)
    lineage, sha256 = contents["lineage"], file_sha256(path)
    own_start = int(arrays.row_times[arrays.train_end]) if len(arrays.row_times) > arrays.train_end else None
    wanted = {key: value for key, value in train_hparams.items() if key not in (*START_KEYS, "device")}
    differs = [
        what
        for what, mine, theirs in (
            ("model", model_hparams, contents["model_hparams"]),
            ("train settings", wanted, contents["train_hparams"]),
            ("features", list(arrays.feature_names), contents["feature_names"]),
            ("target", arrays.target, contents["target"]),
            ("horizons", list(arrays.all_horizons), contents["horizons"]),
        )
        if json.dumps(mine, sort_keys=True, default=str) != json.dumps(theirs, sort_keys=True, default=str)
    ]
    if own_start is None:
        note = "from scratch: its array file records no bar times to check the pretraining's cutoff against"
    elif own_start < int(lineage["cutoff_ns"]):
        note = (
            f"from scratch: its validation (less the embargo) starts at {iso(own_start)}, before the fleet "
            f"pretraining's cutoff {lineage['cutoff']}: the pretrained model saw bars of that period"
        )
    elif differs:
        note = f"from scratch: its {', '.join(differs)} differ from the fleet's pretrained model's"
    else:
        note = f"from the fleet's pretrained model {path} (sha256 {sha256[:12]}, cutoff {lineage['cutoff']})"
        return FleetStart(contents["state_dict"], sha256, str(Path(path)), note)
    return FleetStart(None, sha256, str(Path(path)), note)


def failed_fleet_start(path: str, log_path: str | None) -> FleetStart:
    """A dataset's start when the fleet's pretrain job failed (its model file is not there):
    from scratch, with the pretrain log's last error line as the reason."""
    errors = []
    if log_path and os.path.exists(log_path):
        with open(log_path, errors="replace") as log_file:
            errors = [line.strip() for line in log_file if line.startswith(ERROR_PREFIX)]
    why = errors[-1].removeprefix(ERROR_PREFIX) if errors else f"no error line in {log_path}"
    return FleetStart(None, "", str(Path(path)), f"from scratch: the fleet's pretraining failed: {why}")
