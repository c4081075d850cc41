"""The array file (`.npz`, format ARRAYS_FORMAT): written and read here. It holds the feature
matrix once (rows x features) and the aligned targets as they were computed (float64, before
normalisation), with the split and the training part's statistics; load_arrays normalises
them once (rnnfleet.prep.normalise.normalised_with). Numbers and JSON only, never a pickle."""

from __future__ import annotations

import json
import os
import struct
import zipfile
from dataclasses import dataclass, replace

import numpy as np

from rnnfleet.errors import DataError
from rnnfleet.prep.arrays import PreparedArrays
from rnnfleet.prep.normalise import normalised_with, target_statistic

# The array file's layout: 2 since the file holds the raw features and targets (1 held them
# normalised). A file of another format is never read (load_arrays); the preprocess rule has
# it as a param, so such a file is made again once.
ARRAYS_FORMAT = 2


def save_arrays(arrays: PreparedArrays, path: str | os.PathLike) -> None:
    """Write the arrays as an uncompressed .npz (no pickled objects), atomically: the raw
    features and targets (format ARRAYS_FORMAT), not the normalised ones."""
    from rnnfleet.atomic_files import atomic_write

    if len(arrays.raw_targets) != arrays.rows:
        raise ValueError("save_arrays needs the arrays' raw features and targets")
    with atomic_write(path) as handle:
        np.savez(
            handle,
            arrays_format=np.int64(ARRAYS_FORMAT),
            raw_features=arrays.raw_features,
            raw_targets=arrays.raw_targets,
            feature_mean=arrays.feature_mean,
            feature_std=arrays.feature_std,
            target_std=np.asarray(arrays.target_std, np.float64),
            train_end=np.int64(arrays.train_end),
            val_start=np.int64(arrays.val_start),
            val_end=np.int64(arrays.split.val_end),
            test_start=np.int64(arrays.split.test_start),
            last_close=np.float64(arrays.last_close),
            horizon=np.int64(arrays.horizon),
            horizons=np.array(arrays.horizons, dtype=np.int64),
            target=np.str_(arrays.target),
            target_mean=np.asarray(arrays.target_mean, np.float64),
            feature_definition=np.array(arrays.feature_definition, dtype=np.str_),
            feature_sha256=np.str_(json.dumps(arrays.feature_sha256)),
            feature_names=np.array(arrays.feature_names, dtype=np.str_),
            features_left_out=np.array(arrays.features_left_out, dtype=np.str_),
            warmup=np.int64(arrays.warmup),
            gap_bars=arrays.gap_bars,
            quality=np.str_(json.dumps(arrays.quality)),
            read_format=np.str_(json.dumps(arrays.read_format)),
            timezone=np.str_(arrays.timezone),
            read_as=np.str_(arrays.read_as),
            row_digests=arrays.row_digests,
            settings_sha256=np.str_(arrays.settings_sha256),
            row_times=arrays.row_times,
            latest_features=arrays.latest_features,
            latest_time=np.int64(arrays.latest_time),
            append_base=np.str_(json.dumps(arrays.append_base, sort_keys=True)),
            tail_times=arrays.tail_times,
            tail_values=arrays.tail_values,
        )


def arrays_format(path: str | os.PathLike) -> int:
    """The format of the array file at path (1 for files from before formats were numbered)."""
    with np.load(path, allow_pickle=False) as stored:
        return int(stored["arrays_format"]) if "arrays_format" in stored.files else 1


