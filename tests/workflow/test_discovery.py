"""Parsing the workflow lists data_dir once and touches no dataset file: 10,000 datasets cost one listing."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO, write_config

# Runs `snakemake --list-rules` (parse only: Snakefile, config, discovery) in-process with
# os.scandir / os.listdir / os.stat / os.lstat counting the calls that reach data_dir.
COUNT_FOLDER_ACCESS = """
import json, os, sys
# `python -c` puts the current folder on sys.path, and Snakemake's plugin discovery lists
# every folder found there (data/ included): not the workflow's doing, so leave it out.
sys.path = [entry for entry in sys.path if entry not in ("", os.getcwd())]
data_dir = os.path.abspath(sys.argv[1])
calls = {"scandir": 0, "listdir": 0, "stat_of_data_files": 0}

def counting(name, original, is_listing):
    def wrapper(path=".", *args, **kwargs):
        real = os.path.abspath(os.fsdecode(path)) if isinstance(path, (str, bytes, os.PathLike)) else ""
        if is_listing and real == data_dir:
            calls[name] += 1
        elif not is_listing and real.startswith(data_dir + os.sep):
            calls["stat_of_data_files"] += 1
        return original(path, *args, **kwargs)
    return wrapper

os.scandir = counting("scandir", os.scandir, True)
os.listdir = counting("listdir", os.listdir, True)
os.stat = counting("stat", os.stat, False)
os.lstat = counting("lstat", os.lstat, False)
from snakemake.cli import main
try:
    main(sys.argv[2:])
except SystemExit as exit:
    assert not exit.code, exit.code
print(json.dumps(calls))
"""


def test_parsing_lists_the_data_folder_once_and_stats_no_dataset(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for number in range(300):
        (data_dir / f"S{number:03d}_1m.csv").touch()
    write_config(tmp_path, data_dir=str(data_dir))
    result = subprocess.run(
        [sys.executable, "-c", COUNT_FOLDER_ACCESS, str(data_dir)]
        + ["-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--list-rules"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "train" in result.stdout.split()
    calls = json.loads(result.stdout.splitlines()[-1])
    assert calls == {"scandir": 1, "listdir": 0, "stat_of_data_files": 0}
