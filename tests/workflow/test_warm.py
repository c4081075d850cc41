"""Warm workers: jobs run by a server that imported torch once behave like their own process, on
both paths: forked children (fork) and spawned workers (spawn: no fork or descriptor passing, as
on Windows, imitated by tests/without_unix_facilities)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import PROGRAMS, REPO, wait_until_gone

from rnnfleet.runner.file_locks import try_lock
from rnnfleet.runner.warm_client import WarmUnavailable, check_private_folder, private_folder

WITHOUT_UNIX = REPO / "tests" / "without_unix_facilities"
PATHS = {"fork": ("warm", {}), "spawn": ("spawned", {"PYTHONPATH": str(WITHOUT_UNIX)})}


@pytest.fixture(params=list(PATHS))
def path(request) -> str:
    """Which path of warm workers the clients take."""
    return request.param


def worker_of(facts: dict, path: str) -> bool:
    """Whether a job ran on `path`: in a worker whose parent is the server it names."""
    return facts["worker"] == f"{PATHS[path][0]} {facts['parent']}"


def start_client(
    workdir: Path, target: str, kwargs: dict, env: dict | None = None, path: str = "fork"
) -> subprocess.Popen:
    """A process that does what scripts/job.py does: log to a file, then run_job(..., warm=True)."""
    return subprocess.Popen(
        [sys.executable, str(PROGRAMS / "warm_job.py"), target, json.dumps(kwargs)],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **PATHS[path][1], **(env or {})},
    )


def test_job_runs_in_a_warm_child_with_the_clients_environment_and_exit_status(tmp_path, path):
    report = tmp_path / "report.json"
    client = start_client(
        tmp_path, "warm_targets:report_and_exit", {"report_path": str(report), "exit_status": 3}, {"MARKER": "m1"}, path
    )
    job_stdout, job_stderr = client.communicate(timeout=120)
    assert client.returncode == 3
    facts = json.loads(report.read_text())
    assert facts["marker"] == "m1" and facts["cwd"] == str(tmp_path)
    assert facts["pid"] != client.pid and facts["parent"] != client.pid  # run by the server's worker
    assert worker_of(facts, path)
    assert "to the log" in (tmp_path / "job.log").read_text()
    assert "to the job's stderr" in job_stderr and "to the job's stdout" in job_stdout


def test_concurrent_jobs_share_one_server(tmp_path, path):
    reports = [tmp_path / f"r{i}.json" for i in range(4)]
    clients = [
        start_client(tmp_path, "warm_targets:report_and_exit", {"report_path": str(r), "exit_status": 0}, path=path)
        for r in reports
    ]
    assert [client.wait(timeout=120) for client in clients] == [0, 0, 0, 0]
    facts = [json.loads(r.read_text()) for r in reports]
    assert len({fact["parent"] for fact in facts}) == 1
    assert all(worker_of(fact, path) for fact in facts)  # not four cold runs


def test_jobs_of_two_project_folders_share_one_server_and_each_child_runs_in_its_jobs_folder(tmp_path, path):
    """One server per user (and Python and code version), not per folder: the next project's
    run finds torch imported."""
    folders = [tmp_path / "project-a", tmp_path / "project-b"]
    facts = []
    for folder in folders:
        folder.mkdir()
        client = start_client(
            folder, "warm_targets:report_and_exit", {"report_path": str(folder / "r.json"), "exit_status": 0}, path=path
        )
        assert client.wait(timeout=120) == 0
        facts.append(json.loads((folder / "r.json").read_text()))
    assert [fact["cwd"] for fact in facts] == [str(folder) for folder in folders]
    assert facts[0]["parent"] == facts[1]["parent"] and facts[0]["pid"] != facts[1]["pid"]
    assert all(worker_of(fact, path) for fact in facts)


def run_client(
    workdir: Path, exit_status: int, path: str, marker: str = "m"
) -> tuple[dict, subprocess.CompletedProcess]:
    """One job of warm_targets:report_and_exit, run to its end with its stdout and stderr read
    to end of file (so a child that kept them open after the job would hang it)."""
    report = workdir / "report.json"
    client = start_client(
        workdir,
        "warm_targets:report_and_exit",
        {"report_path": str(report), "exit_status": exit_status},
        {"MARKER": marker},
        path,
    )
    _, job_stderr = client.communicate(timeout=60)
    assert client.returncode == exit_status
    assert "to the job's stderr" in job_stderr and "to the log" in (workdir / "job.log").read_text()
    return json.loads(report.read_text()), job_stderr


def test_a_child_whose_job_succeeded_takes_the_next_one(tmp_path, path):
    first, _ = run_client(tmp_path, 0, path)
    second, _ = run_client(tmp_path, 0, path)
    assert second["pid"] == first["pid"] and second["worker"] == first["worker"] and worker_of(first, path)


def test_a_child_whose_job_failed_is_not_reused(tmp_path, path):
    failed, _ = run_client(tmp_path, 3, path)
    after, _ = run_client(tmp_path, 0, path)
    assert after["pid"] != failed["pid"] and after["parent"] == failed["parent"]  # a new child of the same server
    assert worker_of(after, path)


def test_a_job_with_another_environment_gets_a_child_of_its_own(tmp_path, path):
    first, _ = run_client(tmp_path, 0, path, marker="m1")
    other, _ = run_client(tmp_path, 0, path, marker="m2")
    assert (first["marker"], other["marker"]) == ("m1", "m2") and other["pid"] != first["pid"]
    again, _ = run_client(tmp_path, 0, path, marker="m1")
    assert again["pid"] == first["pid"]


def test_killing_the_job_terminates_its_warm_child(tmp_path, path):
    report = tmp_path / "pid"
    client = start_client(tmp_path, "warm_targets:write_pid_and_sleep", {"report_path": str(report)}, path=path)
    deadline = time.monotonic() + 120
    while not report.exists() or not report.read_text():
        assert time.monotonic() < deadline and client.poll() is None
        time.sleep(0.05)
    child_pid = int(report.read_text())
    client.send_signal(signal.SIGKILL)
    client.wait()
    wait_until_gone(child_pid, seconds=10)  # the warm child does not outlive its killed job


def test_prestarted_server_is_the_one_jobs_use(tmp_path, path):
    command = f"import sys; sys.path.insert(0, {str(REPO / 'scripts')!r}); from rnnfleet.runner.job_client import prestart; prestart()"
    subprocess.run([sys.executable, "-c", command], cwd=tmp_path, check=True, env={**os.environ, **PATHS[path][1]})
    time.sleep(1)  # the server started by prestart listens, so the clients find it rather than start one
    reports = [tmp_path / f"r{i}.json" for i in range(2)]
    clients = [
        start_client(tmp_path, "warm_targets:report_and_exit", {"report_path": str(r), "exit_status": 0}, path=path)
        for r in reports
    ]
    assert [client.wait(timeout=120) for client in clients] == [0, 0]
    facts = [json.loads(r.read_text()) for r in reports]
    assert len({fact["parent"] for fact in facts}) == 1
    assert all(worker_of(fact, path) for fact in facts)
    assert list(Path(private_folder()).glob("*.log"))  # where a server would explain a failed start


def test_the_socket_folder_is_the_users_runtime_dir_when_it_is_private(tmp_path, monkeypatch):
    runtime_dir = tmp_path / "run-user"
    runtime_dir.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime_dir))
    folder = Path(private_folder())
    assert folder == runtime_dir / "rnnfleet-warm" and folder.stat().st_mode & 0o777 == 0o700
    runtime_dir.chmod(0o777)  # not a proper runtime dir: the per-user temporary folder instead
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    tempfile.tempdir = None  # gettempdir() caches; let it read TMPDIR again
    try:
        assert Path(private_folder()) == tmp_path / f"rnnfleet-warm-{os.getuid()}"
    finally:
        tempfile.tempdir = None


def test_a_link_or_an_open_folder_is_not_taken_for_the_private_one(tmp_path):
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o777)
    with pytest.raises(WarmUnavailable, match="mode 0777, not a private folder"):
        check_private_folder(open_folder)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    check_private_folder(private)
    link = tmp_path / "link"
    link.symlink_to(private)
    with pytest.raises(WarmUnavailable, match="is a link"):
        check_private_folder(link)


def test_a_starting_server_removes_the_files_of_servers_long_gone_and_no_live_ones(tmp_path):
    temporary = Path(tempfile.mkdtemp(prefix="rw-", dir="/tmp"))  # short: a socket's path is ~100 bytes at most
    folder = temporary / f"rnnfleet-warm-{os.getuid()}"
    folder.mkdir(mode=0o700)
    two_days_ago = time.time() - 2 * 24 * 3600
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    starting = None
    try:
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        dead.bind(str(folder / "dead.sock"))  # a socket file whose server was killed: no one listens
        dead.close()
        live.bind(str(folder / "live.sock"))  # a live server (here: one that answers)
        live.listen(1)
        names = {
            "dead": ["dead.sock", "dead.sock.lock", "dead.sock.log"],
            "exited": ["exited.sock.lock", "exited.sock.log"],
        }
        names |= {"live": ["live.sock", "live.sock.lock", "live.sock.log"], "starting": ["starting.sock.lock"]}
        names |= {"recent": ["recent.sock.lock", "recent.sock.log"], "other": ["notes.txt"]}
        for name in [name for group in names.values() for name in group]:
            (folder / name).touch()
            if not name.startswith("recent"):
                os.utime(folder / name, (two_days_ago, two_days_ago), follow_symlinks=False)
        starting = try_lock(folder / "starting.sock.lock")  # a server starting: it holds its start lock

        command = (
            f"import sys; sys.path.insert(0, {str(REPO / 'scripts')!r}); "
            "from rnnfleet.runner.warm_client import prestart; prestart()"
        )
        env = {**os.environ, "TMPDIR": str(temporary)}
        env.pop("XDG_RUNTIME_DIR", None)
        subprocess.run([sys.executable, "-c", command], cwd=tmp_path, env=env, check=True)
        gone = set(names["dead"] + names["exited"])
        deadline = time.monotonic() + 120
        while gone & {path.name for path in folder.iterdir()}:
            assert time.monotonic() < deadline, sorted(path.name for path in folder.iterdir())
            time.sleep(0.1)
        left = {path.name for path in folder.iterdir()}
        kept = {name for group in ("live", "starting", "recent", "other") for name in names[group]}
        assert kept <= left
        own = left - kept  # the new server's socket, lock and log
        assert len(own) == 3 and {name.split(".", 1)[1] for name in own} == {"sock", "sock.lock", "sock.log"}, own
    finally:
        live.close()
        if starting is not None:
            starting.close()
        shutil.rmtree(temporary, ignore_errors=True)


def test_a_plugin_file_changed_between_two_jobs_of_one_worker_is_imported_again(tmp_path, path):
    plugin = tmp_path / "mine.py"
    report = tmp_path / "report.json"
    values = []
    for version in ("first", "second"):
        plugin.write_text(f"def build():\n    return {version!r}\n")
        kwargs = {"report_path": str(report), "reference": "mine.py:build"}
        client = start_client(tmp_path, "warm_targets:report_plugin_value", kwargs, path=path)
        assert client.wait(timeout=120) == 0
        values.append(json.loads(report.read_text()))
    assert [value["value"] for value in values] == ["first", "second"]
    assert values[0]["pid"] == values[1]["pid"]  # the same worker ran both jobs


def test_a_code_change_in_any_part_of_the_package_gives_another_server(tmp_path):
    """A server never runs code older than the files on disk: its key covers every module of
    the package, sub-packages too (the train path's among them)."""
    import rnnfleet
    from rnnfleet.runner import warm_client

    package = Path(rnnfleet.__file__).parent
    modules = [
        package / "prep" / "prepare.py",
        *(
            package / part / "__init__.py"
            for part in ("bars", "prep", "train", "scores", "forecast", "report", "runner", "hooks", "workflow")
        ),
    ]
    for module in modules:
        before = warm_client.server_key()
        stamp = module.stat()
        os.utime(module, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 1_000_000))
        try:
            assert warm_client.server_key() != before, module
        finally:
            os.utime(module, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
        assert warm_client.server_key() == before
