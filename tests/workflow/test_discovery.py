"""Parsing the workflow lists data_dir once and touches no dataset file: 10,000 datasets cost one listing."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import PROGRAMS, REPO, write_config

# Runs `snakemake --list-rules` (parse only: Snakefile, config, discovery) in-process with
# os.scandir / os.listdir / os.stat / os.lstat counting the calls that reach data_dir.
COUNT_FOLDER_ACCESS = (PROGRAMS / "count_folder_access.py").read_text()


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
