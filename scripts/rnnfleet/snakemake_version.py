"""The one Snakemake release rnnfleet supports, stated here alone.

requirements.txt, envs/rnnfleet.yaml, pyproject.toml and the Snakefile's min_version name the
same release (tests/unit/test_snakemake_version.py checks). rnnfleet replaces a few of
Snakemake's private functions (rnnfleet.hooks), each written against this release's source:
rnnfleet.hooks.apply applies them behind one gate, this release and their source unchanged;
on another release none applies, and a run says so in one line at its start.
"""

from __future__ import annotations

SUPPORTED_SNAKEMAKE = "9.27.1"


def unsupported_snakemake_line(installed: str) -> str | None:
    """The one line a run prints at its start on a Snakemake other than SUPPORTED_SNAKEMAKE
    (None on the supported one)."""
    if installed == SUPPORTED_SNAKEMAKE:
        return None
    return (
        f"rnnfleet: Snakemake {installed} is installed, rnnfleet supports {SUPPORTED_SNAKEMAKE} "
        "alone: its replacements of Snakemake's internals are off (slower planning of large fleets, "
        f"less protection of model files); install it with pip install snakemake=={SUPPORTED_SNAKEMAKE}"
    )
