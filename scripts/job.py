"""A job of the job client (preprocess, train, pretrain, predict, export): `python scripts/job.py <kind> --log ... ` (rnnfleet.runner.job_client)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

from rnnfleet.runner.job_client import main  # noqa: E402

main(sys.argv[1:])
