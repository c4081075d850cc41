"""The model file: what it holds (build_checkpoint, calibration_record), how it is written
(save_checkpoint, atomically) and read back (load_checkpoint: tensors and plain data only,
any problem one line naming the file), and the cheap check of its whole-ness run before
every run (model_file_problem). Light to import: the Snakemake process checks model files
with it, so torch and numpy load only inside the functions that need them.
"""

from __future__ import annotations

import os
import platform
import re
import struct
from typing import TYPE_CHECKING

from rnnfleet.atomic_files import atomic_write
from rnnfleet.errors import UserError, one_line
from rnnfleet.faults import pause_point
from rnnfleet.plugins import DEFAULT_BUILDER, imported_sha256

if TYPE_CHECKING:  # the loop's and the evaluation's types stay out: rnnfleet.train.models reads model files with this
    from rnnfleet.prep.arrays import PreparedArrays

FORMAT_VERSION = 3  # 2: builder, feature definition and target recorded; 3: the split and test scores


def library_versions() -> dict:
    import numpy as np
    import torch

    return {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "numpy": str(np.__version__),
    }


def build_checkpoint(
    dataset: str,
    trained,
    arrays: PreparedArrays,
    model_hparams: dict,
    train_hparams: dict,
    metrics: dict,
    columns: dict | None = None,
    product: str = "scored",
    lineage: dict | None = None,
) -> dict:
    """Everything needed to rebuild the model and use it on new bars (columns: the CSV's
    column names, as the config maps them); loads with weights_only=True. trained: what the
    loop made (rnnfleet.train.loop.Trained). product: which model `trained` is
    (evaluate.production: "scored", trained on the training part and early-stopped on
    validation, or "refit" on all rows); split and metrics are the scored
    model's in both cases, the scores the product descends from. plugin_sha256:
    the content hash of each user file the model and its features ran (rnnfleet.plugins:
    forecasts import such a file from the working folder only with that content).
    optimizer_state and lineage: what an update of this model starts from and checks
    (rnnfleet.train.updating; lineage None: none recorded, the model is never updated)."""
    from rnnfleet.heads import with_outputs
    from rnnfleet.prep.normalise import Normalisation

    return {
        "format": "rnnfleet",
        "format_version": FORMAT_VERSION,
        "dataset": dataset,
        "product": product,
        "state_dict": {key: value.detach().cpu() for key, value in trained.model.state_dict().items()},
        "model_config": {
            "builder": DEFAULT_BUILDER,
            **with_outputs(model_hparams, trained.heads),
            "input_size": int(arrays.features.shape[1]),
        },
        "train_config": dict(train_hparams),
        "normalisation": Normalisation.of_arrays(arrays).record(),
        "features": {
            "definition": list(arrays.feature_definition),
            "left_out": list(arrays.features_left_out),  # default features the file could not give
            "names": list(arrays.feature_names),
            "warmup": arrays.warmup,
            "target": arrays.target,
            "horizon": arrays.horizon,
            # The heads (rnnfleet.heads): absent for a single point forecast.
            **(
                {"horizons": list(trained.heads.horizons), "quantiles": list(trained.heads.quantiles)}
                if not trained.heads.single
                else {}
            ),
            "seq_len": int(train_hparams["seq_len"]),
            "columns": dict(columns or {}),
        },
        # How the training bars were read: forecasts read new bars the same way (rnnfleet.forecast.predict).
        # Absent from a model trained on an array file of an older rnnfleet.
        **(
            {"read": {"format": arrays.read_format, "timezone": arrays.timezone, "read_as": arrays.read_as}}
            if arrays.read_format
            else {}
        ),
        "plugin_sha256": plugin_hashes(arrays, model_hparams),
        # Feature rows of the array file; the test part (from test_start) never reached the
        # scored model's training (a refit's trained on every row).
        "split": {**arrays.split._asdict(), "rows": arrays.rows},
        "metrics": metrics,
        "versions": library_versions(),
        **({"optimizer_state": trained.optimizer_state, "lineage": lineage} if lineage is not None else {}),
    }


