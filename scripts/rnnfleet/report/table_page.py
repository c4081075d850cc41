"""The summary table as one HTML page (results/metrics.html): ranked best first, coloured by
verdict, a page of rows at a time with search and sorting over all of them (TABLE_SCRIPT), the
datasets not done listed above it."""

from __future__ import annotations

import html
import math
import os

from rnnfleet.atomic_files import atomic_write
from rnnfleet.report.rows import (
    VERDICT_CLASSES,
    best_first,
    flagged_count_text,
    fleet_counts,
    fleet_winners,
    quality_mark,
    verdict_class,
)
from rnnfleet.report.start_page import fleet_headline, fleet_numbers
from rnnfleet.scores.multiple_testing import as_number
from rnnfleet.scores.test_period import BEATS, NOT_DISTINGUISHABLE, WORSE

# The summary table's page lists this many datasets that are not done above the table.
MAX_LISTED_FAILURES = 50


def row_class(row: dict[str, str]) -> str:
    """The table row's colour: by the test verdict (verdict_class); without one, by the
    validation skill."""
    if verdict_class(row):
        return verdict_class(row)
    skill = as_number(row.get("val_skill"))
    return "good" if skill > 0 else "bad" if skill <= 0 else "none"


def format_cell(text: str) -> str:
    number = as_number(text)
    if math.isnan(number) or text.strip().lstrip("-").isdigit():
        return html.escape(text)
    return f"{number:.5g}"


def quality_html(row: dict[str, str]) -> str:
    """The mark of a dataset flagged for data quality, for its first cell ('' for none)."""
    mark = quality_mark(row)
    return f' <span class="quality">&#9888;{html.escape(mark)}</span>' if mark else ""


def not_done_html(rows: list[dict[str, str]]) -> str:
    """The datasets that are not done, each with its status and error line, as an HTML list
    ("" when all are done)."""
    not_ok = [row for row in rows if row.get("status", "ok") != "ok"]
    if not not_ok:
        return ""
    items = [
        f"<li><b>{html.escape(row['dataset'])}</b>: {html.escape(row['status'])}: {html.escape(row.get('error') or '')}</li>"
        for row in not_ok[:MAX_LISTED_FAILURES]
    ]
    if len(not_ok) > MAX_LISTED_FAILURES:
        items.append(f"<li>... and {len(not_ok) - MAX_LISTED_FAILURES} more (status column below)</li>")
    return (
        f'<p>{len(not_ok)} dataset(s) not done ("data error": fix or remove the file; "settings error": change '
        "the settings named; any other status may pass when the same command runs again):</p>\n"
        f"<ul>{''.join(items)}</ul>"
    )


def verdict_counts_text(rows: list[dict[str, str]]) -> str:
    """'2 beat the baseline, 1 not distinguishable from the baseline, 0 worse than the baseline'."""
    counts = {verdict: sum(row.get("test_verdict") == verdict for row in rows) for verdict in VERDICT_CLASSES}
    words = {BEATS: "beat the baseline", NOT_DISTINGUISHABLE: NOT_DISTINGUISHABLE, WORSE: "worse than the baseline"}
    return ", ".join(f"{count} {words[verdict]}" for verdict, count in counts.items())


# The summary table's rows shown at first, and each "more" adds as many: a browser lays out
# 10,000 rows of 50 columns in seconds, and the rows not shown cost nothing.
TABLE_PAGE_ROWS = 500


# Its search box, sortable columns and pages, in the page itself (a report opened from disk,
# or unpacked from its .zip, loads nothing from elsewhere).
TABLE_SCRIPT = """
const table = document.querySelector("table"), body = table.tBodies[0];
const divider = body.querySelector("tr.divider");
const rows = Array.from(body.rows).filter(row => row !== divider);
const dividerPlace = divider ? rows.findIndex(row => row.compareDocumentPosition(divider) & 2) : -1;
const search = document.getElementById("search"), shown = document.getElementById("shown");
const more = document.getElementById("more"), all = document.getElementById("all");
let order = rows, matching = rows, showing = PAGE_ROWS, texts = null, fleetOrder = true;
function show() {
  const visible = new Set(matching.slice(0, showing));
  const fragment = document.createDocumentFragment();
  order.forEach((row, place) => {
    if (fleetOrder && divider && place === dividerPlace) fragment.append(divider);
    row.classList.toggle("later", !visible.has(row));
    fragment.append(row);
  });
  if (divider) divider.classList.toggle("later", !fleetOrder || matching !== order || dividerPlace >= showing);
  body.append(fragment);
  const total = search.value.trim() ? `${matching.length} of ${rows.length} dataset(s) match` : `${rows.length} dataset(s)`;
  shown.textContent = `${total}, ${Math.min(showing, matching.length)} shown.`;
  more.hidden = all.hidden = showing >= matching.length;
}
function filter() {
  const term = search.value.trim().toLowerCase();
  if (term && !texts) texts = new Map(rows.map(row => [row, row.textContent.toLowerCase()]));
  matching = term ? order.filter(row => texts.get(row).includes(term)) : order;
  showing = PAGE_ROWS;
  show();
}
search.addEventListener("input", filter);
more.addEventListener("click", () => { showing += PAGE_ROWS; show(); });
all.addEventListener("click", () => { showing = rows.length; show(); });
function cellValue(row, column) {
  const text = row.cells[column].textContent.trim();
  return text === "" ? null : isNaN(Number(text)) ? text.toLowerCase() : Number(text);
}
table.tHead.addEventListener("click", event => {
  const heading = event.target.closest("th");
  if (!heading) return;
  const descending = heading.dataset.order !== "descending";
  for (const other of heading.parentElement.cells) delete other.dataset.order;
  heading.dataset.order = descending ? "descending" : "ascending";
  const keyed = rows.map(row => [cellValue(row, heading.cellIndex), row]);
  keyed.sort(([a], [b]) => {
    if (a === null || b === null) return (a === null) - (b === null);  // empty cells last
    if (typeof a !== typeof b) return typeof a === "number" ? -1 : 1;  // numbers before text
    return (a < b ? -1 : a > b ? 1 : 0) * (descending ? -1 : 1);
  });
  order = keyed.map(([, row]) => row);
  fleetOrder = false;
  filter();
});
document.getElementById("fleet-order").addEventListener("click", () => {
  for (const heading of table.tHead.rows[0].cells) delete heading.dataset.order;
  order = rows;
  fleetOrder = true;
  filter();
});
""".replace("PAGE_ROWS", str(TABLE_PAGE_ROWS))


