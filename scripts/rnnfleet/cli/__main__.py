"""python -m rnnfleet.cli: the `rnnfleet` command (rnnfleet.cli.commands.main)."""

import sys

from rnnfleet.cli.commands import main

sys.exit(main())
