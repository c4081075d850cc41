"""A job's process as scripts/job.py runs one (rnnfleet.runner.job_client.main): its stderr to
job.log in the working folder, then run_job(TARGET, KWARGS, warm=True); for
tests/workflow/test_warm.py. TARGET may name a function of a module in this folder, which is on
sys.path (warm_targets.py). Arguments: TARGET KWARGS_AS_JSON"""

import json
import os
import sys

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "scripts")))
sys.stderr = open("job.log", "w", buffering=1)
from rnnfleet.runner.job_client import run_job

run_job(sys.argv[1], json.loads(sys.argv[2]), warm=True)
