"""The browser checks never pass unopened in CI: without Chromium they fail there, and skip
elsewhere with the reason `make test` gave (tests/browser/install_chromium.sh)."""

from __future__ import annotations

import shutil

import conftest
import pytest


@pytest.fixture
def no_chromium(monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    reason = tmp_path / "chromium-missing"
    reason.write_text("apt-get could not install Debian's chromium\n")
    monkeypatch.setattr(conftest, "CHROMIUM_MISSING", reason)


def test_without_chromium_ci_fails_the_check(no_chromium, monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="apt-get could not install Debian's chromium"):
        conftest.chromium_or_skip()


def test_without_chromium_elsewhere_the_check_skips_with_the_reason(no_chromium, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no Chromium on this machine \\(apt-get could not install"):
        conftest.chromium_or_skip()
