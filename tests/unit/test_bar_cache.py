"""The bars cache of a dataset of several files (rnnfleet.bars.bar_cache): files unchanged since they
were read are taken from it, new and changed files are read, and what comes back is what reading
every file gives (the table, its notes, and the arrays made from it)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import rnnfleet.prep.prepare as data_module
from rnnfleet.bars.bar_cache import cache_path_for
from rnnfleet.prep.arrays_file import save_arrays
from rnnfleet.prep.prepare import prepare_dataset, read_clean_bars
from rnnfleet.synthetic import synthetic_bars

DAY = 300  # bars of one "day" file
DAYS = 4
# What differs between a read through the cache and one without: the lines saying which was which.
READING_ATTRS = ("reading", "read_sources")


@pytest.fixture
def history() -> pd.DataFrame:
    return synthetic_bars(DAY * (DAYS + 2), 5)


def write_day(folder: Path, history: pd.DataFrame, day: int) -> str:
    """Day files in the shapes a download gives: plain CSV, gzip, one with a NaN row, a .CHECKSUM."""
    part = history.iloc[day * DAY : (day + 1) * DAY].copy()
    path = folder / f"S-1m-{day:02d}.csv"
    if day == 1:
        part.iloc[7, part.columns.get_loc("high")] = np.nan  # dropped, with a note
    if day == 2:
        path = path.with_name(path.name + ".gz")
        with gzip.open(path, "wt") as handle:
            part.to_csv(handle, index=False, float_format="%.6f")
    else:
        part.to_csv(path, index=False, float_format="%.6f")
    if day == 3:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        Path(f"{path}.CHECKSUM").write_text(f"{digest}  {path.name}\n")
    return str(path)


def overlapping_file(folder: Path, history: pd.DataFrame) -> str:
    """A file repeating the last hour of day 0 and the first of day 1 (a monthly and a daily file)."""
    path = folder / "S-1m-overlap.csv"
    history.iloc[DAY - 60 : DAY + 60].to_csv(path, index=False, float_format="%.6f")
    return str(path)


def without_reading_lines(attrs: dict) -> dict:
    """attrs less what tells how the bars were read, and less each file's SHA-256: the cache
    records it, a read without the cache does not hash the files (rnnfleet.prep.prepare.file_facts)."""
    kept = {key: value for key, value in attrs.items() if key not in READING_ATTRS}
    if "files" in kept:
        kept["files"] = [without_digest(facts) for facts in kept["files"]]
    return kept


def without_digest(facts: dict) -> dict:
    return {key: value for key, value in facts.items() if key != "sha256"}


def append_base_without_digests(member) -> dict:
    base = json.loads(str(member))
    base["files"] = [without_digest(facts) for facts in base.get("files", [])]
    return base


def assert_same_read(cached: pd.DataFrame, full: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(cached, full, check_exact=True)
    assert without_reading_lines(cached.attrs) == without_reading_lines(full.attrs)


@pytest.fixture
def counted_reads(monkeypatch) -> list[str]:
    """The files the reader opened (rnnfleet.prep.prepare.read_bars calls)."""
    opened: list[str] = []
    real = data_module.read_bars

    def counting(path, *args, **kwargs):
        opened.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(data_module, "read_bars", counting)
    return opened


def test_a_new_day_reads_only_its_file_and_gives_the_table_of_reading_every_file(tmp_path, history, counted_reads):
    files = [write_day(tmp_path, history, day) for day in range(DAYS)] + [overlapping_file(tmp_path, history)]
    cache = tmp_path / "prep" / "bars" / "S.npz"
    read_clean_bars(files, None, 0.01, cache_path=cache)
    assert sorted(counted_reads) == sorted(files)
    files.append(write_day(tmp_path, history, DAYS))
    counted_reads.clear()
    cached = read_clean_bars(files, None, 0.01, cache_path=cache, dataset="S")
    assert counted_reads == [files[-1]]
    assert cached.attrs["reading"][-1] == (
        f"S ({len(files)} files under {tmp_path}): 1 file(s) read ({DAY:,} bars), {len(files) - 1} file(s) "
        f"unchanged since they were read taken from {cache} ({DAYS * DAY - 1 + 120:,} bars)"
    )
    full = read_clean_bars(files, None, 0.01)
    assert_same_read(cached, full)
    assert any("NaN" in note for note in cached.attrs["notes"])  # day 1's note, from the cache
    assert any("kept once" in note for note in cached.attrs["notes"])
    counted_reads.clear()
    again = read_clean_bars(files, None, 0.01, cache_path=cache)
    assert counted_reads == []
    assert_same_read(again, full)


def test_the_arrays_made_through_the_cache_are_those_of_reading_every_file(tmp_path, history):
    files = [write_day(tmp_path, history, day) for day in range(DAYS)]
    settings = {"seq_len": 20, "horizon": 2, "val_fraction": 0.2, "dataset": "S"}
    prepare_dataset(files[:-1], **settings, bars_cache=tmp_path / "bars.npz")
    through_cache, _ = prepare_dataset(files, **settings, bars_cache=tmp_path / "bars.npz")
    every_file, _ = prepare_dataset(files, **settings)
    save_arrays(through_cache, tmp_path / "cached.npz")
    save_arrays(every_file, tmp_path / "full.npz")
    with np.load(tmp_path / "cached.npz") as cached, np.load(tmp_path / "full.npz") as full:
        assert cached.files == full.files
        for member in full.files:
            if member == "append_base":
                assert append_base_without_digests(cached[member]) == append_base_without_digests(full[member])
                continue
            assert cached[member].dtype == full[member].dtype, member
            np.testing.assert_array_equal(cached[member], full[member], err_msg=member, strict=True)


def test_a_changed_file_is_read_again_and_its_new_bars_used(tmp_path, history, counted_reads):
    files = [write_day(tmp_path, history, day) for day in range(DAYS)]
    cache = tmp_path / "bars.npz"
    read_clean_bars(files, None, 0.01, cache_path=cache)
    changed = pd.read_csv(files[0])
    changed["close"] *= 1.001
    changed.to_csv(files[0], index=False, float_format="%.6f")
    os.utime(files[0], ns=(os.stat(files[0]).st_atime_ns, os.stat(files[0]).st_mtime_ns + 10**9))
    counted_reads.clear()
    cached = read_clean_bars(files, None, 0.01, cache_path=cache)
    assert counted_reads == [files[0]]
    # The line names the first bar that changed: the file's first bar, its close.
    before = history.iloc[0]
    first = pd.Timestamp(before["timestamp"], tz="UTC").strftime("%Y-%m-%d %H:%M")
    line = f"{files[0]}: changed since it was read (first at its bar {first} UTC: close {float(before['close']):g} -> "
    assert any(reading.startswith(line) for reading in cached.attrs["reading"]), cached.attrs["reading"]
    assert_same_read(cached, read_clean_bars(files, None, 0.01))


def test_a_file_written_again_with_the_same_bytes_is_not_read_again(tmp_path, history, counted_reads):
    files = [write_day(tmp_path, history, day) for day in range(DAYS)]
    cache = tmp_path / "bars.npz"
    read_clean_bars(files, None, 0.01, cache_path=cache)
    Path(files[0]).write_bytes(Path(files[0]).read_bytes())  # a download of the same file again
    os.utime(files[0], ns=(os.stat(files[0]).st_atime_ns, os.stat(files[0]).st_mtime_ns + 10**9))
    counted_reads.clear()
    cached = read_clean_bars(files, None, 0.01, cache_path=cache)
    assert counted_reads == []
    assert_same_read(cached, read_clean_bars(files, None, 0.01))


def test_a_changed_checksum_file_reads_its_data_file_again(tmp_path, history, counted_reads):
    files = [write_day(tmp_path, history, day) for day in range(DAYS)]
    cache = tmp_path / "bars.npz"
    read_clean_bars(files, None, 0.01, cache_path=cache)
    Path(f"{files[3]}.CHECKSUM").write_text("0" * 64 + "  wrong\n")
    counted_reads.clear()
    with pytest.raises(data_module.DataError, match="its SHA-256 is not the one"):
        read_clean_bars(files, None, 0.01, cache_path=cache)
    assert counted_reads == []  # refused by the checksum before it was parsed


def test_a_file_gone_from_the_dataset_is_dropped_from_the_cache(tmp_path, history, counted_reads):
    files = [write_day(tmp_path, history, day) for day in range(DAYS)]
    cache = tmp_path / "bars.npz"
    read_clean_bars(files, None, 0.01, cache_path=cache)
    counted_reads.clear()
    fewer = read_clean_bars(files[1:], None, 0.01, cache_path=cache)
    assert counted_reads == []
    assert_same_read(fewer, read_clean_bars(files[1:], None, 0.01))
    with np.load(cache) as stored:
        assert len(stored["times"]) == len(fewer)


@pytest.mark.parametrize(
    "change, why",
    [
        (lambda cache: {"format": {"timezone": "Europe/London"}}, "made with other reading settings"),
        (lambda cache: cache.write_bytes(os.urandom(200)) and {}, "cannot be read"),
    ],
    ids=["other reading settings", "damaged cache"],
)
def test_a_cache_made_otherwise_or_damaged_is_set_aside_and_every_file_read(
    tmp_path, history, counted_reads, change, why
):
    files = [write_day(tmp_path, history, day) for day in range(DAYS)]
    cache = tmp_path / "bars.npz"
    read_clean_bars(files, None, 0.01, cache_path=cache)
    read_format = change(cache).get("format")
    counted_reads.clear()
    cached = read_clean_bars(files, None, 0.01, read_format, cache_path=cache)
    assert sorted(counted_reads) == sorted(files)
    assert cached.attrs["reading"][0].startswith(f"{cache}: set aside, {why}")
    assert_same_read(cached, read_clean_bars(files, None, 0.01, read_format))
    counted_reads.clear()
    read_clean_bars(files, None, 0.01, read_format, cache_path=cache)
    assert counted_reads == []  # written again the new way


def test_one_file_is_never_cached(tmp_path, history):
    only = write_day(tmp_path, history, 0)
    read_clean_bars([only], None, 0.01, cache_path=tmp_path / "bars.npz")
    assert not (tmp_path / "bars.npz").exists()


def test_the_cache_sits_in_a_bars_folder_beside_the_array_file():
    assert cache_path_for("prep/AAA_1m.npz") == Path("prep/bars/AAA_1m.npz")
