"""Warm workers without fork: the server of the spawn path, and its workers.

Where the fork path (rnnfleet.runner.warm) cannot run, because the platform has no fork(), no
Unix sockets that pass descriptors or no peer credentials (Windows), jobs still run in
long-lived processes that imported torch and pandas once:

- The server is a light process (no torch) that listens where rnnfleet.runner.spawn_client
  says: a named pipe on Windows, a Unix socket in this user's private folder elsewhere. Each
  connection must prove it knows this user's secret (a file only the user can read) before
  anything is read from it, and the server proves it in turn (multiprocessing.connection's
  challenge, both ways). Messages are JSON: nothing received is unpickled.
- Workers are started with multiprocessing's spawn (a fresh interpreter, no fork). Each
  imports pandas and the job code before its first job, torch in the first job that needs it,
  each once, then takes job after job from the server
  over a pipe of its own. One spare worker that has not taken a job yet is kept ready, so a
  job rarely waits for the imports. A worker takes the next job only if it has the same
  folder, environment and sys.path as its last (spawn_key), and, once it started CUDA,
  only if it trains: a job that does not train never runs beside a context no job of its
  declares. A training worker keeps its CUDA context from one training to the next.
- The job's descriptors cannot travel, so the worker appends to the job's log by its path
  and sends what the job prints to stdout and to Snakemake's stderr (sys.__stderr__) to the
  server, which relays it to the job's client; the client prints it where the job's process
  would have. What C code writes to the worker's own descriptors goes to the server's log.
- If the job's client goes (the job was killed, Ctrl+C), the server terminates the worker:
  SIGTERM on Unix, which errors.job_guard turns into a clean stop; TerminateProcess on
  Windows. A worker that dies during a job is reported to the client with its exit status
  or the signal that killed it. If Snakemake's process is killed alone, the job's own run
  watch stops it (rnnfleet.runner.orphans), as on the fork path.
- The server exits after SERVER_IDLE_SECONDS without jobs, a worker that ran a job after
  CHILD_IDLE_SECONDS idle (it may hold a CUDA context), and a worker whose server is gone
  as soon as it is idle.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import (
    AuthenticationError,
    Connection,
    Listener,
    answer_challenge,
    deliver_challenge,
    wait,
)

from rnnfleet.runner.job_client import JOBS
from rnnfleet.runner.spawn_client import (
    LISTENER_FAMILY,
    answers,
    decode,
    encode,
    start_lock_path,
    user_secret,
)
from rnnfleet.runner.warm import JOBS_PER_CHILD, reuse_key
from rnnfleet.runner.warm_client import CHILD_IDLE_SECONDS, SERVER_IDLE_SECONDS, run_request

SPARE_WORKERS = 1  # started before any job asks, so a job rarely waits for a fresh interpreter's imports
WORKER_LABEL = "spawned"  # what a job's metrics record as its worker (device.job_process)


# --- a worker ---------------------------------------------------------------------------


class Relay(io.TextIOBase):
    """A text stream whose writes go to the job's client, through the server."""

    def __init__(self, channel: Connection, stream: str, lock: threading.Lock):
        self.channel, self.stream, self.lock = channel, stream, lock

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if text:
            with self.lock:
                self.channel.send_bytes(encode({"stream": self.stream, "text": text}))
        return len(text)


def worker_main(channel: Connection, server_pid: int) -> None:
    """A spawned worker: import once, then run jobs until one fails, JOBS_PER_CHILD are done, or
    the server gives no more (end of file on the channel)."""
    from rnnfleet.runner.device import can_take_another_job, cuda_devices_used, tune_cpu_allocator

    tune_cpu_allocator()
    # What every job imports, before the first job comes. torch (and torch._dynamo, which
    # torch.optim imports on a first step) is left to the first job that needs it: unlike the
    # fork path's server, whose children share its imports, each worker pays its own, and a
    # worker that preprocesses never needs torch.
    import pandas  # noqa: F401

    import rnnfleet.prep.prepare  # noqa: F401
    import rnnfleet.runner.jobs  # noqa: F401
    import rnnfleet.runner.orphans  # noqa: F401

    for jobs_done in range(1, JOBS_PER_CHILD + 1):
        try:
            request = decode(channel.recv_bytes())
        except (EOFError, OSError):
            return  # retired, or the server is gone
        exit_status = _run_relayed(request, channel, server_pid)
        takes_more = exit_status == 0 and jobs_done < JOBS_PER_CHILD and can_take_another_job()
        try:
            report = {"exit_status": exit_status, "takes_more": takes_more, "holds_cuda": bool(cuda_devices_used())}
            channel.send_bytes(encode(report))
        except OSError:
            return
        if not takes_more:
            return


