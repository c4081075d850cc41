"""A preprocess or train job: `python scripts/job.py <kind> --log ... ` (rnnfleet.job_client)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rnnfleet.job_client import main  # noqa: E402

main(sys.argv[1:])
