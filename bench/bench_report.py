"""The report of a large fleet: its size and the time a real browser takes to show it.

    .venv/bin/python bench/bench_report.py                       # 200 and 1,000 datasets
    .venv/bin/python bench/bench_report.py --sizes 200 1000 10000

For each --sizes N, one fleet folder of N tiny datasets: --trained of them trained for real
(a tiny GRU, one epoch, on --rows synthetic bars, enough for a full 400-window test period in
the loss curve), the others copies of those (bar file, array file, model file and metrics
under a new name: a dataset's figure costs what a real one costs, without training N models).
Then, in two copies of the folder, the real `snakemake` run that writes the table and draws
the figures (summarize and plots over all N), and the real `snakemake --report`:

- today: the workflow at --baseline (a git revision, checked out to a temporary folder),
  `snakemake --report report.html`;
- new: this checkout, `snakemake --report report.zip` (unpacked, as a user does, to open it).

Each report is opened in headless Chromium (driven over its DevTools pipe, no other package):
the time from asking for the page to its start page shown (the workflow text rendered and
painted), and from asking for the summary table to the table's frame loaded. Prints the
figures and the ratios new/today; appends a JSON line to bench/out/report.jsonl.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import yaml

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO / "scripts"))

from rnnfleet.synthetic import write_synthetic_csv  # noqa: E402

# A training that takes well under a second (bench_scale.py's); what is measured is the report.
TINY_MODEL = {"cell": "gru", "hidden_size": 4, "num_layers": 1, "dropout": 0.0}
TINY_TRAIN = {"seq_len": 8, "batch_size": 256, "epochs": 1, "patience": 1, "threads": 1}
# The start page's text (report/workflow.rst) and the table's first column.
START_TEXT = "one RNN per dataset"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[200, 1000], help="datasets per fleet")
    parser.add_argument("--trained", type=int, default=20, help="datasets trained for real in each fleet")
    parser.add_argument("--rows", type=int, default=3000, help="bars per trained dataset")
    parser.add_argument("--baseline", default="96ef2d4", help="git revision of today's report (the 'today' side)")
    parser.add_argument("--reps", type=int, default=3, help="browser openings per report (the median is printed)")
    parser.add_argument(
        "--today-up-to",
        type=int,
        default=1000,
        help="the largest fleet whose report is also written today's way: Snakemake renders each caption "
        "once per file there (134 s at 1,000 datasets, quadratic), hours at 10,000",
    )
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--browser", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--out", default=str(BENCH / "out"))
    parser.add_argument(
        "--open", metavar="REPORT_HTML", help="only open this report page (html, or an unpacked zip's) and print JSON"
    )
    return parser.parse_args()


def write_config(workdir: Path) -> None:
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config["data_dir"] = "data"  # relative: the copies of the folder train nothing again
    config["model"] = {**config["model"], **TINY_MODEL}
    config["train"] = {**config["train"], **TINY_TRAIN}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def snakemake(snakefile: Path, workdir: Path, *args: str, env: dict | None = None) -> float:
    """Run one snakemake command in workdir; its wall seconds."""
    command = [sys.executable, "-m", "snakemake", "-s", str(snakefile), "-d", str(workdir), *args]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return time.perf_counter() - started


def dataset_name(number: int) -> str:
    return f"T{number:05d}_1m"


def build_fleet(workdir: Path, datasets: int, trained: int, rows: int, cores: int) -> None:
    """`trained` datasets trained for real, the rest of `datasets` their copies under new names
    (files copied with their times, so that nothing is out of date and nothing trains again)."""
    trained = min(trained, datasets)
    for number in range(trained):
        write_synthetic_csv(workdir / "data" / f"{dataset_name(number)}.csv", rows, number)
    write_config(workdir)
    snakemake(REPO / "Snakefile", workdir, "--cores", str(cores))
    shutil.rmtree(workdir / "results")  # each side draws its own figures of all datasets
    shuffle = random.Random(0)
    for number in range(trained, datasets):
        source, name = dataset_name(number % trained), dataset_name(number)
        # hard links: the same bytes and times, no disk for 10,000 copies
        for folder, suffix in (("data", ".csv"), ("prep", ".npz"), ("models", ".pt")):
            os.link(workdir / folder / f"{source}{suffix}", workdir / folder / f"{name}{suffix}")
        metrics = json.loads((workdir / "metrics" / f"{source}.json").read_text())
        # another skill, so that the table and the chart rank a fleet, not 20 repeated values
        shift = shuffle.uniform(-0.05, 0.05)
        for key in ("test_skill", "test_skill_low", "test_skill_high"):
            if isinstance(metrics.get(key), float):
                metrics[key] += shift
        metrics["dataset"] = name
        (workdir / "metrics" / f"{name}.json").write_text(json.dumps(metrics))
        shutil.copystat(workdir / "metrics" / f"{source}.json", workdir / "metrics" / f"{name}.json")


def copy_fleet(source: Path, target: Path) -> None:
    """A copy of the trained folder: its inputs hard-linked (nothing writes them), the rest copied."""
    linked = {"data", "prep", "models", "metrics"}
    target.mkdir()
    for entry in source.iterdir():
        if entry.name in linked:
            shutil.copytree(entry, target / entry.name, copy_function=os.link)
        elif entry.is_dir():
            shutil.copytree(entry, target / entry.name, symlinks=True)
        else:
            shutil.copy2(entry, target / entry.name)


def checkout(revision: str, folder: Path) -> Path:
    """The workflow at `revision`, unpacked into folder; its Snakefile."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder / "Snakefile"


