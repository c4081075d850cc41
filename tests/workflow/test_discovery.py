"""Parsing the workflow lists each folder of data_dir once and opens no dataset file: 10,000
datasets cost one listing (the size and time of each file, for its fingerprint, come from
its directory entry, one stat each, not from os.stat or an open)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import PROGRAMS, REPO, write_config

# Runs `snakemake --list-rules` (parse only: Snakefile, config, discovery) in-process with
# os.scandir / os.listdir / os.stat / os.lstat counting the calls that reach data_dir.
COUNT_FOLDER_ACCESS = (PROGRAMS / "count_folder_access.py").read_text()


def parse_counts(tmp_path, data_dir) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", COUNT_FOLDER_ACCESS, str(data_dir)]
        + ["-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--list-rules"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "train" in result.stdout.split()
    return json.loads(result.stdout.splitlines()[-1])


def test_parsing_lists_the_data_folder_once_and_opens_no_dataset(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for number in range(300):
        (data_dir / f"S{number:03d}_1m.csv").touch()
    write_config(tmp_path, data_dir=str(data_dir))
    calls = parse_counts(tmp_path, data_dir)
    assert calls == {"scandir": 1, "listdir": 0, "listings_below": 0, "stat_of_data_files": 0, "open_of_data_files": 0}


def test_a_tree_of_period_files_is_walked_once_opening_none(tmp_path):
    data_dir = tmp_path / "data"
    for symbol in range(30):
        folder = data_dir / "spot" / "daily" / "klines" / f"S{symbol:02d}USDT" / "1m"
        folder.mkdir(parents=True)
        for day in range(1, 11):
            (folder / f"S{symbol:02d}USDT-1m-2024-01-{day:02d}.zip").touch()
            (folder / f"S{symbol:02d}USDT-1m-2024-01-{day:02d}.zip.CHECKSUM").touch()
    write_config(tmp_path, data_dir=str(data_dir), datasets={"files": "**/{dataset}-1m-*"})
    calls = parse_counts(tmp_path, data_dir)
    folders_below = 3 + 30 * 2  # spot/daily/klines, then each symbol's folder and its 1m folder
    assert calls == {
        "scandir": 1,
        "listdir": 0,
        "listings_below": folders_below,
        "stat_of_data_files": 0,
        "open_of_data_files": 0,
    }
