"""The jobs as the scripts run them (in the job's own process or in a warm worker):
failures explained by errors.job_guard, the train job's retries explained in the log."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from rnnfleet.errors import (
    ATTEMPT_PREFIX,
    ERROR_PREFIX,
    OUT_OF_MEMORY,
    UserError,
    job_guard,
    last_marked_line,
)
from rnnfleet.faults import raise_injected_out_of_memory, raise_injected_train_crash
from rnnfleet.previous_models import drop_backup

# Snakemake deletes a job's log before each attempt; a failed attempt's log is kept here
# for the next attempt, which copies it to the top of its own log.
EARLIER_ATTEMPTS_DIR = Path(".snakemake") / "rnnfleet-attempts"
NOT_RETRIED = " (not retried: more memory would not help)"


def preprocess_job(dataset: str, **preprocess_kwargs) -> None:
    """preprocess_one(**preprocess_kwargs), failing with one line that names the file."""
    with job_guard(dataset):
        from rnnfleet.data import preprocess_one

        preprocess_one(**preprocess_kwargs)


def train_job(attempt: int, log_path: str, device: str, **train_kwargs) -> None:
    """train_one(**train_kwargs) on `device` (train.device: a run-time setting, not a
    hyper-parameter) for Snakemake's attempt number `attempt` (1 = first try).

    A retry follows only an out-of-memory error (or a death without a message, such as a
    kill): a retry of any other error would fail the same way, so it stops at once.
    """
    dataset, gpu_mem_gb = train_kwargs["dataset"], train_kwargs["gpu_mem_gb"]
    train_kwargs["train_hparams"] = {**train_kwargs["train_hparams"], "device": device}
    earlier_attempts_log = EARLIER_ATTEMPTS_DIR / f"{dataset}.log"
    if attempt == 1:
        earlier_attempts_log.unlink(missing_ok=True)  # left by an earlier run
    try:
        with job_guard(dataset, attempt=attempt, gpu_mem_gb=gpu_mem_gb):
            if attempt > 1:
                check_retry_helps(attempt, earlier_attempts_log, gpu_mem_gb)
            raise_injected_out_of_memory(attempt)
            raise_injected_train_crash(dataset)
            from rnnfleet.training import train_one

            train_one(**train_kwargs)
            drop_backup(train_kwargs["model_path"])
    except SystemExit:
        sys.stderr.flush()
        EARLIER_ATTEMPTS_DIR.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log_path, earlier_attempts_log)
        raise
    earlier_attempts_log.unlink(missing_ok=True)


def check_retry_helps(attempt: int, earlier_attempts_log: Path, gpu_mem_gb: int) -> None:
    if earlier_attempts_log.exists():
        print(earlier_attempts_log.read_text(), end="", file=sys.stderr)
    previous = last_marked_line(earlier_attempts_log)
    print(f"{ATTEMPT_PREFIX}{attempt}: Snakemake retries this training with gpu_mem {gpu_mem_gb} GB", file=sys.stderr)
    if previous is None:
        print("the previous attempt ended without an error message (killed?)", file=sys.stderr)
    elif OUT_OF_MEMORY in previous:
        print("the previous attempt ran out of GPU memory", file=sys.stderr)
    elif previous.startswith(ERROR_PREFIX):
        problem = previous[len(ERROR_PREFIX) :]
        raise UserError(problem if problem.endswith(NOT_RETRIED) else problem + NOT_RETRIED)
    else:
        print(f"the previous attempt ended with: {previous}", file=sys.stderr)
