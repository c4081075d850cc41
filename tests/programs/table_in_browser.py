"""Opens the summary table page TABLE_HTML in headless Chromium (BROWSER), uses its search box,
page buttons and column headings as a user would, and prints as JSON what it shows after each
step: the first cells of the rows shown and the page's count line. For
tests/workflow/test_report.py. Arguments: BROWSER TABLE_HTML"""

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_report import Browser  # noqa: E402  (its DevTools pipe driver)

browser_path, table_html = sys.argv[1:3]
STEPS = {
    "opened": "true",
    "searched": "search.value = 'D0001'; search.dispatchEvent(new Event('input')); true",
    "cleared": "search.value = ''; search.dispatchEvent(new Event('input')); true",
    "more": "document.getElementById('more').click(); true",
    "sorted by dataset": "document.querySelectorAll('th')[0].click(); true",
    "sorted by dataset, reversed": "document.querySelectorAll('th')[0].click(); true",
    "best first": "document.getElementById('fleet-order').click(); true",
    "all": "document.getElementById('all').click(); true",
}
SHOWN = (
    "({rows: Array.from(document.querySelectorAll('tbody tr'))"
    ".filter(row => getComputedStyle(row).display !== 'none').map(row => row.cells[0].textContent.trim()),"
    " count: document.getElementById('shown').textContent})"
)
with tempfile.TemporaryDirectory() as profile:
    browser = Browser(browser_path, Path(profile))
    try:
        target = browser.send("Target.createTarget", url="about:blank")["targetId"]
        session = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        browser.send("Page.navigate", session, url=Path(table_html).resolve().as_uri())
        browser.wait_for(session, "document.readyState === 'complete'")
        shown = {}
        for step, action in STEPS.items():
            browser.evaluate(session, action)
            shown[step] = browser.evaluate(session, SHOWN)
    finally:
        browser.close()
print(json.dumps(shown))
