"""The job's side of the fork path of warm workers (rnnfleet.runner.warm): hand the job to this
user's server, starting one if none runs (also before a run: prestart).

What it promises:
- On the way to a running server, a job's process imports nothing heavier than os, sys,
  socket, struct, json, signal and hashlib (a test lists them): every job pays for what this
  process imports, and the server's module (subprocess, tempfile, file locks) would cost a
  sizeable part of a one-day dataset's training (bench/README.md). Starting a server, or
  running cold, imports what those need only then.
- The security checks are the server's: a socket in a folder of this user's alone (type,
  owner and mode checked before every use), and the server's user id checked
  (SO_PEERCRED / LOCAL_PEERCRED) before the job's environment and file descriptors are sent.
- Where the platform lacks a piece (fork, Unix sockets that pass descriptors, peer
  credentials), the spawn path runs the job instead (rnnfleet.runner.job_client.run_job).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import stat
import struct
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # rnnfleet/
# A server exits after this long without jobs: long enough that the next run (the `-n` then
# the run, a fixed config, the next project) finds torch imported; it never touches CUDA, so
# it holds host memory only. Its idle children, which may hold a CUDA context, go sooner.
SERVER_IDLE_SECONDS = 60.0
CHILD_IDLE_SECONDS = 10.0
CONNECT_TIMEOUT_SECONDS = 120.0
_HEADER = struct.Struct("!I")
_LINUX_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_MACOS_LOCAL_PEERCRED, _MACOS_XUCRED = 0x001, struct.Struct("IIh16I")  # struct xucred: version, uid, ...


class WarmUnavailable(OSError):
    """No warm worker for this job; the message says why in one line."""


def killed_message(kwargs: dict, signal_number: int) -> str:
    """The line for a job whose process was killed by signal_number."""
    try:
        name = signal.Signals(signal_number).name
    except ValueError:
        name = f"signal {signal_number}"
    what = "training" if "attempts" in kwargs else "job"
    subject = kwargs.get("dataset", "the job")
    # " process was killed by ": errors.KILLED_BY, which the retry policy reads (not imported: see the module doc)
    message = f"{subject}: its {what} process was killed by {name} (exit status {128 + signal_number})"
    if signal_number == getattr(signal, "SIGKILL", None):
        message += (
            ", probably by the kernel for lack of host memory (the OOM killer: `dmesg` says); not retried: run "
            "fewer jobs at once (--cores) or lower train.batch_size, or free memory, and run again"
        )
    return message


def connection_unsupported_reason() -> str | None:
    """Why this platform cannot hand a job to a server, or None if it can."""
    if not hasattr(os, "fork"):
        return "this platform has no fork()"
    if not hasattr(socket, "AF_UNIX") or not hasattr(socket, "send_fds"):
        return "this platform has no Unix sockets that pass file descriptors"
    if not hasattr(socket, "SO_PEERCRED") and sys.platform != "darwin":
        return "this platform cannot tell who is at the other end of a Unix socket"
    return None


def peer_uid(connection: socket.socket) -> int:
    """The user id of the process at the other end of a connected Unix socket."""
    if hasattr(socket, "SO_PEERCRED"):
        _, uid, _ = _LINUX_PEERCRED.unpack(
            connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _LINUX_PEERCRED.size)
        )
        return uid
    credentials = connection.getsockopt(0, _MACOS_LOCAL_PEERCRED, _MACOS_XUCRED.size)  # SOL_LOCAL = 0
    return _MACOS_XUCRED.unpack(credentials)[1]


def check_private_folder(folder: str | os.PathLike) -> None:
    """Raise WarmUnavailable unless `folder` is a real folder (not a link) that belongs to this
    user and that no one else may read, enter or write."""
    try:
        info = os.lstat(folder)
    except OSError as error:
        raise WarmUnavailable(f"cannot check {folder} ({error.strerror})") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        kind = "folder" if stat.S_ISDIR(info.st_mode) else "link" if stat.S_ISLNK(info.st_mode) else "file"
        raise WarmUnavailable(
            f"{folder} is a {kind} of user id {info.st_uid} with mode {stat.S_IMODE(info.st_mode):04o}, "
            f"not a private folder of user id {os.getuid()}: not used"
        )


def temporary_folder() -> str:
    """tempfile.gettempdir(), without importing tempfile where $TMPDIR names a folder, as it
    does in every job Snakemake runs (it sets $TMPDIR to its own temporary folder)."""
    named = os.environ.get("TMPDIR")
    if named and os.path.isabs(named) and os.path.isdir(named):
        return os.path.abspath(named)
    import tempfile

    return tempfile.gettempdir()


def private_folder() -> str:
    """This user's own folder for the server's socket, lock and log; checked on every call.
    On Windows, a folder in the user's profile (its access list admits the user, SYSTEM and
    administrators alone), where no user id or mode can be checked."""
    if not hasattr(os, "getuid"):
        folder = os.path.join(os.environ.get("LOCALAPPDATA") or temporary_folder(), "rnnfleet-warm")
        os.makedirs(folder, exist_ok=True)
        return folder
    folder = os.path.join(temporary_folder(), f"rnnfleet-warm-{os.getuid()}")
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir and os.path.isabs(runtime_dir):
        try:
            check_private_folder(runtime_dir)
            folder = os.path.join(runtime_dir, "rnnfleet-warm")
        except WarmUnavailable:
            pass  # a runtime dir that is not ours: the temporary folder
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    check_private_folder(folder)
    return folder


def user_id() -> int | str:
    """This account: its user id, or its name where the platform has no user ids (Windows)."""
    return os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "")


def sub_packages() -> list[str]:
    """The package's sub-packages (runner, hooks, train, workflow, ...): their code is the
    server's code as much as the top level's."""
    return [entry.name for entry in os.scandir(PACKAGE_DIR) if entry.is_dir() and not entry.name.startswith(("_", "."))]


def server_key(path: str = "fork") -> str:
    """One server per Python, code version, user, PYTHONPATH (what it ran at its start) and
    path (fork or spawn), whichever project folder its jobs run in (each job runs in its own
    folder). Short: AF_UNIX limits the path to ~100 bytes."""
    code_stamp = sorted(
        (os.path.join(folder, entry.name), entry.stat().st_mtime_ns)
        for folder in ("", *sub_packages())
        for entry in os.scandir(os.path.join(PACKAGE_DIR, folder))
        if entry.name.endswith(".py")
    )
    start = [os.environ.get("PYTHONPATH", ""), *([] if path == "fork" else [path])]
    key = json.dumps([sys.executable, code_stamp, user_id(), *start])
    return hashlib.sha1(key.encode()).hexdigest()[:16]


def socket_name() -> str:
    """The fork path's socket in the private folder."""
    return server_key() + ".sock"


