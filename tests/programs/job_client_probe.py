"""A job's process as scripts/job.py starts it (rnnfleet.runner.job_client.main with the command
line), which writes the names of every module it imported to modules.json in its working
folder as it exits; for tests/workflow/test_job_client.py."""

import atexit
import json
import os
import sys

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "scripts")))
atexit.register(lambda: json.dump(sorted(sys.modules), open("modules.json", "w")))
from rnnfleet.runner.job_client import main

main(sys.argv[1:])
