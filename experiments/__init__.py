"""Hydra experiments: configs under experiments/conf, entry point experiments.run."""
