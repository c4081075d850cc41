"""Job functions for tests/workflow/test_warm.py: imported by warm children through the client's sys.path."""

import json
import os
import sys
import time


def report_and_exit(report_path: str, exit_status: int) -> None:
    print("to the log", file=sys.stderr)
    print("to the job's stderr", file=sys.__stderr__)
    print("to the job's stdout")
    report = {
        "pid": os.getpid(),
        "parent": os.getppid(),
        "cwd": os.getcwd(),
        "marker": os.environ.get("MARKER"),
        "worker": os.environ.get("RNNFLEET_WORKER"),
    }
    with open(report_path, "w") as handle:
        json.dump(report, handle)
    sys.exit(exit_status)


def write_pid_and_sleep(report_path: str) -> None:
    with open(report_path, "w") as handle:
        handle.write(str(os.getpid()))
    time.sleep(120)


def report_plugin_value(report_path: str, reference: str) -> None:
    """Resolve a user's plug-in reference as a job does, and report what its function returns."""
    from rnnfleet.plugins import resolve

    value = resolve(reference, {}, "model.builder")()
    with open(report_path, "w") as handle:
        json.dump({"pid": os.getpid(), "parent": os.getppid(), "value": value}, handle)
