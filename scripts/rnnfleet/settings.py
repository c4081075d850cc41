"""The settings of each job kind, built once from the configuration: one spelling per setting.

The workflow's rules take them as `params:` (so editing one re-runs exactly the jobs it
affects), the jobs receive them as their keyword arguments, and `inspect` and
`scripts/size_gpu_mem.py` use the same objects, so every consumer reads, cleans and
splits a dataset exactly as the preprocess job does.
"""

from __future__ import annotations

from rnnfleet.bars.formats import FORMAT_DEFAULTS, TIMEZONE_EPOCH, TIMEZONE_IN_FILE
from rnnfleet.bars.quality import fail_thresholds

# Train settings that change only how fast or where a model trains, not what it learns:
# they are not params of the train rule, so changing one re-trains nothing.
RUNTIME_ONLY_TRAIN_KEYS = ("threads", "gpu_mem", "device", "warm_workers")


# The config key of each preprocess setting, by its name as a keyword argument of
# rnnfleet.prep.prepare.prepare_dataset (and as a param of the preprocess rule).
PREPROCESS_CONFIG_KEYS = {
    "columns": "columns",
    "read_format": "format",
    "max_bad_fraction": "preprocess.max_bad_fraction",
    "max_gap": "preprocess.max_gap",
    "seq_len": "train.seq_len",
    "horizon": "train.horizon",
    "val_fraction": "preprocess.val_fraction",
    "test_fraction": "preprocess.test_fraction",
    "val_bars": "preprocess.val_bars",
    "test_bars": "preprocess.test_bars",
    "val_max_bars": "preprocess.val_max_bars",
    "test_max_bars": "preprocess.test_max_bars",
    "features": "features",
    "target": "target",
    "quality": "quality",
}


def preprocess_config_keys(config: dict) -> dict[str, str]:
    """PREPROCESS_CONFIG_KEYS as this config sets them: the preprocess setting `horizon` is
    train.horizons where that is given (horizon_setting), else train.horizon."""
    if config_value(config, "train.horizons"):
        return {**PREPROCESS_CONFIG_KEYS, "horizon": "train.horizons"}
    return PREPROCESS_CONFIG_KEYS


# Settings added after projects were made without them, and their defaults: at the default
# they are left out of the rules' params, the array files' settings hash and a model's
# fingerprint, so that a project made before they existed re-runs and updates as before.
# The parts' caps at their default (rnnfleet.prep.split.DEFAULT_MAX_PART_BARS) are left out too: a
# project whose history is below them keeps its arrays; one above them updates onto the capped
# parts the next time its arrays are made (its fingerprint is unchanged).
LATER_KEYS = {
    "preprocess.val_bars": None,
    "preprocess.test_bars": None,
    "preprocess.val_max_bars": 10_080,
    "preprocess.test_max_bars": 10_080,
    "train.horizons": [],
    "train.quantiles": [],
    "train.init": "scratch",  # the fleet's head start (rnnfleet.train.pretraining)
    "train.finetune_lr": None,
    "train.compare_init": False,
    "train.compare_init_seeds": 1,
}

# The config section of each param of the train rule (named after its section); the
# train section without RUNTIME_ONLY_TRAIN_KEYS.
TRAIN_PARAM_CONFIG_KEYS = {"model": "model", "train": "train", "columns": "columns", "evaluate": "evaluate"}


def config_value(config: dict, key: str):
    """The value of a dotted config key (train.seq_len); a LATER_KEYS key a config lacks has its default."""
    value = config
    try:
        for part in key.split("."):
            value = value[part]
    except KeyError:
        if key in LATER_KEYS:
            return LATER_KEYS[key]
        raise
    return value


def at_later_default(key: str, value) -> bool:
    """Whether the dotted config key is one of LATER_KEYS and holds its default."""
    return key in LATER_KEYS and value == LATER_KEYS[key]