def server_address() -> str:
    return os.path.join(private_folder(), socket_name())


def send_message(connection: socket.socket, payload: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(payload).encode()
    message = _HEADER.pack(len(data)) + data
    if fds:
        socket.send_fds(connection, [message], fds)
    else:
        connection.sendall(message)


def _receive_exact(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data


def receive_message(connection: socket.socket, max_fds: int = 0) -> tuple[dict, list[int]]:
    fds: list[int] = []
    if max_fds:
        head, fds, _, _ = socket.recv_fds(connection, _HEADER.size, max_fds)
        if not head:
            raise ConnectionError("connection closed")
        if len(head) < _HEADER.size:
            head += _receive_exact(connection, _HEADER.size - len(head))
    else:
        head = _receive_exact(connection, _HEADER.size)
    (size,) = _HEADER.unpack(head)
    return json.loads(_receive_exact(connection, size)), fds


def connect(address: str | os.PathLike) -> socket.socket:
    """A connection to the server at `address`, once its process is known to be this user's."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(address))
        server_uid = peer_uid(connection)
    except OSError:
        connection.close()
        raise
    if server_uid != os.getuid():
        connection.close()
        raise WarmUnavailable(f"the process listening at {address} runs as user id {server_uid}, not {os.getuid()}")
    return connection


def call(target: str, kwargs: dict) -> None:
    """Run `module:function(**kwargs)` here (the cold path, and each job of a warm child)."""
    import importlib

    module_name, function_name = target.split(":")
    getattr(importlib.import_module(module_name), function_name)(**kwargs)


def run_request(request: dict, worker: str) -> int:
    """In a warm worker of either path: become the job's process (its folder, environment and
    sys.path; its output streams are the caller's to set), run the job, return its exit status."""
    import traceback

    from rnnfleet.runner.device import WORKER_VARIABLE

    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ[WORKER_VARIABLE] = worker
        sys.path[:] = request["sys_path"]
        call(request["target"], request["kwargs"])
        return 0
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def run_forked(target: str, kwargs: dict, log_file) -> int:
    """Run the job in a warm child; returns its exit status. Raises OSError if no server can be
    had, errors.UserError if a signal killed the child (it wrote nothing about it)."""
    reason = connection_unsupported_reason()
    if reason:
        raise WarmUnavailable(reason)
    address = server_address()
    try:
        connection = connect(address)
    except WarmUnavailable:
        raise
    except OSError:
        connection = connect_or_start(address)  # no server yet: start one
    log_file.flush()
    request = {"target": target, "kwargs": kwargs, "cwd": os.getcwd(), "env": dict(os.environ), "sys_path": sys.path}
    send_message(connection, request, [sys.stdout.fileno(), sys.__stderr__.fileno(), log_file.fileno()])
    reply, _ = receive_message(connection)  # blocks for the whole job
    if reply.get("killed_by"):  # the child wrote nothing about it: one line here (errors.job_guard)
        from rnnfleet.errors import UserError

        raise UserError(killed_message(kwargs, int(reply["killed_by"])))
    return int(reply["exit_status"])


# --- starting a server (prestart, or the first job that finds none) ---------------------


def unsupported_reason() -> str | None:
    """Why this platform cannot run warm workers (start a server too), or None if it can."""
    reason = connection_unsupported_reason()
    if reason is None:
        from rnnfleet.runner.file_locks import os_locks_available

        if not os_locks_available():
            reason = "this platform has no OS file locks"
    return reason


def _lock_path(address: str | os.PathLike) -> str:
    return f"{address}.lock"


def _start_server(address: str | os.PathLike, lock) -> subprocess.Popen:
    """Start a server that inherits the held start lock and releases it once it listens,
    so jobs arriving meanwhile wait on the lock instead of starting servers of their own."""
    import subprocess

    with open(f"{address}.log", "a") as server_log:
        return subprocess.Popen(
            [sys.executable, "-m", "rnnfleet.runner.warm", str(address), str(lock.fileno())],
            cwd=os.path.dirname(PACKAGE_DIR),
            stdin=subprocess.DEVNULL,
            stdout=server_log,
            stderr=server_log,
            pass_fds=[lock.fileno()],
            start_new_session=True,  # outlives this job; not killed with its process group
        )


def prestart() -> None:
    """Start this user's server in the background, if none runs or is starting, and return
    at once: by the time the first training arrives it has imported torch. The workflow
    calls this when a run with trainings starts."""
    if unsupported_reason():
        return
    from rnnfleet.runner.file_locks import try_lock

    try:
        address = server_address()
    except OSError:
        return  # no private folder: each job says why in its log
    lock = try_lock(_lock_path(address))
    if lock is None:
        return  # a server is starting
    with lock:
        try:
            connect(address).close()
            return  # one is running
        except OSError:
            _start_server(address, lock)


def connect_or_start(address: str) -> socket.socket:
    """A connection to the server at `address`, starting one if none answers."""
    reason = unsupported_reason()
    if reason:
        raise WarmUnavailable(reason)
    from rnnfleet.runner.file_locks import wait_for_lock

    with wait_for_lock(_lock_path(address)) as lock:  # waits while another job or prestart() starts one
        try:
            return connect(address)
        except WarmUnavailable:
            raise
        except OSError:
            server = _start_server(address, lock)
    deadline = time.monotonic() + CONNECT_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        try:
            return connect(address)
        except WarmUnavailable:
            raise
        except OSError:
            if server.poll() is not None:
                raise OSError(f"warm server exited with status {server.returncode}; see {address}.log") from None
            time.sleep(0.02)
    raise OSError(f"warm server did not start within {CONNECT_TIMEOUT_SECONDS:.0f} s; see {address}.log")
