"""Project hygiene that users rely on: conda env in step with pip, lint and format clean."""

from __future__ import annotations

import re
import subprocess
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


def run_tool(*command):
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True)


def test_snakemake_lint_is_clean(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "X_1m.csv").write_text("timestamp,open,high,low,close,volume\n")
    result = run_tool(sys.executable, "-m", "snakemake", "--lint", "--config", f"data_dir={tmp_path / 'data'}")
    assert result.returncode == 0 and "good condition" in result.stdout + result.stderr, result.stderr


def test_snakefiles_are_snakefmt_formatted():
    result = run_tool(sys.executable, "-m", "snakefmt", "--check", "Snakefile", "rules")
    assert result.returncode == 0, result.stderr


def test_python_is_ruff_clean():
    folders = [name for name in ("scripts", "tests", "bench", "examples") if (REPO / name).is_dir()]
    check = run_tool(sys.executable, "-m", "ruff", "check", *folders)
    formatting = run_tool(sys.executable, "-m", "ruff", "format", "--check", *folders)
    assert check.returncode == 0, check.stdout
    assert formatting.returncode == 0, formatting.stdout
