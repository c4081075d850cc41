"""The job's side of the spawn path (rnnfleet.runner.spawned): warm workers where the fork path
cannot run (Windows; tests/without_unix_facilities imitates it on Linux).

Why multiprocessing.connection: it is the standard library's one channel that is a named pipe
on Windows and a Unix socket elsewhere, with a challenge-response handshake on a shared
secret, so neither descriptor passing nor peer credentials are needed to know that the other
end is this user's. The secret is a random key in a file of this user's private folder,
readable by this user alone (mode 0600 in a folder checked to be 0700 and this user's on
Unix; on Windows the folder is in the user's own profile, whose access list admits the
user, SYSTEM and administrators). Both ends prove they hold it before a job's environment is
sent or anything is run; every message is JSON (send_bytes/recv_bytes), never a pickle.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from typing import TYPE_CHECKING

from rnnfleet.runner.warm_client import (
    CONNECT_TIMEOUT_SECONDS,
    PACKAGE_DIR,
    WarmUnavailable,
    killed_message,
    private_folder,
    server_key,
)

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

LISTENER_FAMILY = "AF_PIPE" if sys.platform == "win32" else "AF_UNIX"
SECRET_FILE = "spawn.key"
SECRET_BYTES = 32


def encode(message: dict) -> bytes:
    return json.dumps(message).encode()


def decode(data: bytes) -> dict:
    message = json.loads(data)
    if not isinstance(message, dict):
        raise ValueError("not a message")
    return message


def unsupported_reason() -> str | None:
    """Why this platform cannot run the spawn path either, or None if it can: the OS file
    locks of rnnfleet.runner.file_locks (LockFileEx on Windows, flock elsewhere), asked without
    importing filelock, which would cost every job's client more than the rest of its way."""
    if os.name == "nt":
        return None
    try:
        import fcntl  # noqa: F401  what filelock locks with on Unix
    except ImportError:
        return "this platform has no OS file locks"
    return None


def user_secret() -> bytes:
    """This user's key for the handshake, made once (random) in the private folder."""
    path = os.path.join(private_folder(), SECRET_FILE)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(descriptor, "wb") as key_file:
            key_file.write(os.urandom(SECRET_BYTES))  # what secrets.token_bytes returns
    deadline = time.monotonic() + 5
    while True:
        _check_secret_file(path)
        with open(path, "rb") as key_file:
            secret = key_file.read()
        if len(secret) == SECRET_BYTES:
            return secret
        if time.monotonic() > deadline:  # another process is not writing it: damaged
            raise WarmUnavailable(f"{path} does not hold a key of {SECRET_BYTES} bytes: remove it")
        time.sleep(0.01)  # another job is writing it now


def _check_secret_file(path: str) -> None:
    if not hasattr(os, "getuid"):
        return  # Windows: the profile folder's access list (the module doc)
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise WarmUnavailable(f"{path} is not a file of user id {os.getuid()} that only it can read: not used")


def server_address() -> str:
    """Where this user's spawn-path server for this Python and code version listens."""
    name = server_key("spawn")
    if LISTENER_FAMILY == "AF_PIPE":
        return rf"\\.\pipe\rnnfleet-warm-{name}"
    return os.path.join(private_folder(), f"{name}.sock")


def start_lock_path(address: str) -> str:
    """The server's start lock (and, with .log for .lock, its log) in the private folder."""
    if LISTENER_FAMILY == "AF_PIPE":
        return os.path.join(private_folder(), address.rsplit("-", 1)[1] + ".sock.lock")
    return f"{address}.lock"


def log_path(address: str) -> str:
    return start_lock_path(address)[: -len(".lock")] + ".log"


def connect(address: str, secret: bytes) -> Connection:
    """A connection to the server at `address` once both ends proved they hold `secret`."""
    from multiprocessing.connection import AuthenticationError, Client

    try:
        return Client(address, family=LISTENER_FAMILY, authkey=secret)
    except AuthenticationError:
        raise WarmUnavailable(f"the process listening at {address} does not hold this user's key: not used") from None
    except EOFError:
        raise ConnectionError(f"{address} closed the connection") from None


def answers(address: str, secret: bytes) -> bool:
    try:
        connect(address, secret).close()
        return True
    except OSError:
        return False


def start_server(address: str):
    """Start a server in the background; it serialises itself with any other (spawned.serve)."""
    import subprocess

    options = {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP} if sys.platform == "win32" else {}
    with open(log_path(address), "a") as server_log:
        return subprocess.Popen(
            [sys.executable, "-m", "rnnfleet.runner.spawned", address],
            cwd=os.path.dirname(PACKAGE_DIR),
            stdin=subprocess.DEVNULL,
            stdout=server_log,
            stderr=server_log,
            start_new_session=sys.platform != "win32",  # outlives this job; not killed with its process group
            **options,
        )


def prestart() -> None:
    """Start the server if none answers, without waiting for it."""
    if unsupported_reason():
        return
    try:
        address, secret = server_address(), user_secret()
        if not answers(address, secret):
            start_server(address)
    except OSError:
        return  # each job says why in its log


def connect_or_start(address: str, secret: bytes) -> Connection:
    server = None
    deadline = time.monotonic() + CONNECT_TIMEOUT_SECONDS
    while True:
        try:
            return connect(address, secret)
        except WarmUnavailable:
            raise
        except OSError:
            if server is None:
                server = start_server(address)
            elif server.poll() not in (None, 0):  # 0: another server answers there (spawned.serve)
                raise OSError(f"warm server exited with status {server.returncode}; see {log_path(address)}") from None
            if time.monotonic() > deadline:
                raise OSError(
                    f"warm server did not start within {CONNECT_TIMEOUT_SECONDS:.0f} s; see {log_path(address)}"
                ) from None
            time.sleep(0.02)


def run_spawned(target: str, kwargs: dict, log_file) -> int:
    """Run the job in a spawned worker; returns its exit status. Raises OSError if no server can
    be had, errors.UserError if a signal killed the worker (it wrote nothing about it)."""
    reason = unsupported_reason()
    if reason:
        raise WarmUnavailable(reason)
    secret = user_secret()
    connection = connect_or_start(server_address(), secret)
    log_file.flush()
    request = {
        "target": target,
        "kwargs": kwargs,
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "sys_path": sys.path,
        "log_path": os.path.abspath(log_file.name),
    }
    with connection:
        connection.send_bytes(encode(request))
        while True:
            try:
                reply = decode(connection.recv_bytes())  # output, then the exit status
            except EOFError:
                raise ConnectionError("the warm server closed the connection during the job") from None
            if "stream" not in reply:
                break
            stream = sys.stdout if reply["stream"] == "stdout" else sys.__stderr__
            stream.write(reply["text"])
            stream.flush()
    log_file.seek(0, os.SEEK_END)  # the worker appended to the log: write after it
    if reply.get("killed_by"):
        from rnnfleet.errors import UserError

        raise UserError(killed_message(kwargs, int(reply["killed_by"])))
    return int(reply["exit_status"])