def _run_relayed(request: dict, channel: Connection, server_pid: int) -> int:
    """Run one job with its log appended by path and its stdout and stderr relayed."""
    lock = threading.Lock()
    saved = sys.stdout, sys.stderr, sys.__stderr__
    try:
        log = open(request["log_path"], "a", buffering=1)  # noqa: SIM115 - closed below
    except OSError as error:
        print(f"cannot open the job's log {request['log_path']}: {error}", file=sys.stderr, flush=True)
        return 1
    sys.stdout, sys.stderr = Relay(channel, "stdout", lock), log
    sys.__stderr__ = Relay(channel, "stderr", lock)
    try:
        return run_request(request, f"{WORKER_LABEL} {server_pid}")
    finally:
        sys.stdout, sys.stderr, sys.__stderr__ = saved
        log.close()


# --- the server -------------------------------------------------------------------------


TRAINING_TARGETS = (JOBS["train"][0], JOBS["pretrain"][0])


@dataclass(eq=False)
class Worker:
    process: multiprocessing.process.BaseProcess
    channel: Connection
    takes: str | None = None  # spawn_key of its jobs; None: a spare that has taken none
    last_target: str = ""
    holds_cuda: bool = False  # it started CUDA: it takes trainings only
    busy: bool = False
    idle_since: float = 0.0


def spawn_key(request: dict) -> str:
    """Jobs one worker may run one after another: the same folder, environment and sys.path
    (rnnfleet.runner.warm.reuse_key) whatever the job's function, since a spawned worker's start
    costs a fresh interpreter's imports; see Pool.take for the one exception, CUDA."""
    return reuse_key({**request, "target": ""})


