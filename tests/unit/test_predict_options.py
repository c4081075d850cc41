"""The forecast command offers an option for every `format:` setting (a file that needed one
to train can be forecast from the command line too)."""

from __future__ import annotations

import argparse

from rnnfleet.bars.formats import FORMAT_DEFAULTS
from rnnfleet.cli.predict import add_format_options


def test_every_format_setting_has_a_command_line_option():
    parser = argparse.ArgumentParser()
    add_format_options(parser)
    assert set(FORMAT_DEFAULTS) <= set(vars(parser.parse_args([])))
