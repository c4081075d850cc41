"""Snakemake's report of a failed job is left out only where the job's log ends in rnnfleet's line."""

import logging

from rnnfleet.workflow.quiet_errors import QuietAfterErrorLine, job_log_of


def record(event: str, message: str = "", **extra) -> logging.LogRecord:
    made = logging.LogRecord("snakemake.logging", logging.ERROR, __file__, 1, message, None, None)
    made.__dict__.update(event=event, **extra)
    return made


def test_the_blocks_of_a_job_whose_log_ends_in_rnnfleets_line_are_left_out_and_others_kept(tmp_path):
    with_line, without_line = tmp_path / "bad.log", tmp_path / "killed.log"
    with_line.write_text("reading data/BAD.csv\nERROR: data/BAD.csv: not a bar file\n")
    without_line.write_text("epoch 1 val_loss 0.9\n")
    command = "Command 'set -euo pipefail;  python /x/scripts/job.py preprocess --log {} --text dataset BAD'"
    quiet = QuietAfterErrorLine()
    for log, kept in ((with_line, False), (without_line, True)):
        job_error = record("job_error", "Error in rule preprocess, jobid: 2", log=[f"{log} (check log file(s))"])
        rule_exception = record("error", "RuleException:\n" + command.format(log), exception="RuleException")
        assert job_log_of(job_error) == job_log_of(rule_exception) == str(log)
        assert quiet.filter(job_error) is kept and quiet.filter(rule_exception) is kept
    # Every other record passes: a plain error, a workflow error, a job's start.
    for other in (record("error", "WorkflowError: x", exception="WorkflowError"), record("job_info"), record(None)):
        assert job_log_of(other) is None and quiet.filter(other)
