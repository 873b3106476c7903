"""The experiments' side of workloads: :mod:`shared_ir.workload` loads them (so package tasks can too); here the
repository root is added as a search folder for relative graph paths, and :func:`workload_label` names runs."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from shared_ir.workload import WorkloadConfig
from shared_ir.workload import load_workload as _load
from shared_ir.workload import resolve_path as _resolve

if TYPE_CHECKING:  # pragma: no cover
    from shared_ir import Graph

REPO_ROOT = Path(__file__).resolve().parent.parent


def resolve_path(path: str) -> Path:
    """A workload file path: absolute as is; relative, from the working directory, then from the repo root."""
    return _resolve(path, (REPO_ROOT,))


def load_workload(cfg: Mapping[str, Any] | WorkloadConfig | None) -> "Graph":
    """shared_ir's loader (:func:`shared_ir.workload.load_workload`) with the repository root as a search
    folder, since the experiments' configs name graph files relative to it."""
    return _load(cfg, (REPO_ROOT,))


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
