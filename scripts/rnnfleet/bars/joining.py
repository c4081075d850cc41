"""A dataset of several files (rnnfleet.bars.discovery): checksums, joining in time order, the log lines.

Promises:
- verify_checksum: where `<file>.CHECKSUM` sits beside a data file (Binance Data Vision:
  `<sha256>  <name>`), the file's SHA-256 must be the one it names, else DataError naming
  the file (a corrupt or partial download).
- join_bars: the bars of every file in one table in time order; a minute held by two files
  with the same bar is kept once (daily and monthly files overlap), a minute held by two
  files with different bars is a DataError naming both files and the first such minute;
  volume only where every file has it.
- check_one_minute_bars: the median step between bars is one minute, else DataError
  saying which step it found.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from rnnfleet.bars.formats import BAR_KEYS
from rnnfleet.errors import DataError

CHECKSUM_SUFFIX = ".CHECKSUM"
ONE_MINUTE_NS = 60 * 10**9


CHECKSUM_VERIFIED = "sha256 verified"  # what a source line ends with when its .CHECKSUM matched


def verify_checksum(path: str) -> str | None:
    """CHECKSUM_VERIFIED when `<path>.CHECKSUM` exists and matches, None when there is none;
    DataError when it does not match or cannot be read as `<sha256>  <name>`."""
    checksum_path = path + CHECKSUM_SUFFIX
    try:
        with open(checksum_path, encoding="utf-8") as handle:
            words = handle.read().split()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise DataError(f"{checksum_path}: cannot be read ({error})") from None
    expected = words[0].lower() if words else ""
    if len(expected) != 64 or any(character not in "0123456789abcdef" for character in expected):
        raise DataError(f"{checksum_path}: not a checksum file ('<sha256>  <file name>' expected)")
    if file_sha256(path) != expected:
        raise DataError(
            f"{path}: its SHA-256 is not the one in {os.path.basename(checksum_path)} "
            "(a corrupt or incomplete download: fetch the file again)"
        )
    return CHECKSUM_VERIFIED


def file_sha256(path: str) -> str:
    """The SHA-256 of the file's bytes, in hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def time_range(frame) -> str:
    """'N bars, first to last' of a bars table (UTC)."""
    first, last = frame["timestamp"].iloc[0], frame["timestamp"].iloc[-1]
    return f"{len(frame)} bars, {first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M} UTC"


def join_bars(frames: list[tuple[str, object]]):
    """One bars table from (path, bars table) pairs, each sorted by time (see the module doc).
    attrs["notes"] holds each file's notes (prefixed by its name) and the duplicates dropped."""
    import pandas as pd

    notes = [f"{path}: {note}" for path, frame in frames for note in frame.attrs.get("notes", [])]
    without_volume = [path for path, frame in frames if "volume" not in frame.columns]
    if without_volume and len(without_volume) < len(frames):
        frames = [(path, frame.drop(columns="volume", errors="ignore")) for path, frame in frames]
        notes.append(f"volume not used: {without_volume[0]} has none ({len(without_volume)} file(s) without)")
    keys = [key for key in BAR_KEYS if key in frames[0][1].columns]
    joined = pd.concat([frame.assign(source=number) for number, (_, frame) in enumerate(frames)], ignore_index=True)
    joined = joined.sort_values("timestamp", kind="stable", ignore_index=True)
    repeated = joined["timestamp"].duplicated(keep=False).to_numpy()
    if repeated.any():
        shared = joined[repeated]
        first_of_minute = shared.groupby("timestamp")[keys].transform("first")
        differs = (shared[keys].to_numpy() != first_of_minute.to_numpy()).any(axis=1)
        if differs.any():
            row = shared.index[differs][0]
            minute = joined.at[row, "timestamp"]
            first_source = int(shared.loc[shared["timestamp"] == minute, "source"].iloc[0])
            raise DataError(
                f"{frames[first_source][0]} and {frames[int(joined.at[row, 'source'])][0]} hold different bars "
                f"for {minute:%Y-%m-%d %H:%M} UTC (the first such minute); remove or fix one of the two files"
            )
        later = joined["timestamp"].duplicated(keep="first").to_numpy()
        joined = joined[~later].reset_index(drop=True)
        notes.append(f"{int(later.sum())} bar(s) found in two files with the same values kept once")
    joined = joined.drop(columns="source")
    joined.attrs["notes"] = notes
    return joined


def check_one_minute_bars(timestamps_ns: np.ndarray, name: str) -> None:
    """DataError unless the median step between bars is one minute."""
    if len(timestamps_ns) < 2:
        return
    median_step = int(np.median(np.diff(timestamps_ns)))
    if median_step != ONE_MINUTE_NS:
        import pandas as pd

        raise DataError(
            f"{name}: the median step between bars is {pd.Timedelta(median_step, unit='ns')}, not 1 minute; "
            "rnnfleet trains on 1-minute bars (choose the 1-minute files with `pattern` or `datasets.files`)"
        )
