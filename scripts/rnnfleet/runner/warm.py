"""Warm workers: run preprocess, train, predict and export jobs in processes forked from one that already
imported torch and pandas, and reused from job to job.

A fresh interpreter per job pays `import torch` (and torch._dynamo, which torch.optim
pulls in) and pandas: for small models that costs more than the training. Instead, each
job's process (a thin client, rnnfleet.runner.warm_client) hands the work to a per-user server
that imported them once and runs the job in a child of its own. For Snakemake nothing
changes: the job is still one process that runs while the job runs and exits with its
status, so scheduling, resources, triggers, dry-runs and per-job failures behave as before.

- The client passes its stdout, stderr and log file descriptors (SCM_RIGHTS), working
  folder, environment and sys.path; the child adopts them, so its output goes exactly where the
  job's would, and per-job environment (CUDA_VISIBLE_DEVICES, ...) applies.
- A child whose job succeeded takes the next job with the same target, working folder,
  environment and sys.path (up to JOBS_PER_CHILD), so the fork, the copy-on-write page
  faults and the first-call costs inside pandas and oneDNN are paid once per child instead
  of once per job, which for one-day datasets is a large part of a job's work
  (bench/README.md). Between jobs the child gives back the job's descriptors (its output
  goes nowhere); each job sets its own seeds, threads and GPU memory cap, and a user's
  plug-in file is imported again when it changes (rnnfleet.plugins). A child whose job
  failed exits; a fresh one takes the next. A child keeps its CUDA context from one training
  to the next; with several GPUs it goes back to its context's GPU when that has room, and
  exits once its trainings used two (device.claim_device, device.can_take_another_job).
- If the client dies (job killed, Ctrl+C), the server sees the connection close and
  terminates the child. If the run dies alone (Snakemake's process killed: the client
  lives on, waiting), the child's job sees it and stops (rnnfleet.runner.orphans); a child never
  takes a job of another run (the runs' environments differ: RNNFLEET_RUN).
- The server is started (rnnfleet.runner.warm_client) when a run with trainings starts
  (prestart) or by the first job that finds none, under a file lock the server holds until it listens, so only one
  starts. It exits after SERVER_IDLE_SECONDS without jobs, its idle children after
  CHILD_IDLE_SECONDS. One server serves every project folder of this user, Python and code
  version (its key includes the code's modification times, so a server never runs code
  older than the files on disk).
- The server never touches CUDA or torch's thread pools, so forking it is safe.
- The shared folder holds a socket, a start lock and a log per Python and code version; a server that starts removes those of servers that are gone (no server answers at
  the socket, none is starting: the lock is free) and that no one touched for STALE_SECONDS,
  so the folder does not grow with every project and every code change. Another live
  server's files are never touched.

Security: the job's environment (tokens, keys) and its file descriptors go over the
socket, and the server runs whatever a client asks for. So the socket lives in a folder
that belongs to this user alone ($XDG_RUNTIME_DIR, else a per-user folder in the temporary
directory whose type, owner and mode are checked before every use), and each end checks
the other's user id (SO_PEERCRED / LOCAL_PEERCRED) before sending or running anything.
Anything unexpected, or a platform without fork, Unix sockets with descriptor passing,
peer credentials or OS file locks (Windows; see rnnfleet.runner.file_locks): no warm worker, one
line in the job log, and the job runs in its own process. Each job's environment says how
it runs (WORKER_VARIABLE), so its metrics can record it.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from rnnfleet.runner.device import can_take_another_job, tune_cpu_allocator
from rnnfleet.runner.warm_client import (
    CHILD_IDLE_SECONDS,
    SERVER_IDLE_SECONDS,
    peer_uid,
    receive_message,
    run_request,
    send_message,
)

# The files of a server that is gone are removed once none of them changed for this long.
STALE_SECONDS = 24 * 3600
SERVER_FILE_SUFFIXES = (".sock", ".sock.lock", ".sock.log")  # the socket, start lock and log of a server

# A child is replaced after this many jobs, so that nothing one job leaves behind in it
# (memory held by the allocator, caches) can grow without bound over a long run.
JOBS_PER_CHILD = 200


# --- the server -------------------------------------------------------------------------


@dataclass(eq=False)
class Child:
    pid: int
    channel: socket.socket | None  # the server's end of the child's socket pair; None once closed
    takes: str  # the jobs it may take (reuse_key)
    client: socket.socket | None = None  # the connection of the job it runs; None while idle
    idle_since: float = 0.0


def reuse_key(request: dict) -> str:
    """Jobs one child may run one after another: the same function, folder, environment
    (but for `_`, which the shell sets to the command it ran) and sys.path."""
    environment = {name: value for name, value in request["env"].items() if name != "_"}
    return json.dumps([request["target"], request["cwd"], environment, request["sys_path"]], sort_keys=True)


def serve(address: Path, start_lock_fd: int) -> None:
    tune_cpu_allocator()  # inherited by every child
    import pandas  # noqa: F401  every preprocessing job would import it
    import torch  # noqa: F401  the point of this server: imported once
    import torch._dynamo  # noqa: F401  torch.optim imports it on first use, in every job

    import rnnfleet.prep.prepare  # noqa: F401
    import rnnfleet.runner.jobs  # noqa: F401
    import rnnfleet.runner.orphans  # noqa: F401  each job's run watch (orphans.run_job_guard)
    import rnnfleet.train.loop  # noqa: F401

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if address.exists():
        address.unlink()  # stale: the lock holder found no server answering
    listener.bind(str(address))
    os.chmod(address, 0o600)  # the folder is private already; this is the second wall
    listener.listen(64)
    os.close(start_lock_fd)  # jobs waiting for this server may connect now
    try:
        remove_files_of_gone_servers(address.parent, address)
    except OSError as error:  # never a reason not to serve
        print(f"could not clean up {address.parent}: {error}", file=sys.stderr, flush=True)
    wakeup_read, wakeup_write = os.pipe()
    os.set_blocking(wakeup_write, False)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the loop when a child exits
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, ("accept", listener))
    selector.register(wakeup_read, selectors.EVENT_READ, ("wakeup", None))
    children: dict[int, Child] = {}
    last_activity = time.monotonic()
    try:
        while _busy(children) or time.monotonic() - last_activity < SERVER_IDLE_SECONDS:
            for key, _ in selector.select(timeout=1.0):
                event, subject = key.data
                if event == "accept":
                    _start_job(listener, selector, children)
                elif event == "wakeup":
                    os.read(wakeup_read, 4096)
                elif event == "channel" and subject.channel is key.fileobj:
                    _child_reported(subject, selector)
                elif event == "client" and subject.client is key.fileobj:
                    # Readable means the job's process closed it: the job was cancelled.
                    selector.unregister(key.fileobj)
                    _close_channel(subject, selector)  # no later job for a child being stopped
                    _terminate(subject.pid)
            _reap(children, selector)
            _retire_idle_children(children, selector)
            last_activity = time.monotonic() if _busy(children) else last_activity
    finally:
        address.unlink(missing_ok=True)
        for pid in children:
            _terminate(pid)


def remove_files_of_gone_servers(folder: Path, own_address: Path, now: float | None = None) -> list[str]:
    """Remove the socket, start lock and log of each other server in `folder` that is gone and
    whose files are all older than STALE_SECONDS; returns the names removed. A server counts as
    alive while its start lock is held (it is starting) or its socket answers."""
    from rnnfleet.runner.file_locks import try_lock
    from rnnfleet.runner.warm_client import WarmUnavailable, connect

    now = time.time() if now is None else now
    servers: dict[str, list[os.DirEntry]] = {}
    for entry in os.scandir(folder):
        suffix = next((suffix for suffix in reversed(SERVER_FILE_SUFFIXES) if entry.name.endswith(suffix)), None)
        if suffix is not None:
            servers.setdefault(entry.name[: -len(suffix)] + ".sock", []).append(entry)
    removed = []
    for socket_file, entries in servers.items():
        address = folder / socket_file
        if address == own_address or any(
            now - entry.stat(follow_symlinks=False).st_mtime < STALE_SECONDS for entry in entries
        ):
            continue
        start_lock = try_lock(f"{address}.lock")
        if start_lock is None:
            continue  # starting
        with start_lock:
            try:
                connect(address).close()
                continue  # it answers
            except WarmUnavailable:
                continue  # something answers: not ours to judge
            except OSError:
                pass  # no socket, or no one listening at it
            for suffix in SERVER_FILE_SUFFIXES:
                path = folder / (socket_file[: -len(".sock")] + suffix)
                try:
                    path.unlink()
                    removed.append(path.name)
                except FileNotFoundError:
                    pass
    return removed


def _busy(children: dict[int, Child]) -> bool:
    return any(child.client is not None for child in children.values())


def _terminate(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


def _start_job(listener: socket.socket, selector: selectors.BaseSelector, children: dict[int, Child]) -> None:
    connection, _ = listener.accept()
    try:
        client_uid = peer_uid(connection)
        if client_uid != os.getuid():
            print(f"refused a connection from user id {client_uid}", file=sys.stderr, flush=True)
            connection.close()
            return
        request, fds = receive_message(connection, max_fds=3)
    except (OSError, ValueError):
        connection.close()
        return
    takes = reuse_key(request)
    child = next(
        (c for c in children.values() if c.client is None and c.channel is not None and c.takes == takes), None
    )
    if child is not None:
        try:
            send_message(child.channel, request, fds)
        except OSError:  # it exited meanwhile: _reap will see it
            _close_channel(child, selector)
            child = None
    if child is None:
        child = _fork_child(request, fds, takes, [listener, connection], selector, children)
    for fd in fds:
        os.close(fd)
    child.client = connection
    selector.register(connection, selectors.EVENT_READ, ("client", child))


def _fork_child(
    request: dict,
    fds: list[int],
    takes: str,
    server_sockets: list[socket.socket],
    selector: selectors.BaseSelector,
    children: dict[int, Child],
) -> Child:
    server_end, child_end = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        server_end.close()
        for inherited in [
            *server_sockets,
            *(c.channel for c in children.values()),
            *(c.client for c in children.values()),
        ]:
            if inherited is not None:
                inherited.close()  # the server's and other children's: not this child's to hold open
        _child_main(child_end, request, fds)
    child_end.close()
    try:
        os.setpgid(pid, pid)  # also in the child: whichever runs first, killpg finds the group
    except OSError:
        pass
    child = Child(pid=pid, channel=server_end, takes=takes)
    children[pid] = child
    selector.register(server_end, selectors.EVENT_READ, ("channel", child))
    return child


def _child_reported(child: Child, selector: selectors.BaseSelector) -> None:
    """The child finished a job with success: tell its client, and keep the child for the
    next job if it takes one. End of file: it exited; _reap tells the client how."""
    try:
        report, _ = receive_message(child.channel)
    except (OSError, ValueError):
        _close_channel(child, selector)
        return
    if child.client is not None:
        _finish(child, report["exit_status"], selector)
    if report.get("takes_more"):
        child.idle_since = time.monotonic()
    else:
        _close_channel(child, selector)


def _finish(child: Child, exit_status: int, selector: selectors.BaseSelector, killed_by: int | None = None) -> None:
    """Send the job's exit status to its client (and the signal that killed the child, if
    one did) and close the connection."""
    connection, child.client = child.client, None
    if connection.fileno() in selector.get_map():
        selector.unregister(connection)
    try:
        send_message(connection, {"exit_status": exit_status, "killed_by": killed_by})
    except OSError:
        pass  # the client is gone already
    connection.close()


def _close_channel(child: Child, selector: selectors.BaseSelector) -> None:
    """No more jobs for this child; an idle one reads the end of file and exits."""
    if child.channel is not None:
        selector.unregister(child.channel)
        child.channel.close()
        child.channel = None


def _retire_idle_children(children: dict[int, Child], selector: selectors.BaseSelector) -> None:
    now = time.monotonic()
    for child in children.values():
        if child.client is None and child.channel is not None and now - child.idle_since > CHILD_IDLE_SECONDS:
            _close_channel(child, selector)


def _reap(children: dict[int, Child], selector: selectors.BaseSelector) -> None:
    for pid in list(children):
        finished, status = os.waitpid(pid, os.WNOHANG)
        if not finished:
            continue
        child = children.pop(pid)
        _close_channel(child, selector)
        if child.client is not None:
            exit_status = os.waitstatus_to_exitcode(status)  # -N: killed by signal N
            if exit_status >= 0:
                _finish(child, exit_status, selector)
            else:
                _finish(child, 128 - exit_status, selector, killed_by=-exit_status)


# --- a child ----------------------------------------------------------------------------


def _child_main(channel: socket.socket, request: dict, fds: list[int]) -> None:
    """In the forked child: run jobs until one fails, JOBS_PER_CHILD are done, or the server
    gives no more (end of file on the channel); never return."""
    exit_status = 1
    try:
        os.setpgid(0, 0)
        signal.set_wakeup_fd(-1)  # the server's wake-up pipe is not this process's
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for jobs_done in range(1, JOBS_PER_CHILD + 1):
            exit_status = _run_one_job(request, fds)
            if exit_status != 0:
                break
            takes_more = jobs_done < JOBS_PER_CHILD and can_take_another_job()
            send_message(channel, {"exit_status": 0, "takes_more": takes_more})
            if not takes_more:
                break
            try:
                request, fds = receive_message(channel, max_fds=3)
            except (OSError, ValueError):
                break  # the server retired this child, or exited
    except BaseException:
        traceback.print_exc()
        exit_status = 1  # not the status of a job that succeeded before
    finally:
        os._exit(exit_status)


def _run_one_job(request: dict, fds: list[int]) -> int:
    """Become the job's process (its stdout, stderr, log, folder, environment, sys.path), run
    it, then let go of the job's descriptors; returns the job's exit status."""
    stdout_fd, stderr_fd, log_fd = fds
    os.dup2(stdout_fd, 1)
    os.dup2(stderr_fd, 2)
    os.close(stdout_fd)
    os.close(stderr_fd)
    sys.stderr = os.fdopen(log_fd, "w", buffering=1)
    try:
        return run_request(request, f"warm {os.getppid()}")
    finally:
        sys.stderr.close()
        sys.stderr = sys.__stderr__
        nowhere = os.open(os.devnull, os.O_WRONLY)
        os.dup2(nowhere, 1)  # the job's pipes close when its client is told it is done
        os.dup2(nowhere, 2)
        os.close(nowhere)


if __name__ == "__main__":
    serve(Path(sys.argv[1]), int(sys.argv[2]))
