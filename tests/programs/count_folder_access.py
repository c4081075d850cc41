"""Runs `snakemake ARGS...` in this process with os.scandir / os.listdir / os.stat / os.lstat
counting the calls that reach DATA_DIR (the folder itself, and below it) and an audit hook
counting the files opened below it, and prints the counts (JSON) last. Run as python -c
(tests/workflow/test_discovery.py). Arguments: DATA_DIR ARGS..."""

import json
import os
import sys

# `python -c` puts the current folder on sys.path, and Snakemake's plugin discovery lists
# every folder found there (data/ included): not the workflow's doing, so leave it out.
sys.path = [entry for entry in sys.path if entry not in ("", os.getcwd())]
data_dir = os.path.abspath(sys.argv[1])
calls = {"scandir": 0, "listdir": 0, "listings_below": 0, "stat_of_data_files": 0, "open_of_data_files": 0}


def counting(name, original, is_listing):
    def wrapper(path=".", *args, **kwargs):
        real = os.path.abspath(os.fsdecode(path)) if isinstance(path, (str, bytes, os.PathLike)) else ""
        if is_listing and real == data_dir:
            calls[name] += 1
        elif is_listing and real.startswith(data_dir + os.sep):
            calls["listings_below"] += 1
        elif not is_listing and real.startswith(data_dir + os.sep):
            calls["stat_of_data_files"] += 1
        return original(path, *args, **kwargs)

    return wrapper


def count_opens(event, args):
    if event == "open" and isinstance(args[0], (str, bytes)):
        if os.path.abspath(os.fsdecode(args[0])).startswith(data_dir + os.sep):
            calls["open_of_data_files"] += 1


sys.addaudithook(count_opens)
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