def preprocess_settings(config: dict) -> dict:
    """What reading, cleaning, featurising and splitting a dataset depend on, as the keyword
    arguments of rnnfleet.prep.prepare.prepare_dataset (and of the preprocess job). Of `quality:`
    only the fail thresholds: the warn ones change no arrays (rnnfleet.bars.quality)."""
    settings = {
        name: value
        for name, key in PREPROCESS_CONFIG_KEYS.items()
        if not at_later_default(key, value := config_value(config, key))
    }
    return {**settings, "horizon": horizon_setting(config["train"]), "quality": fail_thresholds(settings["quality"])}


def horizon_setting(train: dict) -> int | list[int]:
    """The preprocess setting `horizon`: train.horizon, or train.horizons when it is given (a
    list of several, or its one horizon as a number: the same arrays as train.horizon would give)."""
    horizons = list(train.get("horizons") or [])
    if len(horizons) > 1:
        return [int(h) for h in horizons]
    return int(horizons[0]) if horizons else int(train["horizon"])


def train_hyper_parameters(config: dict) -> dict:
    """The `train:` settings that change what a model learns (all but RUNTIME_ONLY_TRAIN_KEYS;
    LATER_KEYS only where they differ from their default)."""
    return {
        key: value
        for key, value in config["train"].items()
        if key not in RUNTIME_ONLY_TRAIN_KEYS and not at_later_default(f"train.{key}", value)
    }


def train_settings(config: dict) -> dict:
    """What a training depends on, as the keyword arguments of the train job: the model's
    hyper-parameters, the training's, the column names recorded in the model file, and how
    the test period is scored (the `evaluate:` settings)."""
    return {
        "model_hparams": config["model"],
        "train_hparams": train_hyper_parameters(config),
        "columns": config["columns"],
        "evaluate": config["evaluate"],
    }


def updates_ruled_out(update: dict, evaluate: dict) -> str | None:
    """Why the `update:` and `evaluate:` settings rule out updating a model with new bars
    (rnnfleet.train.updating), in words for the log and the dry-run; None: they allow it."""
    if not update["enabled"]:
        return "update.enabled is false"
    if evaluate["production"] != "scored" or evaluate["folds"]:
        return "updates need evaluate.production scored and evaluate.folds 0"
    return None


def full_fit_due(updates_since_full_fit: int, update: dict) -> str | None:
    """Why a model updated that many times since its full fit trains from scratch now; None: not yet."""
    if updates_since_full_fit >= update["full_every"]:
        return f"update.full_every: {updates_since_full_fit} update(s) since the full fit"
    return None


# The zones an array file records for times format.timezone does not apply to
# (rnnfleet.workflow.unused_settings): epoch numbers, and times written with their zone.
ZONE_FREE = (TIMEZONE_EPOCH, TIMEZONE_IN_FILE)
DEFAULT_ZONE = "auto"


def times_zone_free(recorded_zones: str) -> bool:
    """Whether the zone(s) an array file records (joined by '; ' for several files) are all
    zone-free: epoch numbers or times with their zone in the file."""
    return bool(recorded_zones) and all(zone in ZONE_FREE for zone in recorded_zones.split("; "))


def without_unused_zone(read_format: dict) -> dict:
    """The `format:` settings with timezone at its default, in the order of a config the
    schema's defaults filled in (Snakemake compares params in their order): what the
    params were before the zone was set, whichever way it was given."""
    keys = [*FORMAT_DEFAULTS, *(key for key in read_format if key not in FORMAT_DEFAULTS)]
    return {key: DEFAULT_ZONE if key == "timezone" else read_format.get(key, FORMAT_DEFAULTS.get(key)) for key in keys}


def settings_for_hash(settings: dict, arrays_zones: str) -> dict:
    """The preprocess settings an array file's settings hash (and so its models'
    fingerprint) is computed from: format.timezone at its default where the arrays' times
    were zone-free, so that the setting re-trains nothing it cannot change."""
    if "read_format" in settings and times_zone_free(arrays_zones):
        return {**settings, "read_format": without_unused_zone(settings["read_format"])}
    return settings
