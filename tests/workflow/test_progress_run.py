"""The run's estimate of its remaining time (rnnfleet.workflow.progress): a line each time
another tenth of its trainings is done, from the metrics files they write; through the real
snakemake, and the thread alone on files this test writes."""

from __future__ import annotations

import re
import time

from conftest import add_datasets, snakemake, write_config

from rnnfleet.workflow.progress import remaining_line, watch_trainings


def test_a_run_says_how_many_trainings_are_done_and_about_how_long_the_rest_take(tmp_path):
    # Each training several times the watch's one-second poll (warm workers train the tiny
    # defaults in under a second: a poll could see none and then all of them done).
    add_datasets(tmp_path, [f"S{number}_1m" for number in range(4)], rows=2000)
    write_config(tmp_path, data_dir="data", train={"epochs": 100, "patience": 100})
    output = snakemake(tmp_path, "--cores", "1").stderr  # one training at a time: each finishes alone
    lines = re.findall(r"rnnfleet: (\d) of 4 trainings done in \d+ s; about \d+ s left at the rate so far", output)
    assert lines and all(1 <= int(done) < 4 for done in lines), output[-3000:]
    assert lines == sorted(lines, key=int)


def test_the_watch_says_a_line_per_tenth_done_and_stops_when_all_are(tmp_path):
    paths = [str(tmp_path / f"S{number}.json") for number in range(20)]
    said: list[str] = []
    started = time.time()
    thread = watch_trainings(paths, started, said.append)
    for done, path in enumerate(paths, 1):
        (tmp_path / path).write_text("{}")
        if done in (1, 2, 4, 10):  # a line for the first, then one per tenth (every 2 of 20)
            deadline = time.monotonic() + 10
            while not any(line.startswith(f"rnnfleet: {done} of 20 ") for line in said):
                assert time.monotonic() < deadline, said
                time.sleep(0.05)
    thread.join(timeout=10)
    assert not thread.is_alive()  # every training done: the watch ends
    assert all("of 20 trainings done" in line for line in said) and not any(" 20 of 20 " in line for line in said)
    assert remaining_line(5, 20, 100.0).endswith(
        "5 of 20 trainings done in 1 min 40 s; about 5 min 00 s left at the rate so far"[-68:]
    )
    assert watch_trainings(paths[:1], started, said.append) is None  # one training: nothing to estimate
