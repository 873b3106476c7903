"""Baselines, each named after the paper or code it follows (see each module)."""
