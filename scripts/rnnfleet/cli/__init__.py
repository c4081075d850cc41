"""The `rnnfleet` command: `rnnfleet.cli.commands` (init, run, inspect, clean, and the door to
predict and export, whose options are `rnnfleet.cli.predict` and `rnnfleet.cli.export`)."""

from rnnfleet.cli.commands import main

__all__ = ["main"]
