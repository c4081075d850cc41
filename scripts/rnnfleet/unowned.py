"""What no dataset owns any more: the outputs of a dataset whose bar files are gone.

A run works on the datasets it finds; the models, arrays, metrics, forecasts and exports of a
dataset removed from data_dir stay where they are, and commands that walk a project's models
would trip over them. This module lists them (unowned_files) and sets them aside
(set_aside): moved, never deleted, into a folder of their own under .snakemake/ that a run
never reads (not the folder of models kept aside during a re-train, whose entries a run puts
back), with their paths kept, so that a file set aside by mistake is moved back by hand.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

SET_ASIDE_DIR = Path(".snakemake") / "rnnfleet-unowned"

# (paths.<key>, a folder inside it) -> the names a dataset's outputs have there ({}: the
# dataset's name), the longest ending first: bars/X.arrays.npz is X's, not "X.arrays"'s.
OUTPUT_FILES = {
    ("models", ""): ("{}.pt",),
    ("metrics", ""): ("{}.json",),
    ("prep", ""): ("{}.npz",),
    ("prep", "bars"): ("{}.arrays.npz", "{}.npz"),
    ("predictions", ""): ("{}.csv",),
    ("exports", ""): ("{}.onnx",),
}


def dataset_of(name: str, patterns: tuple[str, ...]) -> str | None:
    """The dataset a file name is the output of, by the first of `patterns` it fits, or None."""
    for pattern in patterns:
        prefix, _, suffix = pattern.partition("{}")
        if name.startswith(prefix) and name.endswith(suffix) and len(name) > len(prefix) + len(suffix):
            return name[len(prefix) : len(name) - len(suffix)]
    return None


def unowned_files(folder: Path, paths: dict[str, str], datasets: set[str]) -> dict[str, list[Path]]:
    """{dataset: its output files in the project folder} for every dataset that has outputs
    there but is not in `datasets` (those a run finds now). Files only; names starting with a
    dot (a write in progress) are left alone. Paths relative to `folder`."""
    found: dict[str, list[Path]] = {}
    for (key, inside), patterns in OUTPUT_FILES.items():
        where = Path(paths.get(key, key)) / inside
        try:
            entries = list(os.scandir(folder / where))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            dataset = dataset_of(entry.name, patterns)
            if dataset and not entry.name.startswith(".") and entry.is_file() and dataset not in datasets:
                found.setdefault(dataset, []).append(where / entry.name)
    return {dataset: sorted(files) for dataset, files in sorted(found.items())}


def set_aside(folder: Path, files: list[Path]) -> Path:
    """Move `files` (relative to `folder`) into a new folder under SET_ASIDE_DIR, at the same
    relative paths; returns that folder (relative to `folder`)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    target = SET_ASIDE_DIR / stamp
    number = 1
    while (folder / target).exists():
        number += 1
        target = SET_ASIDE_DIR / f"{stamp}-{number}"
    for path in files:
        destination = folder / target / path
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.replace(folder / path, destination)
    return target
