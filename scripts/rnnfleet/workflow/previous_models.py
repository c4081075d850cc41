"""Models an earlier rnnfleet kept aside during a re-train.

rnnfleet now leaves a model at its path while it is re-trained (the train rule's outputs are
update(): rnnfleet.hooks.atomic_restore). Earlier versions let Snakemake delete it first and
kept a link to it in BACKUP_DIR; a run of those killed mid-way left the model there. What
this module promises: restore_previous_models() puts every such model whose path is empty
back, byte for byte, and drops the rest (a run alone in its folder calls it at its start).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

BACKUP_DIR = Path(".snakemake") / "rnnfleet-previous-models"
# Where Snakemake keeps the copy of an update() output while its job runs (9.x).
SNAKEMAKE_BACKUPS = Path(".snakemake") / "backups"
KEPT_STATUS = "previous model kept"


def _link_or_copy(source: Path, target: Path) -> None:
    """target becomes the same bytes as source, replacing it in one step."""
    staging = target.with_name(f".{target.name}.staging")
    staging.unlink(missing_ok=True)
    try:
        os.link(source, staging)
    except OSError:  # no hard links here (some network or Windows file systems)
        shutil.copy2(source, staging)
    os.replace(staging, target)


def restore_previous_models(models_folder: str | os.PathLike) -> list[str]:
    """Put back every backed-up model whose model file is missing; drop the backups of
    models that are there. Returns the datasets whose previous model was put back. One
    listing of BACKUP_DIR, usually absent."""
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


def drop_stale_snakemake_backup(output_path: str | os.PathLike) -> bool:
    """Remove the copy Snakemake made of an update() output (the loss curves folder) before
    a job that never finished; True if there was one. Snakemake drops the copy when the job
    ends, but a run killed meanwhile leaves it, and every later job that updates the output
    then fails to copy over it. The folder itself needs no restoring: a killed plots job
    leaves curves that are whole (atomic writes), and the next one redraws any that are
    stale. Call only when no other run works in the folder."""
    path = Path(output_path)
    backup = SNAKEMAKE_BACKUPS / (path.relative_to(path.anchor) if path.is_absolute() else path)
    if not backup.exists():
        return False
    shutil.rmtree(backup)
    return True
