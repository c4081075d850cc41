"""The conda environment pins the same versions as the pip requirements."""

from __future__ import annotations

import re
import sys

import yaml
from conftest import REPO

CONDA_NAMES = {"torch": "pytorch"}


def pinned(lines):
    return dict(re.match(r"([A-Za-z0-9_.-]+)==([^\s;#]+)", line).groups() for line in lines)


def requirement_pins(name: str) -> dict[str, str]:
    return pinned(
        line.strip()
        for line in (REPO / name).read_text().splitlines()
        if line.strip() and not line.startswith(("#", "-"))
    )


def test_conda_env_pins_the_same_versions_as_requirements():
    # requirements-onnx.txt: the export's optional packages, in the conda env too (--sdm conda runs export jobs).
    pip_pins = requirement_pins("requirements.txt") | requirement_pins("requirements-onnx.txt")
    conda_deps = yaml.safe_load((REPO / "envs" / "rnnfleet.yaml").read_text())["dependencies"]
    conda_pins = dict(dep.split("=", 1) for dep in conda_deps if isinstance(dep, str))
    for package, version in pip_pins.items():
        assert conda_pins.get(CONDA_NAMES.get(package, package)) == version, package
    assert conda_pins["python"] == f"{sys.version_info.major}.{sys.version_info.minor}"


def test_the_onnx_extra_pins_what_requirements_onnx_pins():
    import tomllib

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["onnx"]
    assert pinned(extra) == requirement_pins("requirements-onnx.txt")
    assert "-r requirements-onnx.txt" in (REPO / "requirements-dev.txt").read_text()
