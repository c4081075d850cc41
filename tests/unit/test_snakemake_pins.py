"""One supported Snakemake release, named alike everywhere it is stated."""

from __future__ import annotations

import re
import tomllib

import yaml
from conftest import REPO

from rnnfleet.snakemake_version import SUPPORTED_SNAKEMAKE, unsupported_snakemake_line


def test_requirements_conda_pyproject_and_snakefile_name_the_supported_snakemake():
    requirements = re.search(r"^snakemake==(\S+)", (REPO / "requirements.txt").read_text(), re.MULTILINE)
    conda = yaml.safe_load((REPO / "envs" / "rnnfleet.yaml").read_text())["dependencies"]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    snakefile = re.search(r'min_version\("([^"]+)"\)', (REPO / "Snakefile").read_text())
    assert requirements.group(1) == SUPPORTED_SNAKEMAKE
    assert f"snakemake={SUPPORTED_SNAKEMAKE}" in conda
    assert [name for name in project if name.startswith("snakemake")] == [f"snakemake=={SUPPORTED_SNAKEMAKE}"]
    assert snakefile.group(1) == SUPPORTED_SNAKEMAKE


def test_only_another_snakemake_gets_the_line():
    assert unsupported_snakemake_line(SUPPORTED_SNAKEMAKE) is None
    line = unsupported_snakemake_line("9.30.0")
    assert "Snakemake 9.30.0 is installed" in line and f"snakemake=={SUPPORTED_SNAKEMAKE}" in line
    assert "\n" not in line
