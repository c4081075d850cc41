"""Prints gc's first threshold and its count of frozen objects once rnnfleet's Snakemake
speed-ups are applied (argv[1]: the scripts folder); for tests/workflow/test_speedups_run.py."""

import gc
import sys

sys.path.insert(0, sys.argv[1])
from rnnfleet.hooks import left_out
from rnnfleet.hooks.snakemake_speedups import apply

apply(left_out())  # the bench switch: RNNFLEET_SNAKEMAKE_PATCHES_OFF
print(gc.get_threshold()[0], gc.get_freeze_count())