class Pool:
    """The server's workers: handed out to jobs, taken back, retired when idle."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.workers: list[Worker] = []
        self.context = multiprocessing.get_context("spawn")
        self.last_busy = time.monotonic()

    def _start(self) -> Worker:
        server_end, worker_end = self.context.Pipe()
        process = self.context.Process(
            target=worker_main, args=(worker_end, os.getpid()), name="rnnfleet-worker", daemon=True
        )
        process.start()
        worker_end.close()
        worker = Worker(process=process, channel=server_end, idle_since=time.monotonic())
        self.workers.append(worker)
        return worker

    def keep_spares(self) -> None:
        with self.lock:
            spares = sum(1 for worker in self.workers if worker.takes is None and not worker.busy)
            for _ in range(SPARE_WORKERS - spares):
                self._start()

    def take(self, takes: str, target: str) -> Worker:
        """An idle worker for a job of `takes` and `target`: one whose last job had the same
        target (its imports done), else one of the same `takes`, else a spare, else a new one.
        A worker that started CUDA takes trainings only: a job that does not train never runs
        beside a context that no job of its declares."""
        trains = target in TRAINING_TARGETS
        with self.lock:
            idle = [
                worker
                for worker in self.workers
                if not worker.busy and worker.process.is_alive() and (trains or not worker.holds_cuda)
            ]
            worker = (
                next((w for w in idle if w.takes == takes and w.last_target == target), None)
                or next((w for w in idle if w.takes == takes), None)
                or next((w for w in idle if w.takes is None), None)
                or self._start()
            )
            worker.takes, worker.last_target, worker.busy = takes, target, True
        self.keep_spares()
        return worker

    def give_back(self, worker: Worker, report: dict) -> None:
        with self.lock:
            worker.busy, worker.idle_since = False, time.monotonic()
            worker.holds_cuda = bool(report.get("holds_cuda"))
            if not report["takes_more"]:
                self._drop(worker)

    def _drop(self, worker: Worker) -> None:
        worker.channel.close()  # an idle worker reads the end of file and exits
        self.workers.remove(worker)

    def stop(self, worker: Worker) -> None:
        """End a worker whose job was cancelled."""
        with self.lock:
            if worker in self.workers:
                self._drop(worker)
        worker.process.terminate()

    def tidy(self) -> bool:
        """Retire the workers idle for too long, forget the dead; True while any job runs."""
        now = time.monotonic()
        with self.lock:
            for worker in list(self.workers):
                if not worker.busy and (
                    not worker.process.is_alive()
                    or (worker.takes is not None and now - worker.idle_since > CHILD_IDLE_SECONDS)
                ):
                    self._drop(worker)
            busy = any(worker.busy for worker in self.workers)
        if busy:
            self.last_busy = now
        return busy


def serve(address: str) -> None:
    """Listen at `address` until idle for SERVER_IDLE_SECONDS; return at once if another
    server answers there (two jobs that found none may each start one)."""
    from rnnfleet.runner.file_locks import wait_for_lock

    secret = user_secret()
    with wait_for_lock(start_lock_path(address)):  # held until listening: the next one sees us
        if answers(address, secret):
            return
        if LISTENER_FAMILY == "AF_UNIX" and os.path.exists(address):
            os.unlink(address)  # stale: no server answers there
        listener = Listener(address, family=LISTENER_FAMILY)
        if LISTENER_FAMILY == "AF_UNIX":
            os.chmod(address, 0o600)  # the folder is private already; this is the second wall
    pool = Pool()
    pool.keep_spares()
    threading.Thread(target=_accept_jobs, args=(listener, secret, pool), name="accept", daemon=True).start()
    try:
        while pool.tidy() or time.monotonic() - pool.last_busy < SERVER_IDLE_SECONDS:
            time.sleep(0.5)
    finally:
        listener.close()
        for worker in list(pool.workers):
            worker.process.terminate()


def _accept_jobs(listener: Listener, secret: bytes, pool: Pool) -> None:
    while True:
        try:
            connection = listener.accept()  # made without a key: the handshake is in the job's own thread, below
        except OSError:
            return  # closed
        threading.Thread(target=_serve_job, args=(connection, secret, pool), daemon=True).start()


def _serve_job(connection: Connection, secret: bytes, pool: Pool) -> None:
    """One job: the handshake, then its request to a worker, and the worker's output and exit
    status back to the client; the worker ended if the client goes first."""
    with connection:
        try:
            deliver_challenge(connection, secret)
            answer_challenge(connection, secret)
        except (AuthenticationError, EOFError, OSError) as error:
            print(f"refused a connection: {error or type(error).__name__}", file=sys.stderr, flush=True)
            return
        try:
            request = decode(connection.recv_bytes())
        except (EOFError, OSError, ValueError):
            return  # a probe (answers()), or a client that went
        worker = pool.take(spawn_key(request), request["target"])
        try:
            worker.channel.send_bytes(encode(request))
        except OSError:
            pool.stop(worker)
            return
        _relay(connection, worker, pool)


def _relay(connection: Connection, worker: Worker, pool: Pool) -> None:
    while True:
        ready = wait([connection, worker.channel])
        if connection in ready:  # the client sends nothing more: readable means it went
            pool.stop(worker)
            return
        try:
            message = decode(worker.channel.recv_bytes())
        except (EOFError, OSError):  # the worker died during the job
            worker.process.join(10)
            pool.stop(worker)
            exit_code = worker.process.exitcode
            signal_number = -exit_code if exit_code is not None and exit_code < 0 else None
            status = 128 + signal_number if signal_number else (exit_code or 1)
            _send(connection, {"exit_status": status, "killed_by": signal_number})
            return
        if "stream" in message:
            if not _send(connection, message):
                pool.stop(worker)
                return
            continue
        _send(connection, {"exit_status": message["exit_status"], "killed_by": None})
        pool.give_back(worker, message)
        return


def _send(connection: Connection, message: dict) -> bool:
    try:
        connection.send_bytes(encode(message))
        return True
    except OSError:
        return False


if __name__ == "__main__":
    try:
        serve(sys.argv[1])
    except BaseException:
        traceback.print_exc()
        raise