def plugin_hashes(arrays: PreparedArrays, model_hparams: dict) -> dict[str, str]:
    """{user file: sha256} of the feature files (as preprocessing ran them) and the model's builder."""
    builder = str(model_hparams.get("builder", DEFAULT_BUILDER))
    return {**arrays.feature_sha256, **imported_sha256([builder])}


def calibration_record(evaluated) -> dict:
    """The model file's `calibration` entry from the scored model's evaluation
    (rnnfleet.train.evaluate.Evaluated): its calibration (a refit has no
    held-out windows of its own and keeps those of the model that was scored): `scores`
    (rnnfleet.scores.intervals.head_calibration) and, with quantile heads, the quantile `pairs`
    they belong to."""
    import numpy as np
    import torch

    record = {"scores": torch.from_numpy(np.ascontiguousarray(evaluated.calibration, dtype=np.float32))}
    if evaluated.heads.quantiles:
        record["pairs"] = evaluated.heads.pair_quantiles()
    return record


def save_checkpoint(checkpoint: dict, path: str | os.PathLike) -> None:
    import torch

    with atomic_write(path) as handle:
        torch.save(checkpoint, handle)
        handle.flush()
        pause_point("model-write")


class ModelFileError(UserError):
    """A model file that is missing, truncated, or not written by rnnfleet."""


# torch.save writes a zip archive with no archive comment: its last 22 bytes are the zip's
# end-of-central-directory record (zip64 files have a 20-byte locator just before it).
_ZIP_START = b"PK\x03\x04"
_END_RECORD = struct.Struct("<4sHHHHIIH")  # signature ... central directory size, offset, comment length
_END_SIGNATURE = b"PK\x05\x06"
_ZIP64_LOCATOR = struct.Struct("<4sIQI")  # signature, disk, offset of the zip64 end record, disks
_ZIP64_LOCATOR_SIGNATURE = b"PK\x06\x07"


