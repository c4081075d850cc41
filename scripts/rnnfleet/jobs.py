"""The train job as scripts/train.py runs it (in the job's own process or in a warm worker):
retries explained in the log, failures explained by errors.job_guard."""

from __future__ import annotations

import sys

from rnnfleet.errors import ATTEMPT_PREFIX, ERROR_PREFIX, OUT_OF_MEMORY, UserError, job_guard, last_marked_line
from rnnfleet.faults import raise_injected_out_of_memory


def train_job(attempt: int, log_path: str, **train_kwargs) -> None:
    """train_one(**train_kwargs) for Snakemake's attempt number `attempt` (1 = first try).

    A retry follows only an out-of-memory error (or a death without a message, such as a
    kill): a retry of any other error would fail the same way, so it stops at once.
    """
    dataset, gpu_mem_gb = train_kwargs["dataset"], train_kwargs["gpu_mem_gb"]
    with job_guard(dataset, attempt=attempt, gpu_mem_gb=gpu_mem_gb):
        if attempt > 1:
            check_retry_helps(attempt, log_path, gpu_mem_gb)
        raise_injected_out_of_memory(attempt)
        from rnnfleet.training import train_one

        train_one(**train_kwargs)


def check_retry_helps(attempt: int, log_path: str, gpu_mem_gb: int) -> None:
    previous = last_marked_line(log_path)  # read before this attempt writes its own lines
    print(f"{ATTEMPT_PREFIX}{attempt}: Snakemake retries this training with gpu_mem {gpu_mem_gb} GB", file=sys.stderr)
    if previous is None:
        print("the previous attempt ended without an error message (killed?)", file=sys.stderr)
    elif OUT_OF_MEMORY in previous:
        print("the previous attempt ran out of GPU memory", file=sys.stderr)
    elif previous.startswith(ERROR_PREFIX):
        raise UserError(f"{previous[len(ERROR_PREFIX) :]} (not retried: more memory would not help)")
