"""A re-train that fails or is killed keeps the model it was meant to replace.

Snakemake deletes a job's outputs before the job runs and again when it fails, so a
re-train (after a hyper-parameter change, --forcerun, new data) that then fails would
leave no model at all. What this module promises:

- before the first job of a run, every existing model that a train job of this run will
  replace (and that is a whole model file, rnnfleet.checkpoint.model_file_problem) is hard-linked (copied where links are not possible) into BACKUP_DIR, a folder
  private to the user (one link per model to re-train, nothing in dry-runs);
- a train job that succeeds drops its backup: the new model is in place;
- after a run with failures, and at the start of the next run after a run that was killed
  (when no other run is alive in the folder), every backup whose model is missing is put
  back, byte for byte. Only the model: its metrics stay missing, so the next run trains
  the dataset again, and the summary marks it "previous model kept".
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from rnnfleet.checkpoint import model_file_problem

BACKUP_DIR = Path(".snakemake") / "rnnfleet-previous-models"
KEPT_STATUS = "previous model kept"


def backup_path(model_path: str | os.PathLike) -> Path:
    return BACKUP_DIR / Path(model_path).name


def _link_or_copy(source: Path, target: Path) -> None:
    """target becomes the same bytes as source, replacing it in one step."""
    staging = target.with_name(f".{target.name}.staging")
    staging.unlink(missing_ok=True)
    try:
        os.link(source, staging)
    except OSError:  # no hard links here (some network or Windows file systems)
        shutil.copy2(source, staging)
    os.replace(staging, target)


def back_up_models_to_replace(model_paths: Iterable[str | os.PathLike]) -> int:
    """Keep a link to each existing model in model_paths (those about to be re-trained);
    returns how many there were."""
    backed_up = 0
    for model_path in model_paths:
        model = Path(model_path)
        if not model.is_file() or model_file_problem(model):  # nothing to keep in a broken file
            continue
        if not backed_up:
            BACKUP_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        _link_or_copy(model, backup_path(model))
        backed_up += 1
    return backed_up


def drop_backup(model_path: str | os.PathLike) -> None:
    """The train job for model_path succeeded: its previous model is no longer needed."""
    backup_path(model_path).unlink(missing_ok=True)


def restore_previous_models(models_folder: str | os.PathLike) -> list[str]:
    """Put back every backed-up model whose model file is missing; drop the backups of
    models that are there (written after the backup). Returns the datasets whose previous
    model was put back. One listing of BACKUP_DIR, usually absent."""
    restored = []
    try:
        with os.scandir(BACKUP_DIR) as entries:
            backups = [Path(entry.path) for entry in entries if not entry.name.startswith(".")]
    except FileNotFoundError:
        return restored
    for backup in sorted(backups):
        model = Path(models_folder) / backup.name
        if not model.exists():
            model.parent.mkdir(parents=True, exist_ok=True)
            _link_or_copy(backup, model)
            restored.append(model.stem)
        with contextlib.suppress(FileNotFoundError):
            backup.unlink()
    return restored
