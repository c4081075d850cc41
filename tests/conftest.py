"""Shared helpers: generated datasets in temporary folders and real `snakemake` runs on them.

The tests come in two tiers: tests/unit/ (the code in this process: no `snakemake`, no other
program started) and tests/workflow/ (real snakemake runs and other processes), every test of
which is marked `workflow` here. `slow` marks a unit test that takes seconds of its own.
The fast loop is `make test-fast` (pytest -m "not workflow and not slow"); `make test` runs all.
Programs the tests run (a Snakefile, a listener, a probe) are files in tests/programs/.
Test modules import shared helpers from here (`from conftest import ...`), never from each other.
"""

from __future__ import annotations

import base64
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

if TYPE_CHECKING:
    import pwd  # Unix only: imported where an account is made

    import psutil

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
PROGRAMS = TESTS / "programs"
WORKFLOW_TIER = TESTS / "workflow"
sys.path.insert(0, str(REPO / "scripts"))

from rnnfleet.faults import PAUSE_AT, PAUSE_FILE, RESUME  # noqa: E402
from rnnfleet.synthetic import write_bars_of_returns, write_synthetic_csv  # noqa: E402, F401

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def is_svg(data: bytes) -> bool:
    """An SVG document (the loss curves, rnnfleet.report.svg_chart)."""
    return data.startswith(b"<?xml") and b"<svg " in data[:1000]


SVG_NAMESPACE = "{http://www.w3.org/2000/svg}"


def svg_texts(path: Path) -> list[str]:
    """The text elements of an SVG file, parsed as XML (the file is one well-formed document)."""
    from xml.etree import ElementTree

    return [element.text for element in ElementTree.parse(path).iter(f"{SVG_NAMESPACE}text")]


# Why no Chromium is on this machine, written by tests/browser/install_chromium.sh (make test).
CHROMIUM_MISSING = REPO / ".venv" / "chromium-missing"


def chromium_or_skip() -> str:
    """The Chromium the browser checks open pages in. Without one they skip, quoting why
    `make test` could not install it; under CI=true they fail, so that CI never passes them
    unopened."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser:
        return browser
    why = CHROMIUM_MISSING.read_text().strip() if CHROMIUM_MISSING.exists() else "make test did not look for one"
    message = f"no Chromium on this machine ({why}): the page was not opened in a browser"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


# Modules that test what only some platforms have (docs/platforms.md): not collected elsewhere.
# By file name, in whichever tier the module sits.
POSIX_ONLY = [
    "test_warm.py",
    "test_gpu_slots.py",
    "test_interruptions.py",
    "test_previous_models.py",
]  # fork, signals, process groups
# local accounts, SO_PEERCRED, SLURM from Debian packages
LINUX_ONLY = ["test_security.py", "test_bad_entries.py", "test_slurm.py", "test_slurm_daemons.py"]
NOT_ON_THIS_PLATFORM = set(
    (LINUX_ONLY if not sys.platform.startswith("linux") else []) + (POSIX_ONLY if os.name != "posix" else [])
)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    return True if collection_path.name in NOT_ON_THIS_PLATFORM else None  # None: pytest decides


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(WORKFLOW_TIER):
            item.add_marker(pytest.mark.workflow)
    # The files marked long first: make test's workers take a file at a time in this order,
    # and a long file started last would leave the other worker idle at the end.
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


# Each test file's time (setup, call and teardown of its tests): the suite's time watched
# like a benchmark (docs/development.md, the budget of `make test`).
FILE_SECONDS: Counter = Counter()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    FILE_SECONDS[report.nodeid.split("::", 1)[0]] += report.duration


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    if not FILE_SECONDS:
        return
    terminalreporter.section("seconds per test file, slowest first")
    for path, seconds in FILE_SECONDS.most_common():
        terminalreporter.write_line(f"{seconds:8.1f}  {path}")
    terminalreporter.write_line(f"{sum(FILE_SECONDS.values()):8.1f}  in all")


# Small enough that a training job takes about a second on one CPU thread.
TINY_CONFIG = {
    "model": {"cell": "lstm", "hidden_size": 8, "num_layers": 1, "dropout": 0.0},
    "train": {"seq_len": 16, "batch_size": 64, "epochs": 2, "patience": 2, "threads": 1, "gpu_mem": 2},
}
TINY_ROWS = 400


def schema_defaults(section: str) -> dict:
    """The config schema's defaults of one section (what a validated config holds)."""
    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    return {key: spec.get("default") for key, spec in schema["properties"][section]["properties"].items()}


