"""Structured configs of the dynamic_batcher experiments, validated on construction (errors name the field)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import ConfigError
from .workloads import FAMILIES, is_user_workload

SCALE_NAMES = ("sweep", "tiny", "small", "full")


@dataclass
class BenchConfig:
    """One benchmark run over workloads (the ``task`` node of an experiment config)."""

    workloads: list[str] = field(default_factory=lambda: list(FAMILIES))
    """Workload names (dynamic_batcher.workloads.FAMILIES), or your own model as ``"package.module:factory"``
    (dynamic_batcher.workloads.user_workload)."""
    batch: int = 32
    """Instances per minibatch."""
    hidden: int = 128
    """Hidden = embedding size."""
    scale: str = "small"
    """tiny | small | full: repeats, minibatches, RL episodes."""
    threads: int = 1
    """torch threads, equal for every variant."""
    clock: str = "cpu"
    """cpu (process CPU time, steady on a shared machine) or wall."""
    seed: int = 0
    """Seed of instance sampling and exploration."""
    plots: bool = True
    """Write PNG plots."""

    def __post_init__(self):
        p = "task"
        if isinstance(self.workloads, str):
            self.workloads = [self.workloads]
        self.workloads = list(self.workloads)
        if not self.workloads:
            raise ConfigError(f"{p}.workloads", "must name at least one workload")
        for i, w in enumerate(self.workloads):
            if not isinstance(w, str) or (w not in FAMILIES and not is_user_workload(w)):
                raise ConfigError(f"{p}.workloads[{i}]", f"unknown workload {w!r}; expected one of {sorted(FAMILIES)} "
                                  "or your own as 'package.module:factory'")
        for name in ("batch", "hidden", "threads"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"{p}.{name}", f"must be an integer >= 1, got {v!r}")
        if self.scale not in SCALE_NAMES:
            raise ConfigError(f"{p}.scale", f"must be one of {SCALE_NAMES}, got {self.scale!r}")
        if self.clock not in ("cpu", "wall"):
            raise ConfigError(f"{p}.clock", f"must be 'cpu' or 'wall', got {self.clock!r}")


@dataclass
class SweepConfig(BenchConfig):
    """A grid over minibatch size × hidden size."""

    batches: list[int] = field(default_factory=lambda: [8, 32, 128])
    """Minibatch sizes of the grid."""
    hiddens: list[int] = field(default_factory=lambda: [64, 128, 256])
    """Hidden sizes of the grid."""
    grid: str = "cross"
    """``cross``: every batch size at the middle hidden size plus every hidden size at the middle batch size (5
    points for 3 × 3: every value of each axis, within the experiments' time budget); ``full``: the whole grid."""

    def __post_init__(self):
        super().__post_init__()
        if self.grid not in ("cross", "full"):
            raise ConfigError("task.grid", f"must be 'cross' or 'full', got {self.grid!r}")
        for name in ("batches", "hiddens"):
            vals = list(getattr(self, name))
            if not vals:
                raise ConfigError(f"task.{name}", "must not be empty")
            for i, v in enumerate(vals):
                if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                    raise ConfigError(f"task.{name}[{i}]", f"must be an integer >= 1, got {v!r}")
            setattr(self, name, vals)


__all__ = ["BenchConfig", "SweepConfig", "SCALE_NAMES"]
