"""Warm workers: run preprocess and train jobs in processes forked from one that already
imported torch and pandas.

Snakemake starts a fresh interpreter per `script:` job, and `import torch` costs about
1.3 CPU-seconds, plus ~1.2 s for torch._dynamo that torch.optim pulls in: for small models
that is half of each job; a preprocess job spends most of its 0.4 s importing pandas.
Instead, the job's script (a thin client) hands the work to a per-folder server that
imported them once and forks one child per job. For Snakemake nothing changes: the job is still one process that
runs while the training runs and exits with the training's status, so scheduling,
resources, triggers, dry-runs and per-job failures behave as before.

- The client passes its stdout, stderr and log file descriptors (SCM_RIGHTS), working
  folder, environment and sys.path; the child adopts them, so its output goes exactly where the
  job's would, and per-job environment (CUDA_VISIBLE_DEVICES, ...) applies.
- If the client dies (job killed, Ctrl+C), the server sees the connection close and
  terminates the child.
- The server is started when a run with trainings starts (prestart) or by the first job
  that finds none, under a file lock the server holds until it listens, so only one
  starts; it exits after IDLE_SECONDS without jobs. Its key includes the code's
  modification times, so a server never runs code older than the files on disk.
- The server never touches CUDA or torch's thread pools, so forking it is safe.

Security: the job's environment (tokens, keys) and its file descriptors go over the
socket, and the server runs whatever a client asks for. So the socket lives in a folder
that belongs to this user alone ($XDG_RUNTIME_DIR, else a per-user folder in the temporary
directory whose type, owner and mode are checked before every use), and each end checks
the other's user id (SO_PEERCRED / LOCAL_PEERCRED) before sending or running anything.
Anything unexpected, or a platform without fork, Unix sockets with descriptor passing,
peer credentials or OS file locks (Windows; see rnnfleet.file_locks): no warm worker, one
line in the job log, and the job runs in its own process. Each job's environment says how
it runs (WORKER_VARIABLE), so its metrics can record it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import selectors
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from rnnfleet.device import WORKER_VARIABLE, tune_cpu_allocator
from rnnfleet.file_locks import os_locks_available, try_lock, wait_for_lock

IDLE_SECONDS = 10.0
CONNECT_TIMEOUT_SECONDS = 120.0
PACKAGE_DIR = Path(__file__).resolve().parent
_HEADER = struct.Struct("!I")
_LINUX_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_MACOS_LOCAL_PEERCRED, _MACOS_XUCRED = 0x001, struct.Struct("IIh16I")  # struct xucred: version, uid, ...


class WarmUnavailable(OSError):
    """No warm worker for this job; the message says why in one line."""


def unsupported_reason() -> str | None:
    """Why this platform cannot run warm workers, or None if it can."""
    if not hasattr(os, "fork"):
        return "this platform has no fork()"
    if not hasattr(socket, "AF_UNIX") or not hasattr(socket, "send_fds"):
        return "this platform has no Unix sockets that pass file descriptors"
    if not hasattr(socket, "SO_PEERCRED") and sys.platform != "darwin":
        return "this platform cannot tell who is at the other end of a Unix socket"
    if not os_locks_available():
        return "this platform has no OS file locks"
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


def check_private_folder(folder: Path) -> None:
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


def private_folder() -> Path:
    """This user's own folder for the server's socket, lock and log; checked on every call."""
    folder = Path(tempfile.gettempdir()) / f"rnnfleet-warm-{os.getuid()}"
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir and os.path.isabs(runtime_dir):
        with contextlib.suppress(WarmUnavailable):  # a runtime dir that is not ours: the temporary folder
            check_private_folder(Path(runtime_dir))
            folder = Path(runtime_dir) / "rnnfleet-warm"
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    check_private_folder(folder)
    return folder


def socket_name(workdir: str | os.PathLike) -> str:
    """One server per working folder, Python, code version and user. Short: AF_UNIX limits the path to ~100 bytes."""
    code_stamp = sorted((path.name, path.stat().st_mtime_ns) for path in PACKAGE_DIR.glob("*.py"))
    key = json.dumps([str(Path(workdir).resolve()), sys.executable, code_stamp, os.getuid()])
    return hashlib.sha1(key.encode()).hexdigest()[:16] + ".sock"


def server_address(workdir: str | os.PathLike) -> Path:
    return private_folder() / socket_name(workdir)


def _send_message(connection: socket.socket, payload: dict, fds: list[int] | None = None) -> None:
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


def _receive_message(connection: socket.socket, max_fds: int = 0) -> tuple[dict, list[int]]:
    fds: list[int] = []
    if max_fds:
        head, fds, _, _ = socket.recv_fds(connection, _HEADER.size, max_fds)
        if len(head) < _HEADER.size:
            head += _receive_exact(connection, _HEADER.size - len(head))
    else:
        head = _receive_exact(connection, _HEADER.size)
    (size,) = _HEADER.unpack(head)
    return json.loads(_receive_exact(connection, size)), fds


def process_started_at() -> float | None:
    """Wall-clock time (epoch seconds) at which this process was created, where the OS says.

    On Linux from /proc against the uptime clock: psutil adds the process's age to a boot
    time it reads in whole seconds, which can place the start up to a second early."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
            age = float(uptime.read().split()[0]) - start_ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    import psutil  # a dependency of Snakemake; macOS and Windows report the start precisely

    try:
        return psutil.Process().create_time()
    except psutil.Error:
        return None


