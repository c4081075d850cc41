"""Scores on the test period: skill and its interval, forecast intervals, multiple testing across the fleet."""
