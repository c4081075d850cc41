"""The process Snakemake starts for each preprocess, train, pretrain, predict, export and tune job
(scripts/job.py).

What it promises:
- It starts in a few hundredths of a second. A `script:` job first imports Snakemake and
  unpickles the job, which costs about as much as a one-day dataset's training; these jobs
  are shell commands that import only a few light standard modules and rnnfleet's client
  code (rnnfleet.runner.warm_client) before handing the job to a warm worker (a test checks which
  modules; bench/README.md has the figures).
- What differs from job to job (dataset, paths, threads, resources) is on the command line
  (rules/jobs.smk, job_command): `--text NAME VALUE` for paths and words, `--value NAME
  JSON` for numbers, read with json.loads (never eval or pickle). What is the same
  for every job of a run (the rules' params: hyper-parameters, columns, file layout; the
  device; warm workers or not) is in a JSON settings file named by its content's hash,
  which the run writes before its first job in a folder of the user's alone
  (.snakemake/rnnfleet-jobs, mode 0700; the file 0600): other local users see neither the
  settings nor their values in `ps`. Datasets that a datasets sheet gives settings of their
  own get such a file per distinct configuration (rules/jobs.smk), named the same way.
- From there the job runs as it did from a `script:`, with the same arguments, its stderr in the
  job's log, a failure as one line (rnnfleet.errors.job_guard): in a warm worker where asked for
  and possible (run_job), on the fork path (rnnfleet.runner.warm_client) where the platform has
  fork, descriptor passing and peer credentials, else on the spawn path
  (rnnfleet.runner.spawn_client: Windows); else in this process, after one line in its log.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

# Job kind -> (the function that does the job, whether it gets the process's start time).
JOBS = {
    "preprocess": ("rnnfleet.runner.jobs:preprocess_job", False),
    "train": ("rnnfleet.runner.jobs:train_job", True),
    "pretrain": ("rnnfleet.runner.jobs:pretrain_job", False),
    "predict": ("rnnfleet.runner.jobs:predict_job", False),
    "export": ("rnnfleet.runner.jobs:export_job", False),
    "tune_worker": ("rnnfleet.runner.jobs:tune_worker_job", False),
    "tune_report": ("rnnfleet.runner.jobs:tune_report_job", False),
    "tune_verdict": ("rnnfleet.runner.jobs:tune_verdict_job", False),
}


SETTINGS_FOLDER = ".snakemake/rnnfleet-jobs"
WARM_KEY = "warm_workers"


def settings_path(settings: dict) -> Path:
    """Where the run's job settings are kept: named by their content, so a changed config
    gets a file (and job commands) of its own. (Snakemake's process calls this and
    write_settings; pathlib and tempfile are imported here, not in every job's client.)"""
    from pathlib import Path

    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    return Path(SETTINGS_FOLDER, f"settings-{digest}.json")


def write_settings(settings: dict) -> Path:
    """Write the settings file of settings_path(settings) (once), readable by this user only."""
    import tempfile

    path = settings_path(settings)
    if path.exists():
        return path
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".partial", delete=False) as handle:
        json.dump(settings, handle, sort_keys=True)  # a NamedTemporaryFile is created 0600
    os.replace(handle.name, path)
    return path


USAGE = "usage: scripts/job.py {preprocess,train,pretrain,predict,export,tune_worker,tune_report,tune_verdict} --log LOG --settings SETTINGS [--text NAME VALUE]... [--value NAME JSON]..."
# Option -> the number of words that follow it. The command is rules/jobs.smk's
# (job_command); a hand-written reader, because importing argparse (and the shutil it pulls
# in) would add to every job's start.
OPTION_WORDS = {"--log": 1, "--settings": 1, "--text": 2, "--value": 2}


