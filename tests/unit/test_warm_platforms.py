"""Warm workers need fork, descriptor passing, peer credentials and OS file locks: without any
one of them, unsupported_reason names it (and jobs run in their own process). The whole
workflow on such a platform: tests/workflow/test_portability.py."""

from __future__ import annotations

import os


def test_each_missing_facility_alone_turns_warm_workers_off(monkeypatch):
    import socket

    import rnnfleet.runner.file_locks as file_locks
    import rnnfleet.runner.warm_client as warm

    assert warm.unsupported_reason() is None  # this test runs where all of them exist
    for module, name, reason in (
        (os, "fork", "no fork()"),
        (socket, "send_fds", "pass file descriptors"),
        (socket, "SO_PEERCRED", "cannot tell who is at the other end"),
    ):
        with monkeypatch.context() as patch:
            patch.delattr(module, name)
            patch.setattr(warm.sys, "platform", "linux")
            assert reason in warm.unsupported_reason()
    monkeypatch.setattr(file_locks, "os_locks_available", lambda: False)
    assert "no OS file locks" in warm.unsupported_reason()
