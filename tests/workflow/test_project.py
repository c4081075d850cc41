"""Project hygiene that users rely on: lint and format clean (the conda env: tests/unit/test_conda_env.py)."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


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
