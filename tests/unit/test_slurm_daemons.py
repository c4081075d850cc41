"""The test cluster's daemon restart (tests/slurm/daemons.sh) stops the daemon its pid file
names, and nothing else: a stale pid file's number may belong to any process by now."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

DAEMONS_SH = Path(__file__).parents[1] / "slurm" / "daemons.sh"


def stopping(name: str, pid_file: Path) -> subprocess.Popen:
    """stop_daemon NAME PID_FILE, started."""
    return subprocess.Popen(["bash", "-c", f'source "{DAEMONS_SH}" && stop_daemon "$0" "$1"', name, str(pid_file)])


def stop_daemon(name: str, pid_file: Path) -> None:
    assert stopping(name, pid_file).wait(timeout=30) == 0


@pytest.fixture
def processes():
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def test_a_stale_pid_file_naming_another_process_leaves_that_process_running(tmp_path, processes):
    bystander = subprocess.Popen(["sleep", "60"])  # the pid the file names now belongs to it
    processes.append(bystander)
    pid_file = tmp_path / "slurmd.pid"
    pid_file.write_text(f"{bystander.pid}\n")

    stop_daemon("slurmd", pid_file)

    assert bystander.poll() is None, "a process that is not slurmd was signalled"


def test_the_daemon_its_pid_file_names_is_stopped(tmp_path, processes):
    daemon_program = tmp_path / "slurmd"  # a process whose name is slurmd
    shutil.copy(shutil.which("sleep"), daemon_program)
    daemon = subprocess.Popen([str(daemon_program), "60"])
    processes.append(daemon)
    pid_file = tmp_path / "slurmd.pid"
    pid_file.write_text(f"{daemon.pid}\n")

    stopper = stopping("slurmd", pid_file)

    assert daemon.wait(timeout=10) == -15  # SIGTERM; reaped here, so that the stopper sees it end
    assert stopper.wait(timeout=10) == 0


@pytest.mark.parametrize("content", ["", "not a number\n", "999999999\n"])
def test_an_empty_unreadable_or_dead_pid_file_is_passed_over(tmp_path, content):
    pid_file = tmp_path / "slurmctld.pid"
    pid_file.write_text(content)
    stop_daemon("slurmctld", pid_file)
    stop_daemon("slurmctld", tmp_path / "missing.pid")