def schema_keys(properties: dict, prefix: str = "") -> dict[str, object]:
    """{dotted key: its default, or None} for every key a user sets, as docs/configuration.md
    lists them: an object whose own keys have defaults is listed key by key; an object whose
    keys have none (format.positions) is one key."""
    keys: dict[str, object] = {}
    for name, schema in properties.items():
        children = dict(schema.get("properties", {}))
        for child, child_schema in schema.get("then", {}).get("properties", {}).items():
            children[child] = {**child_schema, **children.get(child, {})}  # model: the rnn keys
        if children and any("default" in child or "properties" in child for child in children.values()):
            keys.update(schema_keys(children, f"{prefix}{name}."))
        else:
            keys[f"{prefix}{name}"] = schema.get("default")
    return keys


def write_config(workdir: Path, **overrides) -> Path:
    """config.yaml in workdir: the repo's, with TINY_CONFIG and overrides merged in."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    for layer in (TINY_CONFIG, overrides):
        for section, values in layer.items():
            if isinstance(values, dict):
                config[section] = {**config.get(section, {}), **values}
            else:
                config[section] = values
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def returns_with_planted_signal(rows: int, rng, planted_from: int | None = None):
    """Log returns with no structure (scale 1e-3) up to row planted_from; from there on each
    return is 0.9 times the one before (plus noise of scale 2e-4): a signal that a model whose
    training reads those bars learns, and one that never reads them cannot know
    (tests of the fleet pretraining's cutoff)."""
    returns = rng.normal(0, 1e-3, rows)
    for row in range(planted_from if planted_from is not None else rows, rows):
        returns[row] = 0.9 * returns[row - 1] + rng.normal(0, 2e-4)
    return returns


def add_datasets(workdir: Path, names: list[str], rows: int = TINY_ROWS, seed: int = 0) -> None:
    for offset, name in enumerate(names):
        write_synthetic_csv(workdir / "data" / f"{name}.csv", rows, seed + offset + zlib.crc32(name.encode()) % 1000)


def snakemake_command(workdir: Path, *args: str) -> list[str]:
    """The real snakemake on the repo's Snakefile in workdir (default profile applies)."""
    command = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir)]
    return command + (["--cores", "2", *args] if "--cores" not in args else list(args))