def run_job(target: str, kwargs: dict, warm: bool) -> None:
    """The job's entry point: in a warm worker when asked for and possible, else here.
    Under SLURM each job runs alone on its allocation, so a server would never be reused."""
    if warm and "SLURM_JOB_ID" not in os.environ:
        try:
            exit_status = run_warm(target, kwargs, sys.stderr)
        except OSError as error:
            print(f"warm worker unavailable: {error}; running in the job's own process", file=sys.stderr)
        else:
            if exit_status:
                sys.exit(exit_status)
            return
    os.environ[WORKER_VARIABLE] = "cold"
    tune_cpu_allocator()
    call(target, kwargs)


def call(target: str, kwargs: dict) -> None:
    """Run `module:function(**kwargs)` here (used for the cold path and inside warm children)."""
    module_name, function_name = target.split(":")
    getattr(importlib.import_module(module_name), function_name)(**kwargs)


# --- client -----------------------------------------------------------------------------


def run_warm(target: str, kwargs: dict, log_file) -> int:
    """Run the job in a warm child; returns its exit status. Raises OSError if no server can be had."""
    reason = unsupported_reason()
    if reason:
        raise WarmUnavailable(reason)
    address = server_address(os.getcwd())
    connection = _connect_or_start(address)
    log_file.flush()
    request = {"target": target, "kwargs": kwargs, "cwd": os.getcwd(), "env": dict(os.environ), "sys_path": sys.path}
    _send_message(connection, request, [sys.stdout.fileno(), sys.__stderr__.fileno(), log_file.fileno()])
    reply, _ = _receive_message(connection)  # blocks for the whole training
    return int(reply["exit_status"])


def _connect(address: Path) -> socket.socket:
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


def _lock_path(address: Path) -> str:
    return f"{address}.lock"


def _start_server(address: Path, lock) -> subprocess.Popen:
    """Start a server that inherits the held start lock and releases it once it listens,
    so jobs arriving meanwhile wait on the lock instead of starting servers of their own."""
    with open(f"{address}.log", "a") as server_log:
        return subprocess.Popen(
            [sys.executable, "-m", "rnnfleet.warm", str(address), str(lock.fileno())],
            cwd=PACKAGE_DIR.parent,
            stdin=subprocess.DEVNULL,
            stdout=server_log,
            stderr=server_log,
            pass_fds=[lock.fileno()],
            start_new_session=True,  # outlives this job; not killed with its process group
        )


def prestart(workdir: str | os.PathLike = ".") -> None:
    """Start the folder's server in the background, if none runs or is starting, and return
    at once: by the time the first training arrives it has imported torch. The workflow
    calls this when a run with trainings starts."""
    if unsupported_reason():
        return
    try:
        address = server_address(workdir)
    except OSError:
        return  # no private folder: each job says why in its log
    lock = try_lock(_lock_path(address))
    if lock is None:
        return  # a server is starting
    with lock:
        try:
            _connect(address).close()
            return  # one is running
        except OSError:
            _start_server(address, lock)