def parse_command_line(arguments: list[str]) -> SimpleNamespace:
    """The job's kind, log, settings file and (name, value) pairs of --text and --value."""
    if not arguments or arguments[0] not in JOBS:
        raise SystemExit(f"{USAGE}\nscripts/job.py: the first word must be one of {', '.join(JOBS)}")
    options = SimpleNamespace(kind=arguments[0], log=None, settings=None, text=[], value=[])
    position = 1
    while position < len(arguments):
        option = arguments[position]
        count = OPTION_WORDS.get(option)
        words = arguments[position + 1 : position + 1 + (count or 0)]
        if count is None or len(words) < count:
            raise SystemExit(f"{USAGE}\nscripts/job.py: unexpected or incomplete {option!r}")
        name = option.removeprefix("--")
        if count == 1:
            setattr(options, name, words[0])
        else:
            getattr(options, name).append(tuple(words))
        position += 1 + count
    if options.log is None or options.settings is None:
        raise SystemExit(f"{USAGE}\nscripts/job.py: --log and --settings are required")
    return options


def job_arguments(options: SimpleNamespace) -> tuple[dict, bool]:
    """(keyword arguments of the job's function, warm workers wanted)."""
    with open(options.settings) as settings_file:
        job_kwargs = json.load(settings_file)[options.kind]
    warm = job_kwargs.pop(WARM_KEY)
    job_kwargs.update(options.text)
    for name, value in options.value:
        try:
            job_kwargs[name] = json.loads(value)
        except ValueError:
            raise ValueError(f"scripts/job.py --value {name}: not a JSON value: {value!r}") from None
    return job_kwargs, warm


def open_log(path: str):
    """The job's log, opened for its stderr; SystemExit with one line (to Snakemake's output)
    when it cannot be written or its folder is full, where the line would be lost."""
    from rnnfleet.errors import LOG_ROOM_BYTES, room_left

    try:
        log = open(path, "w", buffering=1)
    except OSError as error:
        raise SystemExit(f"rnnfleet: ERROR: {path}: the job's log cannot be written ({error.strerror})") from None
    room = room_left(os.path.dirname(os.path.abspath(path)))
    if room is not None and room < LOG_ROOM_BYTES:
        log.close()
        raise SystemExit(
            f"rnnfleet: ERROR: {path}: the job's log cannot be written: its file system is full "
            f"({room} bytes left); free some space there or set paths.logs to another folder"
        )
    return log


def main(arguments: list[str]) -> None:
    options = parse_command_line(arguments)
    sys.stderr = open_log(options.log)

    from rnnfleet.errors import job_guard

    target, records_start = JOBS[options.kind]
    # Not the run's watch here (orphans.run_job_guard): the work runs under one of its own,
    # in a warm child or in this process.
    with job_guard(dict(options.text).get("dataset", options.kind)):
        job_kwargs, warm = job_arguments(options)
        if records_start:
            job_kwargs["process_started_at"] = process_started_at()
        run_job(target, job_kwargs, warm=warm)


def run_job(target: str, kwargs: dict, warm: bool) -> None:
    """The job's entry point: in a warm worker when asked for and possible, else here.
    Under SLURM each job runs alone on its allocation, so a server would never be reused."""
    from rnnfleet.runner.warm_client import call

    if warm and "SLURM_JOB_ID" not in os.environ:
        try:
            exit_status = run_warm(target, kwargs, sys.stderr)
        except OSError as error:
            print(f"warm worker unavailable: {error}; running in the job's own process", file=sys.stderr)
        else:
            if exit_status:
                sys.exit(exit_status)
            return
    from rnnfleet.runner.device import prepare_cold_process

    prepare_cold_process()
    call(target, kwargs)


def run_warm(target: str, kwargs: dict, log_file) -> int:
    """The job in a warm worker of the fork path where the platform has one, else of the spawn
    path; returns its exit status, raises OSError where neither can be had."""
    from rnnfleet.runner.warm_client import connection_unsupported_reason

    if connection_unsupported_reason():
        from rnnfleet.runner.spawn_client import run_spawned

        return run_spawned(target, kwargs, log_file)
    from rnnfleet.runner.warm_client import run_forked

    return run_forked(target, kwargs, log_file)


def prestart() -> None:
    """Start this user's warm server of the path this platform takes, without waiting for it
    (a run with trainings calls this when it starts)."""
    from rnnfleet.runner.warm_client import connection_unsupported_reason

    if connection_unsupported_reason():
        from rnnfleet.runner.spawn_client import prestart as prestart_spawned

        prestart_spawned()
    else:
        from rnnfleet.runner.warm_client import prestart as prestart_forked

        prestart_forked()


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
