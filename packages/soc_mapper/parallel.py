"""Fitness evaluation backends for DEAP's ``toolbox.map`` and atomic GA checkpoints.

``serial`` maps in-process; ``process`` uses a local ``multiprocessing`` pool whose workers receive the
evaluation context once (initializer), so each task ships only a chromosome; ``ray`` uses Ray tasks with the
context put in the object store once (Ray is optional: imported here only, with a clear error if missing).
All backends return results in input order, so runs stay deterministic under a seed.
"""
from __future__ import annotations

import os
import pickle
from typing import Any, Callable, Iterable

from shared_ir import atomic_write_bytes

from .errors import CheckpointError, MapperError

_WORKER: tuple[Callable, Any] | None = None


def _init(fn: Callable, ctx: Any) -> None:
    global _WORKER
    _WORKER = (fn, ctx)


def _call(genome: Any) -> Any:
    fn, ctx = _WORKER  # type: ignore[misc]
    return fn(ctx, genome)


class Evaluator:
    """A ``map`` for DEAP: ``toolbox.register("map", evaluator.map)``; use as a context manager."""

    def __init__(self, fn: Callable[[Any, Any], Any], ctx: Any, executor: str = "serial", workers: int = 2):
        self.fn, self.ctx, self.executor, self.workers = fn, ctx, executor, workers
        self._pool = None
        self._ray = None
        if executor == "process" and workers > 1:
            import multiprocessing as mp

            method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
            self._pool = mp.get_context(method).Pool(workers, initializer=_init, initargs=(fn, ctx))
        elif executor == "ray":
            try:
                import ray  # optional: clusters
            except ImportError:
                raise MapperError("ga.executor", "executor 'ray' needs the ray package (pip install 'ray[default]'"
                                                 " or the project's 'ray' extra); use 'process' locally") from None
            if not ray.is_initialized():
                ray.init(ignore_reinit_error=True, include_dashboard=False)
            ctx_ref = ray.put(ctx)

            @ray.remote
            def _remote(c, g):
                return fn(c, g)

            self._ray = (ray, _remote, ctx_ref)
        elif executor not in ("serial", "process"):
            raise MapperError("ga.executor", f"unknown executor {executor!r}", executor)

    def map(self, _fn_ignored: Callable | None, genomes: Iterable[Any]) -> list[Any]:
        """``toolbox.map(toolbox.evaluate, population)``: the evaluate function is fixed at construction."""
        genomes = [list(g) if isinstance(g, list) else g for g in genomes]
        if self._pool is not None:
            return self._pool.map(_call, genomes, chunksize=1)
        if self._ray is not None:
            ray, remote, ref = self._ray
            return ray.get([remote.remote(ref, g) for g in genomes])
        return [self.fn(self.ctx, g) for g in genomes]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool.join()
            self._pool = None

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None




def save_checkpoint(path: str, state: dict) -> None:
    atomic_write_bytes(path, pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))


def load_checkpoint(path: str, fingerprint: str) -> dict | None:
    """The saved state, or None if there is no file; a checkpoint of another problem is an error."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, "rb") as f:
            state = pickle.load(f)
    except Exception as e:  # a corrupt file cannot come from our atomic writes; say which file
        raise CheckpointError(f"checkpoint({path})", f"cannot be read: {e}") from None
    if state.get("fingerprint") != fingerprint:
        raise CheckpointError(f"checkpoint({path})", "belongs to another workload/SoC/config; delete it or "
                                                     "choose another path", state.get("fingerprint"))
    return state
