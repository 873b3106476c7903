"""Turn a ``workload`` config (a zoo model by name, or a graph file) into a :class:`shared_ir.Graph`.

Every experiment that takes a workload goes through :func:`load_workload`, so ``workload=<zoo model>`` and
``workload=file workload.path=<graph.yaml|graph.json|model.onnx>`` work everywhere. torch/onnx are imported only
when a zoo model is traced or an ONNX file is read.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from .config import ExperimentConfigError, WorkloadConfig

if TYPE_CHECKING:  # pragma: no cover
    from shared_ir import Graph

REPO_ROOT = Path(__file__).resolve().parent.parent


def resolve_path(path: str) -> Path:
    """A workload file path: absolute as is; relative, from the working directory, then from the repo root
    (Hydra may run from elsewhere; configs name files relative to the repo)."""
    p = Path(os.path.expanduser(path))
    if p.is_absolute():
        candidates = [p]
    else:
        candidates = [Path.cwd() / p, REPO_ROOT / p]
    for c in candidates:
        if c.is_file():
            return c
    raise ExperimentConfigError("workload.path", f"file not found: {path!r} (looked in "
                                f"{', '.join(str(c.parent) for c in candidates)})", path)


def load_workload(cfg: Mapping[str, Any] | WorkloadConfig | None) -> "Graph":
    """The graph of a workload config: ``{source: zoo, name, batch, kwargs}`` or ``{source: file, path}``.

    Raises :class:`ExperimentConfigError` for a bad config or missing file, and whatever the IR raises for a
    malformed graph (a ``shared_ir.ValidationError`` naming the field) or an unsupported model.
    """
    wl = cfg if isinstance(cfg, WorkloadConfig) else WorkloadConfig.from_dict(cfg)
    if wl.source == "zoo":
        from shared_ir import zoo

        models = getattr(zoo, "MODELS", None)
        if models is not None and wl.name not in models:
            raise ExperimentConfigError("workload.name", f"unknown zoo model {wl.name!r}; expected one of "
                                        f"{sorted(models)}", wl.name)
        return zoo.graph(wl.name, batch=wl.batch, **wl.kwargs)

    if wl.source == "hf":
        from shared_ir.errors import ValidationError
        from shared_ir.frontends.hf import from_hf

        try:
            return from_hf(wl.name, wl.config, wl.batch, wl.seq)
        except ValidationError as e:
            raise ExperimentConfigError(f"workload.{e.path}", str(e)[len(e.path) + 2:], e.value) from None
    if wl.source == "python":
        return _python_workload(wl)
    path = resolve_path(wl.path)
    if path.suffix.lower() == ".onnx":
        from shared_ir.frontends.onnx_frontend import from_onnx

        g = from_onnx(str(path))
    else:
        from shared_ir import Graph

        g = Graph.load(str(path))
    if wl.name:
        g.name = wl.name
    return g


def _python_workload(wl: WorkloadConfig) -> "Graph":
    """``module:function`` called with ``kwargs``: a Graph as it is, ``(module, inputs)`` through torch.export."""
    import importlib
    import sys

    from shared_ir import Graph

    mod_name, fn_name = str(wl.target).split(":", 1)
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # the user's module beside where they run the experiment
    try:
        fn = getattr(importlib.import_module(mod_name), fn_name)
    except (ImportError, AttributeError) as e:
        raise ExperimentConfigError("workload.target", f"cannot load {wl.target!r}: {e}", wl.target) from None
    out = fn(**wl.kwargs)
    if isinstance(out, Graph):
        g = out
    elif isinstance(out, tuple) and len(out) == 2:
        from shared_ir.frontends import from_torch_export

        g = from_torch_export(out[0], out[1], name=wl.name or fn_name)
    else:
        raise ExperimentConfigError("workload.target", f"{wl.target} returned {type(out).__name__}; expected a "
                                    "shared_ir.Graph or (torch module, example inputs)", wl.target)
    if wl.name:
        g.name = wl.name
    return g


def workload_label(cfg: Mapping[str, Any] | None) -> str:
    """A short name for tables and file names: the zoo name (with batch if > 1) or the file's stem."""
    if not cfg:
        return "none"
    if cfg.get("source", "zoo") in ("zoo", "hf"):
        b = cfg.get("batch", 1)
        return f"{cfg.get('name')}" + (f"_b{b}" if b and b != 1 else "")
    if cfg.get("source") == "python":
        return str(cfg.get("name") or str(cfg.get("target")).split(":")[-1])
    return str(cfg.get("name") or Path(str(cfg.get("path"))).stem)


__all__ = ["load_workload", "resolve_path", "workload_label"]
