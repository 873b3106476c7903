"""Structured configs of the experiment runner: the run itself, the workload group and the ir_summary task.

Each dataclass validates in ``__post_init__`` and raises :class:`ExperimentConfigError` naming the full field path
(``workload.batch must be >= 1, got 0``), so a bad override fails before any heavy work starts.
Deliberately light: no torch/tvm, and shared_ir is imported lazily so ``--help`` stays fast.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Optional, Union

WORKLOAD_SOURCES = ("zoo", "file", "hf", "python")
GRAPH_SUFFIXES = (".yaml", ".yml", ".json", ".onnx")


class ExperimentConfigError(ValueError):
    """An invalid experiment/workload/task config. ``path`` is the dotted field path, ``value`` the bad value."""

    def __init__(self, path: str, problem: str, value: object = None):
        self.path, self.problem, self.value = path, problem, value
        super().__init__(f"{path} {problem}" if path else problem)


def _is_missing(v: Any) -> bool:
    # OmegaConf's mandatory marker survives to_container(..., throw_on_missing=False) as the string "???"
    return v is None or v == "???"


def _missing_paths(v: Any, path: str) -> list[str]:
    """Paths of mandatory values (``???``) left unset in a plain config tree."""
    if isinstance(v, Mapping):
        return [p for k, x in v.items() for p in _missing_paths(x, f"{path}.{k}")]
    if isinstance(v, list):
        return [p for i, x in enumerate(v) for p in _missing_paths(x, f"{path}[{i}]")]
    return [path] if v == "???" else []


def _check_unknown(cls: type, data: Mapping[str, Any], path: str) -> None:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ExperimentConfigError(path, f"has unknown fields {unknown}; expected some of {sorted(known)}", unknown)


@dataclass
class WorkloadConfig:
    """One workload (config group ``workload``): a zoo model by name, or a graph file."""

    source: str = "zoo"
    """``zoo`` (a model of :mod:`shared_ir.zoo`, traced with random weights), ``file`` (a graph file), ``hf`` (a
    Hugging Face model type built from ``config``, random weights) or ``python`` (``target``, the user's code)."""
    name: Optional[str] = None
    """Zoo model name (``source: zoo``), e.g. ``resnet18``; Hugging Face model type (``source: hf``), e.g. ``gpt2``,
    ``llama``, ``bert``, ``vit``, ``t5``, ``whisper``; for files and ``python``, an optional display name."""
    batch: int = 1
    """Batch size the model is traced at."""
    path: Optional[str] = None
    """Graph file (``source: file``): shared_ir YAML/JSON (``Graph.save``) or ONNX (``.onnx``). Relative paths are
    taken from the working directory, then from the repository root."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments of ``shared_ir.zoo.graph`` (e.g. ``seq`` for transformers, ``img`` for vision models),
    or of the ``python`` target."""
    config: dict[str, Any] = field(default_factory=dict)
    """Fields of the Hugging Face config (``source: hf``), e.g. ``workload.config.n_layer=2``."""
    seq: int = 128
    """Sequence length of text models (``source: hf``)."""
    target: Optional[str] = None
    """``module:function`` (``source: python``): called with ``kwargs``, it returns a ``shared_ir.Graph`` or
    ``(torch module, example inputs)`` (imported with torch.export)."""

    def __post_init__(self) -> None:
        p = "workload"
        if self.source not in WORKLOAD_SOURCES:
            raise ExperimentConfigError(f"{p}.source", f"must be one of {list(WORKLOAD_SOURCES)}, got {self.source!r}",
                                        self.source)
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1:
            raise ExperimentConfigError(f"{p}.batch", f"must be an integer >= 1, got {self.batch!r}", self.batch)
        for k in ("kwargs", "config"):
            v = getattr(self, k)
            if not isinstance(v, Mapping):
                raise ExperimentConfigError(f"{p}.{k}", f"must be a mapping, got {v!r}", v)
            setattr(self, k, dict(v))
        if isinstance(self.seq, bool) or not isinstance(self.seq, int) or self.seq < 1:
            raise ExperimentConfigError(f"{p}.seq", f"must be an integer >= 1, got {self.seq!r}", self.seq)
        if self.source == "python":
            if _is_missing(self.target) or ":" not in str(self.target):
                raise ExperimentConfigError(f"{p}.target", "is required for source=python as module:function "
                                            "(e.g. workload.target=my_models:build)", self.target)
            self.name = None if _is_missing(self.name) else self.name
        elif self.source in ("zoo", "hf"):
            if _is_missing(self.name) or not str(self.name).strip():
                raise ExperimentConfigError(f"{p}.name", f"is required for source={self.source} "
                                            f"(e.g. workload.name={'resnet18' if self.source == 'zoo' else 'gpt2'})",
                                            self.name)
        else:
            if _is_missing(self.path) or not str(self.path).strip():
                raise ExperimentConfigError(f"{p}.path", "is required for source=file "
                                            "(e.g. workload=file workload.path=model.onnx)", self.path)
            if not str(self.path).lower().endswith(GRAPH_SUFFIXES):
                raise ExperimentConfigError(f"{p}.path", f"must end with one of {list(GRAPH_SUFFIXES)}, "
                                            f"got {self.path!r}", self.path)
            if _is_missing(self.name):
                self.name = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "WorkloadConfig":
        if data is None:
            raise ExperimentConfigError("workload", "is not set; pick one with workload=<name> "
                                        "(see experiments/conf/workload/)")
        if not isinstance(data, Mapping):
            raise ExperimentConfigError("workload", f"must be a mapping, got {type(data).__name__}", data)
        _check_unknown(cls, data, "workload")
        return cls(**dict(data))


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