def snakemake(workdir: Path, *args: str, check: bool = True, timeout: float = 600, env=None):
    """Run snakemake_command to the end; raise with its stderr if it fails and check is set."""
    result = subprocess.run(
        snakemake_command(workdir, *args),
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({result.returncode}):\n{result.stderr[-6000:]}")
    return result


@dataclass
class PlannedJob:
    """One job of a `snakemake -n` listing: its rule and the text of its reason and wildcards lines."""

    rule: str
    reason: str | None = None
    wildcards: str | None = None


def planned_jobs(dry_run_output: str) -> list[PlannedJob]:
    """Every job that snakemake -n lists, in its order (the one parser of that listing)."""
    jobs: list[PlannedJob] = []
    for line in dry_run_output.splitlines():
        stripped = line.strip()
        if stripped.startswith(("rule ", "localrule ")):
            jobs.append(PlannedJob(rule=stripped.split()[1].rstrip(":")))
        elif jobs and stripped.startswith("reason:"):
            jobs[-1].reason = stripped.removeprefix("reason:").strip()
        elif jobs and stripped.startswith("wildcards:"):
            jobs[-1].wildcards = stripped.removeprefix("wildcards:").strip()
    return jobs


def pending_jobs(dry_run_output: str, rule: str) -> dict[str, str]:
    """{dataset: reason} for every `rule` job in snakemake -n output."""
    return {
        job.wildcards.split("dataset=")[1].split(",")[0]: job.reason or ""
        for job in planned_jobs(dry_run_output)
        if job.rule == rule and job.wildcards is not None
    }


def planned_rules(dry_run_output: str) -> dict[str, int]:
    """{rule: number of jobs} that snakemake -n lists."""
    return dict(Counter(job.rule for job in planned_jobs(dry_run_output)))


def planned_reasons(dry_run_output: str, rules: tuple[str, ...]) -> list[str]:
    """The `reason:` line of each listed job of `rules`."""
    reasons = [job.reason for job in planned_jobs(dry_run_output) if job.rule in rules and job.reason is not None]
    assert len(reasons) == len(rules), dry_run_output
    return reasons


def copy_of_run(folder: Path, tmp_path: Path) -> Path:
    """A copy of a finished run's folder (links copied as links), for a test that changes it."""
    copy = tmp_path / "run"
    shutil.copytree(folder, copy, symlinks=True)
    return copy


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most of the (start, end) intervals that overlap at one time."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    return peak


def summary_by_dataset(workdir: Path) -> dict[str, dict]:
    """results/metrics.csv of a run as {dataset: its row}."""
    with open(workdir / "results" / "metrics.csv", encoding="utf-8") as table:
        return {row["dataset"]: row for row in csv.DictReader(table)}


def report_results(report_html: str) -> dict:
    """The report's index of results ({path: entry}), as its page script holds it."""
    match = re.search(r"^\s*var results = (\{.*\});\s*$", report_html, re.MULTILINE)
    assert match, "no results index in the report"
    return json.loads(match.group(1))


def decoded(entry: dict) -> bytes:
    return base64.b64decode(entry["data_uri"].split("base64,", 1)[1])


def process_alive(process: int | psutil.Process) -> bool:
    """True while the process runs (a zombie, finished but not yet reaped, counts as gone).
    Given as a psutil.Process, a later process that took its number does not count."""
    import psutil  # a dependency of Snakemake

    try:
        if isinstance(process, int):
            process = psutil.Process(process)
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until_gone(process: int | psutil.Process, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while process_alive(process):
        assert time.monotonic() < deadline, f"process {getattr(process, 'pid', process)} is still running"
        time.sleep(0.05)


def kill_hard(run: subprocess.Popen, job_pid: int) -> None:
    """SIGKILL to snakemake's process group and to the paused job (a warm worker runs
    outside that group): nobody gets to clean up."""
    os.killpg(run.pid, signal.SIGKILL)
    try:
        os.kill(job_pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    run.wait(timeout=30)
    wait_until_gone(job_pid)


def default_stop_signals() -> None:
    """In the child before it runs: the stop signals at their defaults, as a run started at a
    terminal has them. A suite started as a background job of a shell without job control
    (`make test &` in a script) ignores SIGINT and SIGQUIT, the run would inherit that, and
    rnnfleet keeps a signal ignored at the start ignored (as under `nohup`)."""
    for number in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)


def start_paused_run(workdir: Path, point: str, *args: str, env: dict | None = None) -> tuple[subprocess.Popen, int]:
    """Start snakemake (with args, and env added to its environment) in its own session (like a
    shell job) with the first job that reaches `point` paused there; return the run and the
    paused job's pid."""
    marker = workdir.parent / f"paused-at-{point}"
    output = open(workdir.parent / "snakemake-output.txt", "w")
    run = subprocess.Popen(
        snakemake_command(workdir, *args),
        cwd=workdir,
        stdout=output,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, **(env or {}), PAUSE_AT: point, PAUSE_FILE: str(marker)},
        preexec_fn=default_stop_signals,
    )
    deadline = time.monotonic() + 180
    while not (marker.exists() and marker.read_text().isdigit()):
        assert run.poll() is None, (workdir.parent / "snakemake-output.txt").read_text()
        assert time.monotonic() < deadline, f"no job reached {point}"
        time.sleep(0.05)
    return run, int(marker.read_text())


def resume(workdir: Path, point: str) -> None:
    (workdir.parent / f"paused-at-{point}").write_text(RESUME)


def trained_folder(workdir: Path, datasets: list[str]) -> Path:
    """workdir after one real run over `datasets` (for module-scoped fixtures that tests copy)."""
    add_datasets(workdir, sorted(datasets))
    write_config(workdir, data_dir="data")
    snakemake(workdir)
    return workdir


# How a run's jobs run, by name: warm workers forked by a server (fork), warm workers of the
# spawn path (spawn: no fork or descriptor passing, as on Windows, tests/without_unix_facilities),
# or each in its own process (cold): (train.warm_workers, the run's added environment, the
# worker its metrics record).
WITHOUT_UNIX = REPO / "tests" / "without_unix_facilities"
JOB_PATHS = {
    "fork": (True, {}, "warm"),
    "spawn": (True, {"PYTHONPATH": str(WITHOUT_UNIX)}, "spawned"),
    "cold": (False, {}, "cold"),
}


def job_path_of(job_pid: int) -> str:
    """Which of JOB_PATHS the running job process `job_pid` took, from its and its parent's
    command lines: a child of the fork path's server, a worker of the spawn path's, or its own."""
    import psutil

    job = psutil.Process(job_pid)
    if "scripts/job.py" in " ".join(job.cmdline()):
        return "cold"
    server = " ".join(job.parent().cmdline())
    return "fork" if "rnnfleet.runner.warm" in server else "spawn" if "rnnfleet.runner.spawned" in server else server


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A folder with three tiny 1m datasets, two decoys and a tiny-model config.yaml."""
    add_datasets(tmp_path, ["EURUSD_1m", "BTCUSDT_1m", "SPY_1m"])
    write_synthetic_csv(tmp_path / "data" / "EURUSD_5m.csv", 100, 5)
    (tmp_path / "data" / "README.txt").write_text("not a dataset\n")
    write_config(tmp_path, data_dir="data")
    return tmp_path


# A second local account, for what only shows when the files' owner is not the one who runs
# (root ignores file modes): tests/workflow/test_security.py, tests/workflow/test_bad_entries.py.
INTRUDER = "rnnfleet-intruder"
USERADD_EXISTS = 9  # useradd(8): the account already exists


@pytest.fixture(scope="module")
def intruder() -> pwd.struct_passwd:
    """A second local account (created once)."""
    import pwd

    missing = [
        why
        for why, lacking in (
            ("Linux", not sys.platform.startswith("linux")),
            ("root", os.name != "posix" or os.geteuid() != 0),
            ("useradd", shutil.which("useradd") is None),
        )
        if lacking
    ]
    if missing:
        message = f"creating a second local account needs {', '.join(missing)}"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI must run this test)")
        pytest.skip(message)
    try:
        return pwd.getpwnam(INTRUDER)
    except KeyError:
        # Test files run side by side (make test's workers): another may create it meanwhile.
        created = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", INTRUDER])
        if created.returncode not in (0, USERADD_EXISTS):
            pytest.fail(f"useradd {INTRUDER} failed with exit status {created.returncode}")
        return pwd.getpwnam(INTRUDER)


def python_for(account: pwd.struct_passwd) -> str:
    """A Python interpreter the other account may run (the tests' own may sit in root's home)."""
    for candidate in (os.path.realpath(sys.executable), "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            subprocess.run(
                [candidate, "-I", "-c", "pass"], user=account.pw_uid, group=account.pw_gid, cwd="/", check=True
            )
            return candidate
        except (OSError, subprocess.CalledProcessError):
            continue
    pytest.fail(f"no Python interpreter that {account.pw_name} may run")


def as_intruder(account: pwd.struct_passwd, code: str, *args: str, **popen_kwargs) -> subprocess.Popen:
    """A Python (isolated mode: stdlib only) running `code` as the other account."""
    return subprocess.Popen(
        [python_for(account), "-I", "-c", code, *args],
        user=account.pw_uid,
        group=account.pw_gid,
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        **popen_kwargs,
    )


@pytest.fixture
def shared_tmp() -> Path:
    """A folder like /tmp (world-writable, sticky) that the other account can reach."""
    folder = Path(tempfile.mkdtemp(prefix="rnnfleet-shared-tmp-", dir="/tmp"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def snakemake_as(account: pwd.struct_passwd, workdir: Path, *args: str, timeout: float = 600):
    """The real snakemake (snakemake_command) run as `account` in `workdir`, which that
    account must own. Its interpreter: this one if the account may run it, else a system
    Python of the same version with this environment's packages on its path."""
    python = python_for(account)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(workdir / ".home")}
    if python != os.path.realpath(sys.executable):
        version = subprocess.run(
            [python, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
        )
        if version.stdout.strip() != str(sys.version_info[:2]):
            pytest.fail(f"{account.pw_name} may run {python} only, not Python {sys.version_info[:2]} with Snakemake")
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib")))
    return subprocess.run(
        [python, *snakemake_command(workdir, *args)[1:]],
        cwd=workdir,
        user=account.pw_uid,
        group=account.pw_gid,
        extra_groups=[],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# The same bars in every layout, and one real run over them (tests/layouts.py).
from layouts import every_layout, layouts_run  # noqa: E402, F401
