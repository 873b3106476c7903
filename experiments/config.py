"""Structured configs of the experiment runner: the run itself, the workload group and the ir_summary task.

Each dataclass validates in ``__post_init__`` and raises :class:`ExperimentConfigError` naming the full field path
(``workload.batch must be >= 1, got 0``), so a bad override fails before any heavy work starts.
Deliberately light: no torch/tvm, and shared_ir is imported lazily so ``--help`` stays fast.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

from shared_ir.errors import ConfigFieldError as ExperimentConfigError  # one config-error type, shared_ir's
from shared_ir.workload import WORKLOAD_SOURCES, WorkloadConfig  # noqa: F401  (re-exported)


def _missing_paths(v: Any, path: str) -> list[str]:
    """Paths of mandatory values (``???``) left unset in a plain config tree."""
    if isinstance(v, Mapping):
        return [p for k, x in v.items() for p in _missing_paths(x, f"{path}.{k}")]
    if isinstance(v, list):
        return [p for i, x in enumerate(v) for p in _missing_paths(x, f"{path}[{i}]")]
    return [path] if v == "???" else []


@dataclass
class RunConfig:
    """What ``experiments.run`` needs from the composed config (everything else is the task's business)."""

    task: dict[str, Any]
    """The experiment's task: ``_target_`` names the function, the other keys are its parameters."""
    hardware: Optional[dict[str, Any]] = None
    """The ``hardware`` group as a plain dict (``shared_ir.hardware.load_hardware`` reads it), or None."""
    workload: Optional[dict[str, Any]] = None
    """The ``workload`` group as a plain dict (``experiments.workloads.load_workload`` reads it), or None."""

    def __post_init__(self) -> None:
        if not isinstance(self.task, Mapping):
            raise ExperimentConfigError("task", "must be a mapping with a `_target_` naming a function "
                                        "(pick an experiment with experiment=<name>)", self.task)
        target = self.task.get("_target_")
        if not isinstance(target, str) or "." not in target:
            raise ExperimentConfigError("task._target_", "must be a dotted function path such as "
                                        f"'experiments.ir_summary.run', got {target!r}", target)
        reserved = sorted({"hardware", "workload", "out_dir"} & set(self.task))
        if reserved:
            raise ExperimentConfigError(f"task.{reserved[0]}", "is passed by the runner; configure it through the "
                                        f"top-level `{reserved[0]}` group instead", reserved)
        for name in ("hardware", "workload"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, Mapping):
                raise ExperimentConfigError(name, f"must be a mapping or null, got {type(v).__name__}", v)
            missing = _missing_paths(v, name)
            if missing:
                raise ExperimentConfigError(missing[0], f"is required (set it on the command line, e.g. "
                                            f"{missing[0]}=...)", "???")

    @property
    def target(self) -> str:
        return self.task["_target_"]


@dataclass
class IrSummaryConfig:
    """Parameters of ``experiment=ir_summary`` (the ``task`` node besides ``_target_``)."""

    device: Optional[Union[str, int]] = None
    """Device of the system to model (its name, or an index into host+devices); null: the system's primary
    device (its first accelerator/GPU, else the host CPU)."""
    level: Optional[Union[str, int]] = None
    """Memory level the memory-bound time refers to (its name, or an index; null: the outermost, DRAM)."""
    top: int = 20
    """Rows of the printed table (slowest ops first); the CSV always has every op."""
    plot: bool = True
    """Write the roofline plot (PNG)."""
    csv_name: str = "ir_summary.csv"
    """File name of the per-op table under the output directory."""
    png_name: str = "roofline.png"
    """File name of the roofline plot under the output directory."""

    def __post_init__(self) -> None:
        p = "task"
        if isinstance(self.top, bool) or not isinstance(self.top, int) or self.top < 0:
            raise ExperimentConfigError(f"{p}.top", f"must be an integer >= 0, got {self.top!r}", self.top)
        if not isinstance(self.plot, bool):
            raise ExperimentConfigError(f"{p}.plot", f"must be true or false, got {self.plot!r}", self.plot)
        if self.device is not None and not isinstance(self.device, (str, int)):
            raise ExperimentConfigError(f"{p}.device", f"must be a device name or index, got {self.device!r}",
                                        self.device)
        if self.level is not None and not isinstance(self.level, (str, int)):
            raise ExperimentConfigError(f"{p}.level", f"must be a memory level name or index, got {self.level!r}",
                                        self.level)
        for f in ("csv_name", "png_name"):
            v = getattr(self, f)
            if not isinstance(v, str) or not v or "/" in v:
                raise ExperimentConfigError(f"{p}.{f}", f"must be a plain file name, got {v!r}", v)


__all__ = ["ExperimentConfigError", "WorkloadConfig", "RunConfig", "IrSummaryConfig", "WORKLOAD_SOURCES"]
