"""The documentation holds together: every relative link in the README, docs/*.md and
bench/README.md points to a file that exists (and to a heading that exists, for #anchors),
the README stays short, and docs/configuration.md lists every key of the config schema
with the schema's default."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import REPO, schema_keys

PAGES = sorted([REPO / "README.md", REPO / "bench" / "README.md", *(REPO / "docs").glob("*.md")])
README_MAX_LINES = 220
# [text](target) outside code; images too. The target ends at whitespace or ")".
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code removed."""
    lines, in_fence = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            in_fence = not in_fence
            continue
        if not in_fence:
            lines.append(INLINE_CODE.sub("", line))
    return lines


def links(page: Path) -> list[str]:
    return [target for line in prose_lines(page.read_text()) for target in LINK.findall(line)]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case; backticks, asterisks and punctuation other
    than - and _ dropped; spaces to dashes."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    counts: dict[str, int] = {}
    for line in prose_lines_keeping_code(page.read_text()):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            name = anchor(match.group(1))
            number = counts.get(name, 0)
            counts[name] = number + 1
            found.add(name if number == 0 else f"{name}-{number}")
    return found


def prose_lines_keeping_code(text: str) -> list[str]:
    """The lines outside fenced code blocks, inline code kept (headings use it)."""
    lines, in_fence = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            in_fence = not in_fence
        elif not in_fence:
            lines.append(line)
    return lines


def test_the_pages_exist_and_link_somewhere():
    assert (REPO / "docs" / "configuration.md") in PAGES and len(PAGES) >= 10
    assert all(links(page) for page in PAGES), [page.name for page in PAGES if not links(page)]


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    """Each relative link of the page that points to no file under root, or to no heading."""
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not checked here
            continue
        path_part, _, fragment = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        if root != linked and root not in linked.parents:
            broken.append(f"{target}: outside the repository")
        elif not linked.exists():
            broken.append(f"{target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{target}: no heading with anchor #{fragment} in {linked.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    assert not broken_links(page), broken_links(page)


def test_the_link_checker_catches_a_missing_file_a_missing_anchor_and_ignores_code(tmp_path):
    root = tmp_path.resolve()
    (root / "other.md").write_text("# Other\n\n## Sizing `gpu_mem` (optional, Linux)\n")
    page = root / "page.md"
    page.write_text(
        "# Title\n\n## A `code` heading, here\n\n"
        "[ok](#a-code-heading-here) [ok](other.md#sizing-gpu_mem-optional-linux) [no](#nowhere)\n"
        "[no](missing.md) [no](other.md#nowhere) [no](../outside.md) [web](https://example.org/x.md)\n"
        "```\n[in a code block](missing.md)\n```\nsee `[inline code](missing.md)`\n"
    )
    assert anchors(page) == {"title", "a-code-heading-here"}
    assert broken_links(page, root) == [
        "#nowhere: no heading with anchor #nowhere in page.md",
        "missing.md: no such file",
        "other.md#nowhere: no heading with anchor #nowhere in other.md",
        "../outside.md: outside the repository",
    ]


def test_the_readme_stays_short():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def written_default(value: object) -> str:
    """A default as docs/configuration.md writes it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (int, float)):
        return str(value)
    if value == "":
        return '`""`'
    if isinstance(value, list):
        return "`[" + ", ".join(map(str, value)) + "]`"
    if value == {}:
        return "`{}`"
    return f"`{value}`"


def test_configuration_page_lists_every_schema_key_with_its_default():
    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    expected = {key: written_default(default) for key, default in schema_keys(schema["properties"]).items()}
    rows = re.findall(r"^\| `([\w.]+)` \| ([^|]+?) \|", (REPO / "docs" / "configuration.md").read_text(), re.M)
    listed = dict(rows)
    assert len(rows) == len(listed), "a key is listed twice"
    assert set(listed) == set(expected), (sorted(set(expected) - set(listed)), sorted(set(listed) - set(expected)))
    wrong = {key: (listed[key], expected[key]) for key in expected if listed[key] != expected[key]}
    assert not wrong, wrong
    assert {"train.lr", "model.builder", "format.positions", "columns.date"} <= set(listed)
