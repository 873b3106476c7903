"""A workload: a zoo model by name, a graph file, a Hugging Face model type built from its config, or the user's own
code, turned into a :class:`shared_ir.Graph`.

The experiments' ``workload`` config group and every package task that takes a graph go through
:func:`load_workload`, so ``workload=<zoo model>``, ``workload=file workload.path=<graph.yaml|model.onnx>``,
``workload=hf workload.name=gpt2`` and ``workload=python workload.target=my_module:build`` work everywhere.
torch/onnx/transformers are imported only when a model is traced or a file is read.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from .errors import ConfigFieldError

if TYPE_CHECKING:  # pragma: no cover
    from .graph import Graph

WORKLOAD_SOURCES = ("zoo", "file", "hf", "python")
GRAPH_SUFFIXES = (".yaml", ".yml", ".json", ".onnx")


def _is_missing(v: Any) -> bool:
    # OmegaConf's mandatory marker survives to_container(..., throw_on_missing=False) as the string "???"
    return v is None or v == "???"


def _check_unknown(cls: type, data: Mapping[str, Any], path: str) -> None:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigFieldError(path, f"has unknown fields {unknown}; expected some of {sorted(known)}", unknown)


@dataclass
class WorkloadConfig:
    """One workload (config group ``workload``): a zoo model, a graph file, a Hugging Face model type or the
    user's code (``source``)."""

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
    taken from the working directory, then from the loader's ``search_dirs`` (the experiments: the repository
    root)."""
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
            raise ConfigFieldError(f"{p}.source", f"must be one of {list(WORKLOAD_SOURCES)}, got {self.source!r}",
                                   self.source)
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1:
            raise ConfigFieldError(f"{p}.batch", f"must be an integer >= 1, got {self.batch!r}", self.batch)
        for k in ("kwargs", "config"):
            v = getattr(self, k)
            if not isinstance(v, Mapping):
                raise ConfigFieldError(f"{p}.{k}", f"must be a mapping, got {v!r}", v)
            setattr(self, k, dict(v))
        if isinstance(self.seq, bool) or not isinstance(self.seq, int) or self.seq < 1:
            raise ConfigFieldError(f"{p}.seq", f"must be an integer >= 1, got {self.seq!r}", self.seq)
        if self.source == "python":
            if _is_missing(self.target) or ":" not in str(self.target):
                raise ConfigFieldError(f"{p}.target", "is required for source=python as module:function "
                                       "(e.g. workload.target=my_models:build)", self.target)
            self.name = None if _is_missing(self.name) else self.name
        elif self.source in ("zoo", "hf"):
            if _is_missing(self.name) or not str(self.name).strip():
                raise ConfigFieldError(f"{p}.name", f"is required for source={self.source} "
                                       f"(e.g. workload.name={'resnet18' if self.source == 'zoo' else 'gpt2'})",
                                       self.name)
        else:
            if _is_missing(self.path) or not str(self.path).strip():
                raise ConfigFieldError(f"{p}.path", "is required for source=file "
                                       "(e.g. workload=file workload.path=model.onnx)", self.path)
            if not str(self.path).lower().endswith(GRAPH_SUFFIXES):
                raise ConfigFieldError(f"{p}.path", f"must end with one of {list(GRAPH_SUFFIXES)}, "
                                       f"got {self.path!r}", self.path)
            if _is_missing(self.name):
                self.name = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "WorkloadConfig":
        if data is None:
            raise ConfigFieldError("workload", "is not set; pick one with workload=<name> "
                                   "(see experiments/conf/workload/)")
        if not isinstance(data, Mapping):
            raise ConfigFieldError("workload", f"must be a mapping, got {type(data).__name__}", data)
        _check_unknown(cls, data, "workload")
        return cls(**dict(data))


def resolve_path(path: str, search_dirs: Sequence[str | os.PathLike] = ()) -> Path:
    """A workload file path: absolute as is; relative, from the working directory, then from each of
    ``search_dirs`` (Hydra may run from elsewhere; the experiments name files relative to their repository)."""
    p = Path(os.path.expanduser(path))
    candidates = [p] if p.is_absolute() else [Path.cwd() / p] + [Path(d) / p for d in search_dirs]
    for c in candidates:
        if c.is_file():
            return c
    raise ConfigFieldError("workload.path", f"file not found: {path!r} (looked in "
                           f"{', '.join(str(c.parent) for c in candidates)})", path)


def load_workload(cfg: Mapping[str, Any] | WorkloadConfig | None,
                  search_dirs: Sequence[str | os.PathLike] = ()) -> "Graph":
    """The graph of a workload config (``source`` zoo, file, hf or python; see :class:`WorkloadConfig`); a
    relative file path is looked up from the working directory, then from ``search_dirs``.

    Raises :class:`ConfigFieldError` for a bad config or missing file, and whatever the IR raises for a
    malformed graph (a ``shared_ir.ValidationError`` naming the field) or an unsupported model.
    """
    wl = cfg if isinstance(cfg, WorkloadConfig) else WorkloadConfig.from_dict(cfg)
    if wl.source == "zoo":
        from . import zoo

        models = getattr(zoo, "MODELS", None)
        if models is not None and wl.name not in models:
            raise ConfigFieldError("workload.name", f"unknown zoo model {wl.name!r}; expected one of "
                                   f"{sorted(models)}", wl.name)
        return zoo.graph(wl.name, batch=wl.batch, **wl.kwargs)

    if wl.source == "hf":
        from .errors import ValidationError
        from .frontends.hf import from_hf

        try:
            return from_hf(wl.name, wl.config, wl.batch, wl.seq)
        except ValidationError as e:
            raise ConfigFieldError(f"workload.{e.path}", str(e)[len(e.path) + 2:], e.value) from None
    if wl.source == "python":
        return _python_workload(wl)
    path = resolve_path(wl.path, search_dirs)
    if path.suffix.lower() == ".onnx":
        from .frontends.onnx_frontend import from_onnx

        g = from_onnx(str(path))
    else:
        from .graph import Graph

        g = Graph.load(str(path))
    if wl.name:
        g.name = wl.name
    return g


def _python_workload(wl: WorkloadConfig) -> "Graph":
    """``module:function`` called with ``kwargs``: a Graph as it is, ``(module, inputs)`` through torch.export."""
    import importlib
    import sys

    from .graph import Graph

    mod_name, fn_name = str(wl.target).split(":", 1)
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # the user's module beside where they run the experiment
    try:
        fn = getattr(importlib.import_module(mod_name), fn_name)
    except (ImportError, AttributeError) as e:
        raise ConfigFieldError("workload.target", f"cannot load {wl.target!r}: {e}", wl.target) from None
    out = fn(**wl.kwargs)
    if isinstance(out, Graph):
        g = out
    elif isinstance(out, tuple) and len(out) == 2:
        from .frontends import from_torch_export

        g = from_torch_export(out[0], out[1], name=wl.name or fn_name)
    else:
        raise ConfigFieldError("workload.target", f"{wl.target} returned {type(out).__name__}; expected a "
                               "shared_ir.Graph or (torch module, example inputs)", wl.target)
    if wl.name:
        g.name = wl.name
    return g



__all__ = ["WorkloadConfig", "load_workload", "resolve_path", "WORKLOAD_SOURCES", "GRAPH_SUFFIXES"]