class Browser:
    """Headless Chromium driven over --remote-debugging-pipe (DevTools protocol, JSON messages
    separated by NUL bytes on file descriptors 3 and 4)."""

    def __init__(self, executable: str, profile: Path):
        to_browser_read, self.to_browser = os.pipe()
        self.from_browser, from_browser_write = os.pipe()

        def descriptors():  # in the child: its ends of the pipes as 3 and 4, whatever they were
            reading, writing = (fcntl.fcntl(end, fcntl.F_DUPFD, 100) for end in (to_browser_read, from_browser_write))
            os.dup2(reading, 3)
            os.dup2(writing, 4)

        self.process = subprocess.Popen(
            [executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--allow-file-access-from-files", "--no-first-run", "--window-size=1400,1000",
             f"--user-data-dir={profile}", "about:blank"],
            pass_fds=(3, 4), preexec_fn=descriptors,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(to_browser_read)
        os.close(from_browser_write)
        self.buffer, self.next_id, self.events = b"", 0, []

    def send(self, method: str, session: str | None = None, **params) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self.receive()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def receive(self) -> dict:
        while b"\0" not in self.buffer:
            chunk = os.read(self.from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("the browser closed its pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def evaluate(self, session: str, expression: str):
        result = self.send("Runtime.evaluate", session, expression=expression, returnByValue=True, awaitPromise=True)
        return result["result"].get("value")

    def wait_for(self, session: str, expression: str, timeout: float = 300) -> None:
        deadline = time.perf_counter() + timeout
        while not self.evaluate(session, expression):
            if time.perf_counter() > deadline:
                raise RuntimeError(f"not true after {timeout} s: {expression}")
            time.sleep(0.02)

    def wait_for_event(self, method: str, condition, timeout: float = 300) -> dict:
        deadline = time.perf_counter() + timeout
        while True:
            for event in self.events:
                if event.get("method") == method and condition(event["params"]):
                    self.events.remove(event)
                    return event
            self.events.clear()
            if time.perf_counter() > deadline:
                raise RuntimeError(f"no {method} after {timeout} s")
            self.events.append(self.receive())

    def open_report(self, url: str) -> dict:
        """Seconds from asking for the report to its start page shown, and from asking for the
        summary table (as a click on it in the report's menu does) to its frame loaded; in a
        fresh tab."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send("Page.enable", session)
        main_frame = self.send("Page.getFrameTree", session)["frameTree"]["frame"]["id"]
        started = time.perf_counter()
        self.send("Page.navigate", session, url=url)
        painted = "new Promise(done => requestAnimationFrame(() => setTimeout(() => done(true), 0)))"
        self.wait_for(session, f"!!document.body && document.body.innerText.includes({START_TEXT!r})")
        self.evaluate(session, painted)
        start_page = time.perf_counter() - started
        self.events.clear()
        started = time.perf_counter()
        self.evaluate(
            session,
            "new ToggleViewManager(app).handleSelectedResult("
            "Object.keys(results).find(path => path.endsWith('metrics.html'))); true",
        )
        self.wait_for_event("Page.frameStoppedLoading", lambda params: params["frameId"] != main_frame)
        self.evaluate(session, painted)
        table = time.perf_counter() - started
        # readable where the table is a file beside the page (an unpacked .zip), not a data: URI
        rows = self.evaluate(
            session,
            "(document.querySelector('iframe').contentDocument || {querySelectorAll: () => null})"
            ".querySelectorAll('tbody tr:not(.divider)')?.length ?? null",
        )
        self.send("Target.closeTarget", targetId=target)
        return {"start_page_s": start_page, "table_s": table, "table_rows": rows}

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        os.close(self.to_browser)
        os.close(self.from_browser)


def browser_figures(executable: str, url: str, reps: int, scratch: Path) -> dict:
    """Median over `reps` openings, each in a fresh browser (nothing cached)."""
    openings = []
    for rep in range(reps):
        browser = Browser(executable, scratch / f"profile-{rep}")
        try:
            openings.append(browser.open_report(url))
        finally:
            browser.close()
    medians = {key: statistics.median(opening[key] for opening in openings) for key in ("start_page_s", "table_s")}
    return {**medians, "table_rows": openings[0]["table_rows"]}


def report_figures(side: str, snakefile: Path, workdir: Path, report: str, args, env: dict | None = None) -> dict:
    """The real run over the fleet (summarize, plots), the report, its size and its opening."""
    figures = {"plots_run_s": snakemake(snakefile, workdir, "--cores", str(args.cores), env=env)}
    figures["report_s"] = snakemake(snakefile, workdir, "--report", report, env=env)
    path = workdir / report
    figures["report_mb"] = path.stat().st_size / 1e6
    if path.suffix == ".zip":
        started = time.perf_counter()
        with zipfile.ZipFile(path) as archive:
            archive.extractall(workdir / "unpacked")
            figures["files_in_zip"] = len(archive.namelist())
        figures["unzip_s"] = time.perf_counter() - started
        page = workdir / "unpacked" / path.stem / "report.html"
    else:
        page = path
    figures["start_page_html_mb"] = page.stat().st_size / 1e6
    figures.update(browser_figures(args.browser, page.as_uri(), args.reps, workdir))
    print(
        f"  {side:6s} {report:12s} {figures['report_mb']:8.1f} MB  report written in {figures['report_s']:6.1f} s  "
        f"start page {figures['start_page_s']:6.2f} s  table {figures['table_s']:6.2f} s",
        flush=True,
    )
    return figures


def fleet_figures(datasets: int, args) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"rnnfleet-report-{datasets}-") as folder:
        folder = Path(folder)
        started = time.perf_counter()
        build_fleet(folder / "fleet", datasets, args.trained, args.rows, args.cores)
        record = {"datasets": datasets, "trained": min(args.trained, datasets)}
        record["fleet_built_s"] = time.perf_counter() - started
        print(f"{datasets} datasets ({record['trained']} trained, the others copies):", flush=True)
        if datasets <= args.today_up_to:
            (folder / "baseline").mkdir()
            baseline = checkout(args.baseline, folder / "baseline")
            copy_fleet(folder / "fleet", folder / "today")
            # the baseline's own package first (the editable install points at this checkout)
            env = {"PYTHONPATH": str(baseline.parent / "scripts")}
            record["today"] = report_figures("today", baseline, folder / "today", "report.html", args, env)
        record["new"] = report_figures("new", REPO / "Snakefile", folder / "fleet", "report.zip", args)
        if "today" not in record:
            print(f"  today  not written (above --today-up-to {args.today_up_to})", flush=True)
            return record
        today, new = record["today"], record["new"]
        record["ratios_new_today"] = {
            key: new[key] / today[key] for key in ("report_mb", "report_s", "start_page_s", "table_s")
        }
        ratios = record["ratios_new_today"]
        print(
            f"  new / today: size {ratios['report_mb']:.3f}, start page {ratios['start_page_s']:.2f}, "
            f"table {ratios['table_s']:.2f}, writing the report {ratios['report_s']:.2f}",
            flush=True,
        )
    return record


def main():
    args = parse_args()
    if args.open:
        with tempfile.TemporaryDirectory(prefix="rnnfleet-report-open-") as scratch:
            print(
                json.dumps(browser_figures(args.browser, Path(args.open).resolve().as_uri(), args.reps, Path(scratch)))
            )
        return
    machine = f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"bench_report on {machine}; baseline {args.baseline}; load average {os.getloadavg()[0]:.1f}", flush=True)
    record = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine, "baseline": args.baseline}
    record["fleets"] = [fleet_figures(datasets, args) for datasets in args.sizes]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "report.jsonl", "a") as handle:
        handle.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