def load_arrays(path: str | os.PathLike, normalised: bool = True) -> PreparedArrays:
    """Read arrays written by save_arrays, never unpickling anything, and normalise their
    features and targets with their own statistics (normalised_with; not normalised:
    features and targets are the raw ones). An array file of another format is a
    DataError: its preprocess job makes it again (the rule's param)."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            if "train_end" in stored.files and "test_start" not in stored.files:
                raise DataError(f"{path}: an array file of an older rnnfleet (no test period); delete it and re-run")
            found = int(stored["arrays_format"]) if "arrays_format" in stored.files else 1
            if found != ARRAYS_FORMAT and "train_end" in stored.files:
                raise DataError(
                    f"{path}: an array file of format {found}, not {ARRAYS_FORMAT} (another rnnfleet); "
                    "its dataset's preprocess job makes it again: run the workflow"
                )
            raw_features, raw_targets = stored["raw_features"], stored["raw_targets"]
            arrays = PreparedArrays(
                features=raw_features,
                targets=raw_targets,
                feature_mean=stored["feature_mean"],
                feature_std=stored["feature_std"],
                target_std=target_statistic(stored["target_std"]),
                train_end=int(stored["train_end"]),
                val_start=int(stored["val_start"]),
                val_end=int(stored["val_end"]),
                test_start=int(stored["test_start"]),
                last_close=float(stored["last_close"]),
                horizon=int(stored["horizon"]),
                horizons=tuple(int(h) for h in stored["horizons"]) if "horizons" in stored.files else (),
                target=str(stored["target"]),
                target_mean=target_statistic(stored["target_mean"]),
                feature_definition=tuple(str(item) for item in stored["feature_definition"]),
                # Files written before the hashes were recorded have none.
                feature_sha256=json.loads(str(stored["feature_sha256"])) if "feature_sha256" in stored.files else {},
                feature_names=tuple(str(item) for item in stored["feature_names"]),
                features_left_out=tuple(str(item) for item in stored["features_left_out"])
                if "features_left_out" in stored.files
                else (),
                warmup=int(stored["warmup"]),
                gap_bars=stored["gap_bars"],
                # Files written before the quality flags have none.
                quality=json.loads(str(stored["quality"])) if "quality" in stored.files else {},
                # Files written before how they were read was recorded have none.
                **{
                    "read_format": json.loads(str(stored["read_format"])),
                    "timezone": str(stored["timezone"]),
                    "read_as": str(stored["read_as"]),
                }
                if "read_format" in stored.files
                else {},
                row_digests=stored["row_digests"] if "row_digests" in stored.files else np.zeros(0, np.uint64),
                settings_sha256=str(stored["settings_sha256"]) if "settings_sha256" in stored.files else "",
                row_times=stored["row_times"] if "row_times" in stored.files else np.zeros(0, np.int64),
                **{"latest_features": stored["latest_features"], "latest_time": int(stored["latest_time"])}
                if "latest_features" in stored.files
                else {},
                append_base=json.loads(str(stored["append_base"])),
                tail_times=stored["tail_times"],
                tail_values=stored["tail_values"],
            )
    except DataError:
        raise
    except (OSError, ValueError, KeyError) as error:
        import zipfile

        archive = isinstance(error, OSError) or zipfile.is_zipfile(path)
        reason = str(error).splitlines()[0] if archive else "not an .npz archive"
        raise DataError(f"{path}: not a valid rnnfleet array file ({reason}); delete it and re-run") from None
    if not normalised:
        return replace(arrays, raw_features=raw_features, raw_targets=raw_targets)
    statistics = (arrays.feature_mean, arrays.feature_std, arrays.target_mean, arrays.target_std)
    return normalised_with(arrays, raw_features, raw_targets, statistics)


# ---- reading an array file in parts: its head, rows in slices, its length --------------------------

# What reading a damaged or vanished array file raises (np.load, zipfile, the headers).
UNREADABLE = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)
_LOCAL_HEADER = struct.Struct("<4s5H3I2H")  # a zip member's local file header (30 bytes)


def npz_rows(path: str, member: str, start: int, stop: int) -> np.ndarray:
    """Rows start..stop of an array of an uncompressed .npz (rnnfleet.prep.arrays_file.save_arrays),
    read through a memory map: the rest of the array is never read."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(f"{member}.npy")
        if info.compress_type != zipfile.ZIP_STORED:
            with np.load(path, allow_pickle=False) as stored:
                return np.array(stored[member][start:stop])
        with archive.open(info) as handle:
            version = np.lib.format.read_magic(handle)
            reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = reader(handle)
            header_bytes = handle.tell()
    with open(path, "rb") as raw:
        raw.seek(info.header_offset)
        fields = _LOCAL_HEADER.unpack(raw.read(_LOCAL_HEADER.size))
    data_offset = info.header_offset + _LOCAL_HEADER.size + fields[-2] + fields[-1] + header_bytes
    mapped = np.memmap(path, dtype=dtype, mode="r", offset=data_offset, shape=shape, order="F" if fortran else "C")
    rows = np.array(mapped[start:stop])
    del mapped
    return rows


@dataclass(frozen=True)
class ArraysHead:
    """The small members of an array file: what the fleet's pretraining needs besides its rows."""

    rows: int
    train_end: int
    horizon: int
    horizons: tuple[int, ...]
    warmup: int
    target: str
    feature_names: tuple[str, ...]
    gap_bars: np.ndarray
    row_times: np.ndarray
    target_mean: float | np.ndarray
    target_std: float | np.ndarray
    feature_mean: np.ndarray
    feature_std: np.ndarray


def read_head(path: str) -> ArraysHead:
    """The small members of an array file (np.load of an .npz reads only the members asked for)."""
    with np.load(path, allow_pickle=False) as stored:
        return ArraysHead(
            rows=member_length(path, "raw_targets"),
            train_end=int(stored["train_end"]),
            horizon=int(stored["horizon"]),
            horizons=tuple(int(h) for h in stored["horizons"]) if "horizons" in stored.files else (),
            warmup=int(stored["warmup"]),
            target=str(stored["target"]),
            feature_names=tuple(str(name) for name in stored["feature_names"]),
            gap_bars=np.asarray(stored["gap_bars"], np.int64),
            row_times=stored["row_times"] if "row_times" in stored.files else np.zeros(0, np.int64),
            target_mean=target_statistic(stored["target_mean"]),
            target_std=target_statistic(stored["target_std"]),
            feature_mean=stored["feature_mean"],
            feature_std=stored["feature_std"],
        )


def newest_bar_ns(path: str) -> int | None:
    """The time (ns) of an array file's last row, read alone (None: no bar times recorded)."""
    rows = member_length(path, "row_times")
    return int(npz_rows(path, "row_times", rows - 1, rows)[0]) if rows else None


def member_length(path: str, member: str) -> int:
    """The first dimension of an array file's member, from its header alone."""
    with zipfile.ZipFile(path) as archive, archive.open(f"{member}.npy") as handle:
        version = np.lib.format.read_magic(handle)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        return int(reader(handle)[0][0])


def array_rows(path: str) -> int | None:
    """The feature rows of an array file, from the header of its targets array alone; None
    where it cannot be read."""
    try:
        return member_length(path, "raw_targets")
    except UNREADABLE:
        return None


def recorded_timezone(path: str) -> str:
    """The zone(s) the array file says its bars' times were read in; '' where it cannot be read."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            return str(stored["timezone"]) if "timezone" in stored.files else ""
    except UNREADABLE:
        return ""
