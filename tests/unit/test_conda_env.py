"""The conda environment pins the same versions as the pip requirements."""

from __future__ import annotations

import re
import sys

import yaml
from conftest import REPO

CONDA_NAMES = {"torch": "pytorch"}


def pinned(lines):
    return dict(re.match(r"([A-Za-z0-9_.-]+)==([^\s;#]+)", line).groups() for line in lines)


def test_conda_env_pins_the_same_versions_as_requirements():
    requirement_lines = [
        line.strip()
        for line in (REPO / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith(("#", "-"))
    ]
    pip_pins = pinned(requirement_lines)
    conda_deps = yaml.safe_load((REPO / "envs" / "rnnfleet.yaml").read_text())["dependencies"]
    conda_pins = dict(dep.split("=", 1) for dep in conda_deps if isinstance(dep, str))
    for package, version in pip_pins.items():
        assert conda_pins.get(CONDA_NAMES.get(package, package)) == version, package
    assert conda_pins["python"] == f"{sys.version_info.major}.{sys.version_info.minor}"
