"""The report's texts (report/*.rst) render as Snakemake renders them (Jinja, then docutils)
without a single reStructuredText warning or error, for a plain config, for datasets grouped
by `datasets.files` and for a datasets sheet; and the start page says how the datasets were
chosen."""

from __future__ import annotations

import copy
import re
import textwrap

import docutils.utils
import jinja2
import pytest
import yaml
from conftest import REPO
from docutils.core import publish_parts
from snakemake.utils import validate

REPORT_TEXTS = sorted((REPO / "report").glob("*.rst"))
# Snakemake's report appends these link targets to every text: the panels and one per category.
CATEGORIES = ("All datasets", "Loss curves")
LINK_TARGETS = (
    "\n\n.. _Workflow: javascript:show_panel('workflow')\n.. _Statistics: javascript:show_panel('statistics')\n"
)
LINK_TARGETS += "".join(f".. _{name}: javascript:app.showCategory('{name}')\n" for name in CATEGORIES)


def config_with_defaults(**overrides) -> dict:
    with open(REPO / "config.yaml") as handle:
        config = yaml.safe_load(handle)
    config = copy.deepcopy(config)
    for key, value in overrides.items():
        config[key] = value
    validate(config, schema=str(REPO / "schemas" / "config.schema.yaml"))
    return config


CONFIGS = {
    "pattern": config_with_defaults(),
    "files": config_with_defaults(datasets={"files": "**/{dataset}-1m-*"}),
    "sheet": config_with_defaults(datasets={"sheet": "config/datasets.tsv"}),
}


class Snakemake:
    def __init__(self, config: dict):
        self.config = config


def rendered(text_path, config: dict) -> str:
    """The text as Snakemake's report renders it: Jinja with trim_blocks/lstrip_blocks, then
    the link targets appended."""
    environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return environment.from_string(text_path.read_text() + LINK_TARGETS).render(
        snakemake=Snakemake(config), categories={}, files=[]
    )


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
@pytest.mark.parametrize("text_path", REPORT_TEXTS, ids=lambda path: path.name)
def test_report_text_has_no_restructuredtext_warning(text_path, config_name):
    source = rendered(text_path, CONFIGS[config_name])
    try:
        # halt_level 2: any docutils warning (level 2) or error raises instead of becoming a
        # "System Message" block on the page.
        publish_parts(source, writer="html", settings_overrides={"halt_level": 2, "report_level": 5})
    except docutils.utils.SystemMessage as message:
        pytest.fail(f"{text_path.name} ({config_name}): {message}\n{textwrap.indent(source, '    ')}")


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
@pytest.mark.parametrize("text_path", REPORT_TEXTS, ids=lambda path: path.name)
def test_report_text_has_a_space_after_every_code_span(text_path, config_name):
    html = publish_parts(rendered(text_path, CONFIGS[config_name]), writer="html")["body"]
    assert not re.findall(r"</(?:tt|code|span)>[,;:]?[A-Za-z]", html), (
        f"{text_path.name} ({config_name}): a code span runs into a word"
    )


def plain_start_page(config: dict) -> str:
    html = publish_parts(rendered(REPO / "report" / "workflow.rst", config), writer="html")["body"]
    return " ".join(html.split())


def test_start_page_says_how_the_datasets_were_chosen():
    assert re.search(r"matching <(tt|code|span) [^>]*>\*1m\*<", plain_start_page(CONFIGS["pattern"]))
    grouped = plain_start_page(CONFIGS["files"])
    assert "matching" not in grouped and "**/{dataset}-1m-*" in grouped
    sheet = plain_start_page(CONFIGS["sheet"])
    assert "config/datasets.tsv" in sheet and "matching" not in sheet
