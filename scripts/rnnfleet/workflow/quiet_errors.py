"""One line per failed job: Snakemake's own report of a failed job (its `RuleException`
block and its `Error in rule ...` block, with the job's shell command) is left out where the
job's log ends in rnnfleet's ERROR or STOPPED line. The job printed that line already, and it
names the file and the problem; the blocks add only the command. A job that ended without
such a line (killed, or a crash before rnnfleet's error handling) keeps Snakemake's report."""

from __future__ import annotations

import logging
import re

from rnnfleet.errors import last_marked_line

# The job's log in its command line (scripts/job.py --log PATH), as a RuleException quotes it.
_LOG_ARGUMENT = re.compile(r"scripts[\\/]job\.py \S+ --log (\S+)")


def job_log_of(record: logging.LogRecord) -> str | None:
    """The log of the failed job a Snakemake error record reports, or None for any other record."""
    event = getattr(record, "event", None)  # Snakemake's LogEvent, a StrEnum
    if event == "job_error":
        logs = getattr(record, "log", None) or []
        return str(logs[0]).split()[0] if logs else None
    if event == "error" and getattr(record, "exception", None) == "RuleException":
        found = _LOG_ARGUMENT.search(str(record.msg))
        return found.group(1).strip("'\"") if found else None
    return None


class QuietAfterErrorLine(logging.Filter):
    """See the module doc: a filter for Snakemake's logger, in the Snakemake process."""

    def filter(self, record: logging.LogRecord) -> bool:
        log_path = job_log_of(record)
        return log_path is None or last_marked_line(log_path) is None
