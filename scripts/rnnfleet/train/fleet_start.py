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
from collections import Counter
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
START_KEYS = ("init", "finetune_lr", "compare_init", "compare_init_seeds")


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
    this dataset trains from scratch), its digest and path, the one line that says which, and
    the pretraining's coverage in words (coverage_text)."""

    weights: dict | None
    sha256: str
    path: str
    note: str
    coverage: str = ""


REDO = "snakemake --forcerun pretrain"


def coverage_text(lineage: dict) -> str:
    """How many datasets the pretraining read of those it served, and why it left the others
    out (the reasons counted, the commonest first)."""
    served, read = lineage.get("datasets", []), lineage.get("trained_on", [])
    left_out = lineage.get("left_out", {})
    text = f"pretrained on {len(read)} of {len(served)} dataset(s)"
    if left_out:
        reasons = Counter(why.split(": ")[0] for why in left_out.values()).most_common()  # the why before its detail
        text += f", {len(left_out)} left out: " + "; ".join(f"{why} ({count})" for why, count in reasons)
    return text


def read_lineage(path: str) -> dict | None:
    """The lineage JSON beside the pretrained model at path (None: not there or not JSON)."""
    try:
        with open(Path(path).with_name(LINEAGE_NAME)) as handle:
            lineage = json.load(handle)
    except (OSError, ValueError):
        return None
    return lineage if isinstance(lineage, dict) and "cutoff_ns" in lineage else None


def checked_pretrained(path: str, lineage: dict | None) -> tuple[dict, str]:
    """(the pretrained model file's contents, its SHA-256), after checking the digest its
    lineage records: a damaged file is one line naming it and the command that redoes it."""
    from rnnfleet.errors import UserError

    sha256 = file_sha256(path)
    if lineage is not None and lineage.get("sha256") not in (None, sha256):
        raise UserError(
            f"{path}: damaged: its SHA-256 is not the one {LINEAGE_NAME} beside it records; redo it with {REDO}"
        )
    return load_pretrained(path), sha256


def fleet_start(path: str, arrays, model_hparams: dict, train_hparams: dict) -> FleetStart:
    """Whether this dataset's fit may start from the pretrained model at path (see the module
    doc), with the one line its log and table give. A dataset whose validation starts before
    the pretraining's cutoff trains from scratch without the model file being read (its
    lineage beside it says the cutoff): a damaged file fails only the fits that need it."""
    lineage, contents, sha256 = read_lineage(path), None, ""
    if lineage is None:  # no JSON beside it: the model file's own lineage says the cutoff
        contents, sha256 = checked_pretrained(path, None)
        lineage = contents["lineage"]
    coverage = coverage_text(lineage)
    own_start = int(arrays.row_times[arrays.train_end]) if len(arrays.row_times) > arrays.train_end else None
    if own_start is not None and own_start < int(lineage["cutoff_ns"]):
        return FleetStart(
            None, sha256 or lineage.get("sha256", ""), str(Path(path)), before_cutoff(own_start, lineage), coverage
        )
    if contents is None:
        contents, sha256 = checked_pretrained(path, lineage)
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
    elif differs:
        note = f"from scratch: its {', '.join(differs)} differ from the fleet's pretrained model's"
    else:
        note = f"from the fleet's pretrained model {path} (sha256 {sha256[:12]}, cutoff {lineage['cutoff']})"
        return FleetStart(contents["state_dict"], sha256, str(Path(path)), note, coverage)
    return FleetStart(None, sha256, str(Path(path)), note, coverage)


def before_cutoff(own_start: int, lineage: dict) -> str:
    return (
        f"from scratch: its validation (less the embargo) starts at {iso(own_start)}, before the fleet "
        f"pretraining's cutoff {lineage['cutoff']}: the pretrained model saw bars of that period"
    )


def failed_fleet_start(path: str, log_path: str | None) -> FleetStart:
    """A dataset's start when the fleet's pretrain job failed (its model file is not there):
    from scratch, with the pretrain log's last error line as the reason."""
    errors = []
    if log_path and os.path.exists(log_path):
        with open(log_path, errors="replace") as log_file:
            errors = [line.strip() for line in log_file if line.startswith(ERROR_PREFIX)]
    why = errors[-1].removeprefix(ERROR_PREFIX) if errors else f"no error line in {log_path}"
    return FleetStart(None, "", str(Path(path)), f"from scratch: the fleet's pretraining failed: {why}")
