"""Hydra config tree of the experiments (a package so `pkg://experiments.conf` resolves when the runner is
imported rather than run with -m)."""