def write_table_html(rows: list[dict[str, str]], columns: list[str], path: str | os.PathLike) -> None:
    """The summary table as a small self-contained HTML page, best test skill first (the report
    shows it in a frame; a CSV there would only offer a download)."""
    header = "".join(f"<th>{html.escape(column)}</th>" for column in columns)
    body = []
    ranked = best_first(rows)
    winners = fleet_winners(ranked)
    for place, row in enumerate(ranked):
        if place == winners and 0 < winners < len(ranked):
            body.append(
                f'<tr class="divider{" later" if place >= TABLE_PAGE_ROWS else ""}"><td colspan="{len(columns)}">Above: the {winners} that beat the baseline '
                "after the fleet correction. Below: all others, best test skill first (light green: beats it alone, "
                "not after the correction: possibly luck).</td></tr>"
            )
        cells = "".join(
            f"<td>{format_cell(row.get(column) or '')}{quality_html(row) if number == 0 else ''}</td>"
            for number, column in enumerate(columns)
        )
        later = " later" if place >= TABLE_PAGE_ROWS else ""  # shown on "more" (TABLE_SCRIPT)
        body.append(f'<tr class="{row_class(row)}{later}">{cells}</tr>')
    more_hidden = " hidden" if len(rows) <= TABLE_PAGE_ROWS else ""
    fleet = fleet_counts(rows)
    headline = fleet_numbers(rows) + (f" {fleet_headline(fleet)}" if fleet else "")
    headline = f'<p class="headline">{html.escape(headline)}</p>'
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>rnnfleet: all datasets</title>
<style>
body {{ font-family: sans-serif; font-size: 14px; margin: 1em; }}
table {{ border-collapse: collapse; }}
th, td {{ padding: 0.25em 0.7em; border-bottom: 1px solid #ddd; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
th {{ background: #f0f0f0; position: sticky; top: 0; cursor: pointer; }}
th[data-order="descending"]::after {{ content: " \\25BC"; }}
th[data-order="ascending"]::after {{ content: " \\25B2"; }}
tr.later {{ display: none; }}
tr.good td:first-child, tr.winner td:first-child {{ border-left: 4px solid #2ca02c; }}
tr.winner td:first-child {{ font-weight: bold; }}
tr.lucky td:first-child {{ border-left: 4px dashed #7fc97f; }}
tr.divider td {{ text-align: left; font-style: italic; border-bottom: 2px solid #2ca02c; }}
.headline {{ font-size: 15px; max-width: 60em; }}
tr.bad td:first-child {{ border-left: 4px solid #d62728; }}
tr.unclear td:first-child {{ border-left: 4px solid #bbbbbb; }}
tr.none td:first-child {{ border-left: 4px solid #999; }}
.quality {{ color: #b35900; font-weight: bold; }}
</style></head><body>
{headline}
{not_done_html(rows)}
{f'<p class="quality">{html.escape(flagged_count_text(rows))} (marked in the first column; column <i>quality_flags</i>, docs/data.md).</p>' if flagged_count_text(rows) else ""}
<p>{len(rows)} dataset(s), best test skill first{", those that beat the baseline after the fleet correction ahead" if winners else ""} ({verdict_counts_text(rows)}, each alone). <i>test_skill</i> is measured on
the test period, which neither training nor the choice of epoch saw; <i>val_skill</i> is the validation
skill (the part that chose the epoch). Green: the 95% interval of the test skill
(<i>test_skill_low</i> .. <i>test_skill_high</i>) lies above 0, the model beats its naive baseline
(column <i>baseline</i>: zero return, training mean or training share of up moves, per target);
grey: the interval includes 0, <b>{NOT_DISTINGUISHABLE}</b>; red: worse than it.
<i>fleet_verdict</i> and <i>fleet_qvalue</i>: the same question asked of the whole fleet, the
Diebold-Mariano p-values adjusted for the number of datasets (column <i>fleet_correction</i>;
bold green: beats the baseline after it; dashed light green: beats it alone only).
Columns <i>model</i>, <i>features</i> and <i>target</i> say what each dataset trained with.</p>
<p><input id="search" type="search" size="40" placeholder="search: a dataset's name or any cell">
<span id="shown">{len(rows)} dataset(s), {min(len(rows), TABLE_PAGE_ROWS)} shown.</span>
<button id="more"{more_hidden}>{TABLE_PAGE_ROWS} more</button> <button id="all"{more_hidden}>all</button>
Click a column's name to sort by it, again to reverse; <button id="fleet-order">best first</button>
restores the order above.</p>
<table><thead><tr>{header}</tr></thead>
<tbody>
{chr(10).join(body)}
</tbody></table>
<script>{TABLE_SCRIPT}</script></body></html>
"""
    with atomic_write(path) as handle:
        handle.write(page.encode())
