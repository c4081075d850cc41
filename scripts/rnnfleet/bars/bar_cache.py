"""The bars each file of a dataset held when it was read, kept beside the arrays
(`<prep>/bars/<dataset>.npz`), so that a morning's preprocess job reads only the files that are
new or changed since, not the whole history again.

Promises:
- A file's bars come from the cache only when its path and bytes (the same size and modification
  time, or else the same SHA-256: a file written again with the same bytes is not read again),
  its `.CHECKSUM` file, the reading settings (`columns:`, `format:`, the NaN limit) and the
  reader itself (rnnfleet's reading code, pandas and numpy versions) are those it was read with;
  any other file is read again. What comes back is the table the reader gave (same values,
  dtypes, order and notes), so everything made from it is what reading every file would make.
- The cache holds numbers and JSON text only (loaded without pickles); a cache that cannot be
  read, or was made another way, is set aside with one line saying why and every file is read.
- `summary_lines` say what was read and what came from the cache, with their bar counts.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rnnfleet.bars.joining import CHECKSUM_SUFFIX, file_sha256

CACHE_FOLDER = "bars"
# The modules whose code reads a file into its bars (read_bars, drop_non_finite, the checksum).
READER_FILES = ("bars/formats.py", "bars/joining.py", "prep/prepare.py")  # by their path in the package
# The bar columns a cached table can hold, in the reader's order (rnnfleet.bars.formats.BAR_KEYS).
VALUE_KEYS = ("open", "high", "low", "close", "volume")


def cache_path_for(arrays_path: str | os.PathLike) -> Path:
    """Where the bars of the dataset whose array file is arrays_path are kept."""
    arrays = Path(arrays_path)
    return arrays.parent / CACHE_FOLDER / arrays.name


def file_version(path: str) -> list[int] | None:
    """[size, mtime_ns] of path and of its .CHECKSUM file (0, 0 when it has none); None when
    the file cannot be looked at (it is read, and the reader says why)."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    try:
        checksum = os.stat(path + CHECKSUM_SUFFIX)
        checksum_version = [checksum.st_size, checksum.st_mtime_ns]
    except OSError:
        checksum_version = [0, 0]
    return [status.st_size, status.st_mtime_ns, *checksum_version]


