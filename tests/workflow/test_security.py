"""Shared machines: another local account gets nothing from a run, and model files that hold
code are refused without running it.

The account tests create a second local account (rnnfleet-intruder) and run its processes
as that user, so they need root and Linux; CI runs as root, where they must not skip.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import PROGRAMS, REPO, add_datasets, as_intruder, snakemake, summary_by_dataset, write_config

from rnnfleet.runner.warm_client import WarmUnavailable, connect, socket_name
from rnnfleet.train.modelfile import ModelFileError, load_checkpoint

SECRET = "MY_SECRET_TOKEN"

# Run as the intruder: hold a listener at every *.sock path in `folder` that is not its own
# (replacing any socket another user puts there, as in a real attack), plus one at
# `expected_name`; record every connection and every byte received, and the passed fds.
HIJACKER = (PROGRAMS / "hijacker.py").read_text()

# Send the warm server a job request with three descriptors, as a client would; print the reply.
REQUESTER = (PROGRAMS / "requester.py").read_text()


def wait_for(condition, seconds: float = 30, what: str = "condition"):
    deadline = time.monotonic() + seconds
    while not (result := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return result


def read_record(path: Path) -> dict:
    return json.loads(path.read_text())


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(30)


def test_a_socket_folder_another_account_prepared_gets_nothing_from_a_run(tmp_path, intruder, shared_tmp):
    # The attack: before root's run, the other account creates the per-user folder where the
    # warm server's socket would live, open to all, and hijacks every socket put there.
    # Two datasets: the first job and a later one (each job runs in its own process, seconds).
    add_datasets(tmp_path, ["A_1m", "B_1m"])
    write_config(tmp_path, data_dir="data")
    record_path = shared_tmp / "intruder.json"
    hijack_folder = shared_tmp / f"rnnfleet-warm-{os.getuid()}"
    hijacker = as_intruder(intruder, HIJACKER, str(hijack_folder), socket_name(), str(record_path))
    try:
        wait_for(record_path.exists, what="the other account's listener")
        run = snakemake(
            tmp_path,
            "--cores",
            "1",
            env={"TMPDIR": str(shared_tmp), "XDG_RUNTIME_DIR": "", SECRET: "s3cr3t-value-7f1c"},
            timeout=300,  # a job that trusted the hijacked socket would wait for its reply for ever
        )
        assert read_record(record_path) == {"connections": 0, "bytes": 0, "fds": 0, "data": ""}
        assert "s3cr3t-value-7f1c" not in run.stderr
        for dataset in ("A_1m", "B_1m"):
            log = (tmp_path / "logs" / "train" / f"{dataset}.log").read_text()
            warnings = [line for line in log.splitlines() if line.startswith("warm worker unavailable")]
            assert len(warnings) == 1 and "not a private folder" in warnings[0] and str(hijack_folder) in warnings[0]
            metrics = json.loads((tmp_path / "metrics" / f"{dataset}.json").read_text())
            assert metrics["worker"] == "cold"  # ran in its own process instead
            assert (tmp_path / "models" / f"{dataset}.pt").stat().st_size > 0

        # Control: the listener does catch a client that trusts the folder (so 0 above means something).
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as trusting_client:
            trusting_client.connect(str(hijack_folder / socket_name()))
            trusting_client.sendall(f'{{"env": {{"{SECRET}": "leaked"}}}}'.encode())
            wait_for(lambda: "leaked" in read_record(record_path)["data"], what="the control's bytes")
    finally:
        stop(hijacker)


def test_a_job_sends_nothing_to_a_server_run_by_another_account(intruder, shared_tmp):
    # The second wall, should the first fail: the client checks who is listening.
    record_path = shared_tmp / "intruder.json"
    folder = shared_tmp / "open-folder"
    hijacker = as_intruder(intruder, HIJACKER, str(folder), "server.sock", str(record_path))
    try:
        wait_for(record_path.exists, what="the other account's listener")
        with pytest.raises(WarmUnavailable, match=f"runs as user id {intruder.pw_uid}, not {os.getuid()}"):
            connect(folder / "server.sock")
        record = wait_for(lambda: (r := read_record(record_path))["connections"] == 1 and r, what="the connection")
        time.sleep(0.3)
        assert read_record(record_path) == {**record, "bytes": 0, "fds": 0, "data": ""}
    finally:
        stop(hijacker)


def test_the_warm_server_runs_nothing_for_another_account(tmp_path, intruder, shared_tmp):
    # The server's side of the second wall: its socket made reachable by mistake, a request
    # from another account is refused before anything runs; the same request from the
    # server's own user runs (so the refusal is the check, not a broken request).
    folder = shared_tmp / "server-folder"
    folder.mkdir(mode=0o755)
    address = folder / "server.sock"
    start_lock = open(folder / "start.lock", "w")  # noqa: SIM115 - handed to the server
    server_log = tmp_path / "server.log"
    with open(server_log, "w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "rnnfleet.runner.warm", str(address), str(start_lock.fileno())],
            cwd=REPO / "scripts",
            stdout=log,
            stderr=log,
            pass_fds=[start_lock.fileno()],
        )
    start_lock.close()
    try:
        wait_for(address.exists, seconds=120, what="the warm server's socket")
        assert address.stat().st_mode & 0o777 == 0o600  # the server's own first wall
        address.chmod(0o777)  # the mistake this test supposes
        markers = tmp_path / "markers"
        markers.mkdir()
        markers.chmod(0o733)  # the server (root) could write here; nobody can list it

        refused = as_intruder(
            intruder, REQUESTER, str(address), str(markers / "intruder"), stdout=subprocess.PIPE, text=True
        )
        assert refused.communicate(timeout=60)[0].strip() == "closed"
        own = subprocess.run(
            [sys.executable, "-I", "-c", REQUESTER, str(address), str(markers / "own")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert '"exit_status": 0' in own.stdout and (markers / "own").exists()
        assert not (markers / "intruder").exists()
        assert f"refused a connection from user id {intruder.pw_uid}" in server_log.read_text()
    finally:
        server.terminate()
        server.wait(30)


class CopiesAFile:
    """Pickles as a call of shutil.copyfile: unpickling it copies a file."""

    def __init__(self, source: Path, destination: Path):
        self.source, self.destination = str(source), str(destination)

    def __reduce__(self):
        return shutil.copyfile, (self.source, self.destination)


def crafted_model_file(folder: Path, marker: Path) -> Path:
    path = folder / "EVIL_1m.pt"
    torch.save({"format": "rnnfleet", "format_version": 1, "state_dict": CopiesAFile(path, marker)}, path)
    return path


def test_a_model_file_that_holds_code_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "code-ran"
    model_path = crafted_model_file(tmp_path, marker)

    with pytest.raises(ModelFileError) as refused:
        load_checkpoint(model_path)

    message = str(refused.value)
    assert "\n" not in message and str(model_path) in message
    assert "refused" in message and "could run code" in message and "shutil.copyfile" in message
    assert "weights_only" not in message  # torch's advice to load it unsafely is not passed on
    assert not marker.exists()
    # Control: what the refusal prevents.
    torch.load(model_path, weights_only=False)
    assert marker.exists()


def test_forecasting_with_a_model_file_that_holds_code_fails_with_one_line(tmp_path):
    marker = tmp_path / "code-ran"
    model_path = crafted_model_file(tmp_path, marker)
    add_datasets(tmp_path, ["A_1m"])
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rnnfleet.cli.predict",
            "--model",
            str(model_path),
            "--csv",
            str(tmp_path / "data" / "A_1m.csv"),
        ]
        + ["--out", str(tmp_path / "forecast.csv")],
        cwd=REPO / "scripts",
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0 and "could run code" in result.stderr
    assert not marker.exists() and not (tmp_path / "forecast.csv").exists()


# The other account's step of the confused-deputy attack: link a file only the run's user may
# read into the data folder it can write, to read it back from the run's outputs.
LINKER = "import os, sys; os.symlink(sys.argv[1], sys.argv[2])"


def test_a_file_another_account_links_into_a_shared_data_folder_reaches_no_output_it_can_read(
    tmp_path, intruder, shared_tmp
):
    secret_value = "API_KEY=hunter2-7f1c9e"
    secret = tmp_path / "secret.env"  # the run's user's alone
    secret.write_text(f"{secret_value}\nOTHER=0\n")
    secret.chmod(0o600)
    data = shared_tmp / "data"  # a team folder: its group (the other account's) may add files
    add_datasets(shared_tmp, ["A_1m"])
    os.chown(data, -1, intruder.pw_gid)
    data.chmod(0o2775)
    project = tmp_path / "project"
    project.mkdir()
    write_config(project, data_dir=str(data))
    linker = as_intruder(intruder, LINKER, str(secret), str(data / "LEAK_1m.csv"))
    assert linker.wait(30) == 0 and (data / "LEAK_1m.csv").is_symlink()

    run = snakemake(project, check=False)

    line = (
        f"{data}/LEAK_1m.csv: refused: group {intruder.pw_name} can write the folder {data} (mode 2775), but cannot "
        f"read the file (a link to {secret}); its content would reach outputs they can read"
    )
    assert run.returncode != 0 and line in run.stderr, run.stderr[-3000:]
    rows = summary_by_dataset(project)
    assert rows["A_1m"]["status"] == "ok" and rows["LEAK_1m"]["status"] == "data error"
    assert rows["LEAK_1m"]["error"].startswith(f"preprocess: {line}")
    readable_by_others = [path for path in project.rglob("*") if path.is_file() and path.stat().st_mode & stat.S_IROTH]
    assert project / "results" / "metrics.csv" in readable_by_others  # the outputs were there to leak into
    assert [path for path in readable_by_others if secret_value.encode() in path.read_bytes()] == []
    assert [path for path in readable_by_others if b"hunter2" in path.read_bytes()] == []


# As another account: read the spawn path's key, submit a job with a guessed one, read the
# environment of the server and its workers; prints what each attempt got.
SPAWN_INTRUDER = (PROGRAMS / "spawn_intruder.py").read_text()


def test_another_account_cannot_use_the_spawn_paths_server_nor_read_a_jobs_environment(tmp_path, intruder, shared_tmp):
    # A job on the spawn path (no fork or descriptor passing: tests/without_unix_facilities)
    # with a secret in its environment starts this user's server in a temporary folder the
    # other account can reach.
    environment = {
        **os.environ,
        "PYTHONPATH": str(REPO / "tests" / "without_unix_facilities"),
        "TMPDIR": str(shared_tmp),
        SECRET: "s3cr3t-value-7f1c",
    }
    environment.pop("XDG_RUNTIME_DIR", None)
    report = tmp_path / "report.json"
    job = subprocess.run(
        [
            sys.executable,
            str(PROGRAMS / "warm_job.py"),
            "warm_targets:report_and_exit",
            json.dumps({"report_path": str(report), "exit_status": 0}),
        ],
        cwd=tmp_path,
        env=environment,
        timeout=120,
    )
    assert job.returncode == 0
    facts = read_record(report)
    assert facts["worker"] == f"spawned {facts['parent']}"  # the spawn path ran, not a cold process
    folder = shared_tmp / f"rnnfleet-warm-{os.getuid()}"
    (address,) = folder.glob("*.sock")
    key_path = folder / "spawn.key"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(key_path.stat().st_mode) == 0o600
    markers = tmp_path / "markers"
    markers.mkdir()
    markers.chmod(0o733)  # the server (root) could write here; nobody can list it
    pids = [str(facts["parent"]), str(facts["pid"])]

    def attempt(marker: str) -> dict:
        process = as_intruder(
            intruder, SPAWN_INTRUDER, str(address), str(key_path), str(markers / marker), *pids, stdout=subprocess.PIPE
        )
        return json.loads(process.communicate(timeout=60)[0])

    # The first wall: the private folder. Nothing in it can be reached.
    walled = attempt("through-the-folder")
    assert walled["key"] == "PermissionError" and walled["connect"] == "PermissionError"
    # The second wall, the folder and socket opened by mistake: the key. The handshake fails.
    folder.chmod(0o711)
    address.chmod(0o777)
    keyless = attempt("through-the-socket")
    assert keyless["key"] == "PermissionError" and keyless["connect"] == "AuthenticationError", keyless
    for result in (walled, keyless):
        assert all(result[f"environ {pid}"] == "PermissionError" for pid in pids), result
        assert "s3cr3t-value-7f1c" not in json.dumps(result)
    assert list(markers.iterdir()) == []
    log = next(folder.glob("*.sock.log")).read_text()
    assert "refused a connection" in log
    # Control: the same request with the user's key runs (so the refusal is the key, not a broken request).
    from rnnfleet.runner.spawn_client import connect, decode, encode

    own_marker = markers / "own"
    with connect(str(address), key_path.read_bytes()) as connection:
        request = {"target": "shutil:copyfile", "kwargs": {"src": "/etc/passwd", "dst": str(own_marker)}, "cwd": "/"}
        connection.send_bytes(
            encode({**request, "env": {}, "sys_path": sys.path, "log_path": str(tmp_path / "own.log")})
        )
        assert decode(connection.recv_bytes())["exit_status"] == 0
    assert own_marker.exists()