def _connect_or_start(address: Path) -> socket.socket:
    try:
        return _connect(address)
    except WarmUnavailable:
        raise
    except OSError:
        pass
    with wait_for_lock(_lock_path(address)) as lock:  # waits while another job or prestart() starts one
        try:
            return _connect(address)
        except OSError:
            server = _start_server(address, lock)
    deadline = time.monotonic() + CONNECT_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        try:
            return _connect(address)
        except WarmUnavailable:
            raise
        except OSError:
            if server.poll() is not None:
                raise OSError(f"warm server exited with status {server.returncode}; see {address}.log") from None
            time.sleep(0.02)
    raise OSError(f"warm server did not start within {CONNECT_TIMEOUT_SECONDS:.0f} s; see {address}.log")


# --- server -----------------------------------------------------------------------------


def _run_child(request: dict, fds: list[int]) -> None:
    """In the forked child: become the job's process, run it, never return."""
    exit_status = 1
    try:
        os.setpgid(0, 0)
        stdout_fd, stderr_fd, log_fd = fds
        os.dup2(stdout_fd, 1)
        os.dup2(stderr_fd, 2)
        sys.stderr = os.fdopen(log_fd, "w", buffering=1)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ[WORKER_VARIABLE] = f"warm {os.getppid()}"
        sys.path[:] = request["sys_path"]
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        call(request["target"], request["kwargs"])
        exit_status = 0
    except SystemExit as stop:
        exit_status = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stderr.flush()
            sys.stdout.flush()
        finally:
            os._exit(exit_status)


def serve(address: Path, start_lock_fd: int) -> None:
    tune_cpu_allocator()  # inherited by every child
    import pandas  # noqa: F401  preprocessing jobs: ~0.3 s each
    import torch  # noqa: F401  the point of this server: imported once
    import torch._dynamo  # noqa: F401  torch.optim imports it on first use: another ~1.2 s per job

    import rnnfleet.data  # noqa: F401
    import rnnfleet.jobs  # noqa: F401
    import rnnfleet.training  # noqa: F401

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if address.exists():
        address.unlink()  # stale: the lock holder found no server answering
    listener.bind(str(address))
    os.chmod(address, 0o600)  # the folder is private already; this is the second wall
    listener.listen(64)
    os.close(start_lock_fd)  # jobs waiting for this server may connect now
    wakeup_read, wakeup_write = os.pipe()
    os.set_blocking(wakeup_write, False)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the loop when a child exits
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wakeup_read, selectors.EVENT_READ, "wakeup")
    children: dict[int, socket.socket] = {}  # child pid -> its client's connection
    last_activity = time.monotonic()
    try:
        while children or time.monotonic() - last_activity < IDLE_SECONDS:
            for key, _ in selector.select(timeout=1.0):
                if key.data == "accept":
                    connection, _ = listener.accept()
                    _start_job(connection, selector, children)
                elif key.data == "wakeup":
                    os.read(wakeup_read, 4096)
                else:  # a client's connection: readable means it closed, so its job was cancelled
                    selector.unregister(key.fileobj)
                    _terminate(key.data)
            _reap(children, selector)
            last_activity = time.monotonic() if children else last_activity
    finally:
        address.unlink(missing_ok=True)
        for pid in children:
            _terminate(pid)


def _terminate(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


def _start_job(connection: socket.socket, selector: selectors.BaseSelector, children: dict) -> None:
    try:
        client_uid = peer_uid(connection)
        if client_uid != os.getuid():
            print(f"refused a connection from user id {client_uid}", file=sys.stderr, flush=True)
            connection.close()
            return
        request, fds = _receive_message(connection, max_fds=3)
    except (OSError, ValueError):
        connection.close()
        return
    pid = os.fork()
    if pid == 0:
        _run_child(request, fds)
    try:
        os.setpgid(pid, pid)  # also in the child: whichever runs first, killpg finds the group
    except OSError:
        pass
    for fd in fds:
        os.close(fd)
    children[pid] = connection
    selector.register(connection, selectors.EVENT_READ, pid)


def _reap(children: dict, selector: selectors.BaseSelector) -> None:
    for pid in list(children):
        finished, status = os.waitpid(pid, os.WNOHANG)
        if not finished:
            continue
        connection = children.pop(pid)
        if connection.fileno() in selector.get_map():
            selector.unregister(connection)
        exit_status = os.waitstatus_to_exitcode(status)
        try:
            _send_message(connection, {"exit_status": exit_status if exit_status >= 0 else 128 - exit_status})
        except OSError:
            pass  # the client is gone already
        connection.close()


if __name__ == "__main__":
    serve(Path(sys.argv[1]), int(sys.argv[2]))