def reading_key(columns: dict | None, read_format: dict | None, max_bad_fraction: float) -> str:
    """A digest of everything besides the file that decides the bars read from it."""
    import pandas as pd

    code = hashlib.sha256()
    for name in READER_FILES:
        code.update((Path(__file__).parents[1] / name).read_bytes())
    described = {
        "columns": columns,
        "format": read_format,
        "max_bad_fraction": max_bad_fraction,
        "reader": code.hexdigest(),
        "pandas": pd.__version__,
        "numpy": np.__version__,
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class BarCache:
    """The cached tables of one dataset (take / put), written back by save when it changed."""

    path: Path
    key: str
    entries: dict[str, dict] = field(default_factory=dict)  # path -> index record
    tables: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # path -> (times, values)
    set_aside: str = ""  # why the cache on disk was not used, if it was not
    taken: list[tuple[str, int]] = field(default_factory=list)  # (path, bars) from the cache
    read: list[tuple[str, int, str]] = field(default_factory=list)  # (path, bars, why) read from the file
    read_reason: dict[str, str] = field(default_factory=dict)  # path -> why it is read again
    replaced: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # a changed file's bars before
    changed: bool = False

    @classmethod
    def open(cls, path: str | os.PathLike, key: str) -> BarCache:
        cache = cls(Path(path), key)
        if not cache.path.exists():
            return cache
        try:
            with np.load(cache.path, allow_pickle=False) as stored:
                if str(stored["key"]) != key:
                    cache.set_aside = "made with other reading settings or another rnnfleet, pandas or numpy"
                    cache.changed = True
                    return cache
                index = json.loads(str(stored["index"]))
                times, values = stored["times"], stored["values"]
        except (OSError, ValueError, KeyError) as error:
            cache.set_aside = f"cannot be read ({str(error).splitlines()[0] if str(error) else type(error).__name__})"
            cache.changed = True
            return cache
        start = 0
        for record in index:
            stop = start + record["rows"]
            cache.entries[record["path"]] = record
            cache.tables[record["path"]] = (times[start:stop], values[start:stop])
            start = stop
        return cache

    def take(self, path: str):
        """The bars table of path and its source line as cached, or None (then read it and put it)."""
        record = self.entries.get(path)
        if record is None:
            return None
        version = file_version(path)
        if version != record["version"]:
            if version is None or not same_bytes(path, version, record):
                self.replaced[path] = self.tables[path]
                self.drop(path)
                self.read_reason[path] = "changed since it was read"
                return None
            record["version"] = version
            self.changed = True
        frame = cached_frame(*self.tables[path], record)
        self.taken.append((path, len(frame)))
        return frame, record["source"]

    def put(self, path: str, frame, source: str, version: list[int] | None) -> None:
        """Keep path's bars as read (version: file_version before it was read)."""
        columns = [key for key in VALUE_KEYS if key in frame.columns]
        values = np.full((len(frame), len(VALUE_KEYS)), np.nan)
        for key in columns:
            values[:, VALUE_KEYS.index(key)] = frame[key].to_numpy(dtype=np.float64)
        times = frame["timestamp"].array.asi8.astype(np.int64)
        why = self.read_reason.pop(path, "new")
        if path in self.replaced:
            why += first_change(*self.replaced.pop(path), times, values)
        self.read.append((path, len(frame), why))
        if version is None:
            return
        attrs = {key: frame.attrs[key] for key in ("read_as", "timezone", "notes", "conflicting_duplicates")}
        self.entries[path] = {
            "path": path,
            "version": version,
            "sha256": file_sha256(path),
            "rows": len(frame),
            "columns": columns,
            "attrs": attrs,
            "source": source,
        }
        self.tables[path] = (times, values)
        self.changed = True

    def drop(self, path: str) -> None:
        self.entries.pop(path, None)
        self.tables.pop(path, None)
        self.changed = True

    def keep_only(self, paths: list[str]) -> None:
        """Drop the files no longer in the dataset."""
        kept = set(paths)
        for path in [path for path in self.entries if path not in kept]:
            self.drop(path)

    def save(self) -> None:
        """Write the cache (atomically) when anything was read or dropped."""
        from rnnfleet.atomic_files import atomic_write

        if not self.changed:
            return
        paths = list(self.entries)
        times = [self.tables[path][0] for path in paths]
        values = [self.tables[path][1] for path in paths]
        with atomic_write(self.path) as handle:
            np.savez(
                handle,
                key=np.str_(self.key),
                index=np.str_(json.dumps([self.entries[path] for path in paths])),
                times=np.concatenate(times) if times else np.zeros(0, np.int64),
                values=np.concatenate(values) if values else np.zeros((0, len(VALUE_KEYS))),
            )
        self.changed = False

    def summary_lines(self, name: str) -> list[str]:
        lines = [f"{self.path}: set aside, {self.set_aside}: every file read"] if self.set_aside else []
        lines += [f"{path}: {why}: read again" for path, _, why in self.read if why != "new"]
        taken_bars = sum(bars for _, bars in self.taken)
        read_bars = sum(bars for _, bars, _ in self.read)
        lines.append(
            f"{name}: {len(self.read)} file(s) read ({read_bars:,} bars), {len(self.taken)} file(s) unchanged "
            f"since they were read taken from {self.path} ({taken_bars:,} bars)"
        )
        return lines


def same_bytes(path: str, version: list[int], record: dict) -> bool:
    """Whether path, whose size or time is not the cached one, still holds the bytes it was read
    from (and its .CHECKSUM file is the same)."""
    size, _, *checksum_version = version
    cached_size, _, *cached_checksum_version = record["version"]
    if size != cached_size or checksum_version != cached_checksum_version:
        return False
    try:
        return file_sha256(path) == record["sha256"]
    except OSError:
        return False


def cached_frame(times: np.ndarray, values: np.ndarray, record: dict):
    """The bars table read_bars + drop_non_finite gave for the file of record."""
    import pandas as pd

    columns = {"timestamp": pd.Series(np.asarray(times, dtype=np.int64)).astype("datetime64[ns]").dt.tz_localize("UTC")}
    for key in record["columns"]:
        columns[key] = np.ascontiguousarray(values[:, VALUE_KEYS.index(key)])
    frame = pd.DataFrame(columns)
    frame.attrs.update(
        {key: (list(value) if isinstance(value, list) else value) for key, value in record["attrs"].items()}
    )
    return frame


def first_change(times: np.ndarray, values: np.ndarray, new_times: np.ndarray, new_values: np.ndarray) -> str:
    """' (first at its bar <time> UTC: <column> <before> -> <after>)' for the first bar of a
    file that differs from the bars it held when it was read (by time, then value), ' (its
    bars are the same, its bytes are not)' where none does, or the bar it lost or gained."""
    import pandas as pd

    def when(nanoseconds: int) -> str:
        return pd.Timestamp(int(nanoseconds), unit="ns", tz="UTC").strftime("%Y-%m-%d %H:%M")

    common = min(len(times), len(new_times))
    differs = (times[:common] != new_times[:common]) | ~(
        (values[:common] == new_values[:common]) | (np.isnan(values[:common]) & np.isnan(new_values[:common]))
    ).all(axis=1)
    if differs.any():
        row = int(np.flatnonzero(differs)[0])
        if times[row] != new_times[row]:
            return f" (first at its bar {row + 1}: {when(times[row])} UTC before, {when(new_times[row])} UTC now)"
        column = int(np.flatnonzero(values[row] != new_values[row])[0])
        return (
            f" (first at its bar {when(times[row])} UTC: {VALUE_KEYS[column]} "
            f"{values[row, column]:g} -> {new_values[row, column]:g})"
        )
    if len(times) != len(new_times):
        longer, what = (times, "lost") if len(times) > len(new_times) else (new_times, "gained")
        return f" ({what} bars from {when(longer[common])} UTC)"
    return " (its bars are the same, its bytes are not)"
