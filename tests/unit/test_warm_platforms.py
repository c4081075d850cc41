"""Which path of warm workers a platform can take: the fork path needs fork, descriptor passing,
peer credentials and OS file locks; without any of the first three, unsupported_reason names
it and jobs take the spawn path, which needs OS file locks alone; without those, each job runs
in its own process. The whole workflow on such platforms: tests/workflow/test_portability.py."""

from __future__ import annotations

import os
import sys


def test_each_missing_facility_alone_turns_the_fork_path_off_and_only_missing_locks_the_spawn_path(monkeypatch):
    import socket

    import rnnfleet.runner.file_locks as file_locks
    import rnnfleet.runner.spawn_client as spawn
    import rnnfleet.runner.warm_client as warm

    assert warm.unsupported_reason() is None and spawn.unsupported_reason() is None  # all of them exist here
    for module, name, reason in (
        (os, "fork", "no fork()"),
        (socket, "send_fds", "pass file descriptors"),
        (socket, "SO_PEERCRED", "cannot tell who is at the other end"),
    ):
        with monkeypatch.context() as patch:
            patch.delattr(module, name)
            patch.setattr(warm.sys, "platform", "linux")
            assert reason in warm.unsupported_reason()
            assert spawn.unsupported_reason() is None  # the spawn path needs none of them
    monkeypatch.setattr(file_locks, "os_locks_available", lambda: False)
    assert "no OS file locks" in warm.unsupported_reason()
    monkeypatch.setitem(sys.modules, "fcntl", None)  # an import of it fails, as where it is missing
    assert "no OS file locks" in spawn.unsupported_reason()


def test_the_spawn_paths_check_for_os_file_locks_agrees_with_the_locks_module():
    # The job's client asks without importing filelock (file_locks.os_locks_available does).
    import rnnfleet.runner.file_locks as file_locks
    import rnnfleet.runner.spawn_client as spawn

    assert (spawn.unsupported_reason() is None) == file_locks.os_locks_available()