def model_file_problem(path: str | os.PathLike) -> str | None:
    """Why the file at `path` cannot be a whole model file as torch.save writes it, from its
    size and its first and last bytes (no unpacking): empty, cut short, or not a zip archive;
    None if it looks whole. A cheap check, meant for thousands of files at every run: damage
    inside the archive, or a whole file of other contents, passes (load_checkpoint finds those)."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))  # no buffered file object: cheaper
    try:
        size = os.fstat(descriptor).st_size
        if size == 0:
            return "the file is empty (0 bytes)"
        tail_size = min(size, _END_RECORD.size + _ZIP64_LOCATOR.size)
        if hasattr(os, "pread"):
            start, tail = os.pread(descriptor, len(_ZIP_START), 0), os.pread(descriptor, tail_size, size - tail_size)
        else:  # Windows
            start = os.read(descriptor, len(_ZIP_START))
            os.lseek(descriptor, size - tail_size, os.SEEK_SET)
            tail = os.read(descriptor, tail_size)
    finally:
        os.close(descriptor)
    if start != _ZIP_START:
        return "it is not a file torch.save writes (not a zip archive)"
    if len(tail) < _END_RECORD.size or not _end_record_fits(tail, size):
        return f"it is cut short or damaged ({size} bytes, without the zip end record torch.save writes last)"
    return None


def _end_record_fits(tail: bytes, size: int) -> bool:
    """Whether `tail` (the file's last bytes) ends with an end record whose central
    directory lies inside the file before it."""
    end_offset = size - _END_RECORD.size
    signature, *_, directory_size, directory_offset, comment_length = _END_RECORD.unpack(tail[-_END_RECORD.size :])
    if signature != _END_SIGNATURE or comment_length != 0:
        return False
    locator = tail[: -_END_RECORD.size]
    if len(locator) == _ZIP64_LOCATOR.size and locator.startswith(_ZIP64_LOCATOR_SIGNATURE):
        return _ZIP64_LOCATOR.unpack(locator)[2] < end_offset - _ZIP64_LOCATOR.size
    return directory_offset + directory_size <= end_offset


# What load_model and forecasts read from a model file (build_checkpoint).
REQUIRED_ENTRIES = {
    "state_dict": (),
    "model_config": ("input_size",),
    "normalisation": ("feature_mean", "feature_std", "target_mean", "target_std"),
    "features": ("definition", "warmup", "target", "horizon", "seq_len"),
}


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Load a model file without unpickling arbitrary objects (weights_only=True); any
    problem is a ModelFileError of one line naming the file."""
    import torch

    try:
        problem = model_file_problem(path)
    except FileNotFoundError:
        raise ModelFileError(f"{path}: no such model file") from None
    except OSError as error:
        raise ModelFileError(f"{path}: cannot be read ({error.strerror or error})") from None
    if problem:
        raise ModelFileError(f"{path}: not a readable rnnfleet model file: {problem}; train its dataset again")
    damaged = damaged_member(path)
    if damaged:
        raise ModelFileError(
            f"{path}: damaged: its part {damaged!r} does not match the checksum written with it (the file changed "
            "after it was written); train its dataset again"
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many kinds for damaged or foreign files
        if REFUSED_GLOBAL.search(str(error)):
            raise ModelFileError(refused_objects_message(path, str(error))) from None
        raise ModelFileError(
            f"{path}: not a readable rnnfleet model file ({type(error).__name__}: {torch_detail(str(error))})"
        ) from None
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != "rnnfleet":
        raise ModelFileError(f"{path}: not an rnnfleet model file (no 'format: rnnfleet' entry)")
    if checkpoint.get("format_version") != FORMAT_VERSION:
        older = isinstance(checkpoint.get("format_version"), int) and checkpoint["format_version"] < FORMAT_VERSION
        raise ModelFileError(
            f"{path}: model file format version {checkpoint.get('format_version')}, "
            f"this rnnfleet reads version {FORMAT_VERSION}"
            + (
                "; it was trained before the test period was held out: delete it and re-run to re-train"
                if older
                else ""
            )
        )
    missing = missing_entries(checkpoint)
    if missing:
        raise ModelFileError(
            f"{path}: an incomplete rnnfleet model file (no {', '.join(missing)}); it was changed after "
            "rnnfleet wrote it: train its dataset again"
        )
    return checkpoint


def missing_entries(checkpoint: dict) -> list[str]:
    """The entries of REQUIRED_ENTRIES that `checkpoint` lacks, as 'normalisation' or
    'features.seq_len'."""
    missing = []
    for entry, keys in REQUIRED_ENTRIES.items():
        value = checkpoint.get(entry)
        if not isinstance(value, dict):
            missing.append(repr(entry))
        else:
            missing += [repr(f"{entry}.{key}") for key in keys if key not in value]
    return missing


def torch_detail(message: str) -> str:
    """The part of one of torch's load errors that says what is wrong: the weights-only
    unpickler's own reason (its message first suggests unsafe loading), else the first line."""
    reason = re.search(r"WeightsUnpickler error:\s*(.+?)\s*(?:\n\n|$)", message, re.DOTALL)
    if reason:
        return one_line(reason.group(1))
    return message.splitlines()[0] if message else "no detail"


def damaged_member(path: str | os.PathLike) -> str | None:
    """The first part of the model file (a zip archive, as torch.save writes it) whose bytes
    no longer match the CRC-32 written with them, or None: every byte of the weights is read
    and checked before any is used. A file that is not a zip archive is left to torch.load's
    own error."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError):
        return None


# How torch's weights-only loader words an object it will not rebuild: a global it does not
# allow, or one whose module it blocks outright (os.system: "posix is blocked").
REFUSED_GLOBAL = re.compile(r"Unsupported global: GLOBAL (\S+)|unsupported GLOBAL (\S+) whose module \S+ is blocked")


def refused_objects_message(path: str | os.PathLike, torch_message: str) -> str:
    """One line for a file that names Python objects to rebuild (torch's own message suggests
    loading it unsafely, which is the one thing never to do with a file of unknown origin)."""
    named = REFUSED_GLOBAL.search(torch_message)
    what = f" (it names {named.group(1) or named.group(2)})" if named else ""
    return (
        f"{path}: refused: it holds pickled Python objects{what}, and loading those could run code; "
        "rnnfleet reads only tensors and plain data, as in the model files it writes"
    )
