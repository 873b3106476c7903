"""A compiled frontier simulator: the same semantics as :class:`dynamic_batcher.policies.Sim`, in C.

Why: scheduling a 4k-node minibatch in the Python simulator costs ~0.3 µs per node and edge (1-3 ms per flush),
which is 15-30 % of the batched execution time at batch 32, hidden 128; the issue asks for < 10 %. The policies'
decisions stay in Python (one call per batch, tens to hundreds per minibatch); the per-node work (in-degree
decrements, frontier pushes, per-type frontier maxima of height and depth) runs here. Every policy that runs on the
simulator uses it (the FSM, the critical-path heuristic and the DyNet agenda baselines alike), so the comparison
stays fair. The schedule it produces is identical to the Python simulator's (tests compare them node by node).

The kernel is plain C (``fastsim.c`` next to this module) compiled once with ``$CC`` (default ``cc``) by
:func:`shared_ir.cbuild.build_shared` and cached under ``$DYNAMIC_BATCHER_CACHE`` (default
``~/.cache/dynamic_batcher``); without a compiler (or with ``DYNAMIC_BATCHER_FASTSIM=0``) :func:`available` is
False and the policies use the Python simulator.

Layout: per type t a segment ``seg[off[t]:off[t]+cnt[t]]`` of the nodes of type t in the order they become ready;
the frontier of t is ``seg[head[t]:tail[t]]`` (a batch takes all of it, so every node enters and leaves exactly
once). Type 0 (unbatchable) uses its segment as the FIFO queue. Batches are appended to ``out`` in schedule order
with their end offsets in ``bend`` — exactly the flat arrays the execution planner consumes.
"""
from __future__ import annotations

import ctypes
import math
import os
import platform
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

_SRC = Path(__file__).with_name("fastsim.c")

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_error: Optional[str] = None


def _cache_dir() -> Path:
    return Path(os.environ.get("DYNAMIC_BATCHER_CACHE", Path.home() / ".cache" / "dynamic_batcher"))


def _build() -> Path:
    """The simulator's shared object (compiled once per source, compiler and Python version; see shared_ir.cbuild)."""
    import sysconfig

    from shared_ir.cbuild import build_shared

    inc = sysconfig.get_paths().get("include", "")
    # with Python.h the simulator reads the recorder's lists directly; without it (no headers) the array API only
    return build_shared(_SRC, _cache_dir(), flag_sets=(["-O2", "-DDB_PYLIST", f"-I{inc}"], ["-O2"]),
                        extra_key=platform.python_version())


def load() -> Optional[ctypes.CDLL]:
    """The compiled simulator library, or None when disabled or no C compiler works (then the Python one runs)."""
    global _lib, _lib_error
    if _lib is not None or _lib_error is not None:
        return _lib
    with _lock:
        if _lib is not None or _lib_error is not None:
            return _lib
        if os.environ.get("DYNAMIC_BATCHER_FASTSIM", "1") == "0":
            _lib_error = "disabled by DYNAMIC_BATCHER_FASTSIM=0"
            return None
        from shared_ir.cbuild import CompileError

        try:
            so = _build()
            # PyDLL: calls keep the GIL (they are short, and dbs_new_py reads Python lists)
            lib = ctypes.PyDLL(str(so))
            P, I, O = ctypes.c_void_p, ctypes.c_int, ctypes.py_object
            sig = {"dbs_new": ([I, I, P, P, P], P), "dbs_free": ([P], None), "dbs_heights": ([P, P], None),
                   "dbs_depths": ([P, P], None), "dbs_start": ([P], None), "dbs_drain": ([P], I),
                   "dbs_step": ([P, I], I), "dbs_ready": ([P, P], I), "dbs_count": ([P, I], I),
                   "dbs_mind": ([P, I], I), "dbs_frontier": ([P, I, P], I),
                   "dbs_result": ([P, P, P], I), "dbs_executed": ([P], I), "dbs_nbatches": ([P], I),
                   "dbs_resolve": ([I, I] + [P] * 17, I),
                   "dbs_ngroups": ([P], I), "dbs_nslots": ([P], I), "dbs_next": ([P, I, P], I),
                   "dbs_cp": ([P], I), "dbs_last": ([P, P], I), "dbs_bend": ([P, P], None),
                   "dbs_firsts": ([P, P], None), "dbs_resolve_blk": ([P, P, P, I, I, P], I),
                   "dbs_beam": ([P, I, I, P, I], I),
                   "dbs_search": ([P, I, I, I, P], I), "dbs_run_cp": ([P], I),
                   "dbs_clone": ([P], P)}
            for name, (args, res) in sig.items():
                f = getattr(lib, name)
                f.argtypes, f.restype = args, res
            lib.dbs_loc.argtypes, lib.dbs_loc.restype = [P, I, I], ctypes.c_longlong
            if hasattr(lib, "dbs_new_py"):
                lib.dbs_new_py.argtypes, lib.dbs_new_py.restype = [I, I, O, O, O, I], P
                lib.dbs_steps_py.argtypes, lib.dbs_steps_py.restype = [P, O, O, O], O
                L = ctypes.c_longlong
                lib.dbx_gather.argtypes, lib.dbx_gather.restype = [O, P, P, P, I, I, P, L, L, I], L
                lib.pylist = True
            else:
                lib.pylist = False
            _lib = lib
        except (OSError, CompileError, AttributeError) as e:
            _lib_error = str(e)
        return _lib


def available() -> bool:
    return load() is not None


def _arrays(g: Any):
    """(types int32, arity int32, argflat int64 pairs) of a graph view, zero-copy for recorded graphs."""
    import numpy as np

    dyn = getattr(g, "dyn", None)
    if dyn is not None:
        return dyn.np_types(), dyn.np_arity(), dyn.np_argflat()
    types = np.asarray(g.types, dtype=np.int32)
    arity = np.fromiter(map(len, g.preds), dtype=np.int32, count=g.n)
    flat = np.zeros(2 * int(arity.sum()), dtype=np.int64)
    flat[0::2] = [p for ps in g.preds for p in ps]
    return types, arity, flat


class FastSim:
    """Frontier state in C. ``heights`` / ``depths``: maintain the per-type frontier max height / min depth.
    Buffers are ctypes arrays (slicing one returns a Python list without numpy calls: a flush makes few calls,
    and on caches left cold by the kernels each numpy call costs several µs)."""

    __slots__ = ("lib", "h", "g", "n", "_buf", "nt", "_nodebuf", "dyn_ref")

    def __init__(self, g: Any, heights: bool = False, depths: bool = False):
        lib = load()
        if lib is None:
            raise RuntimeError(f"dynamic_batcher.fastsim: unavailable ({_lib_error})")
        self.lib, self.g, self.n = lib, g, g.n
        self.nt = g.ntypes
        dyn = getattr(g, "dyn", None)
        # a weak reference: a cached schedule must not keep the recorded graph (and its results) alive
        self.dyn_ref = weakref.ref(dyn) if dyn is not None else (lambda: None)
        self.h = None
        if dyn is not None and lib.pylist and type(dyn.argflat) is list and type(dyn.type) is list:
            self.h = lib.dbs_new_py(g.n, g.ntypes, dyn.type, dyn.arity, dyn.argflat,
                                    (1 if heights else 0) | (2 if depths else 0) | 4)
        if not self.h:
            types, arity, flat = _arrays(g)
            self.h = lib.dbs_new(g.n, g.ntypes, types.ctypes.data, arity.ctypes.data, flat.ctypes.data)
            if not self.h:
                from .errors import BatcherError

                raise BatcherError("fastsim: inconsistent graph arrays (a type id out of range or an argument "
                                   "that is not an earlier node)")
            if heights:
                lib.dbs_heights(self.h, None)
            if depths:
                lib.dbs_depths(self.h, None)
            lib.dbs_start(self.h)
        self._buf = (ctypes.c_int32 * max(1, g.ntypes))()
        self._nodebuf = None

    def __del__(self):
        h = getattr(self, "h", None)
        if h:
            self.lib.dbs_free(h)
            self.h = None

    def drain(self) -> int:
        return self.lib.dbs_drain(self.h)

    def ready(self) -> list[int]:
        k = self.lib.dbs_ready(self.h, self._buf)
        return self._buf[:k]

    def step(self, t: int) -> int:
        return self.lib.dbs_step(self.h, t)

    def next(self, t: int) -> list[int] | None:
        """Run type t (-1: nothing), drain the unbatchable nodes, return the ready types (None: t was empty)."""
        k = self.lib.dbs_next(self.h, t, self._buf)
        return None if k < 0 else self._buf[:k]

    def cp(self) -> int:
        """The critical-path choice among the ready types."""
        return self.lib.dbs_cp(self.h)

    def count(self, t: int) -> int:
        return self.lib.dbs_count(self.h, t)

    def mind(self, t: int) -> int:
        return self.lib.dbs_mind(self.h, t)

    def _nodes(self):
        if self._nodebuf is None:
            self._nodebuf = (ctypes.c_int32 * (self.n + 1))()
        return self._nodebuf

    def frontier(self, t: int) -> list[int]:
        buf = self._nodes()
        return buf[:self.lib.dbs_frontier(self.h, t, buf)]

    def last_batch(self) -> list[int]:
        """Node ids of the batch just run (for policies that update per-node state after a step)."""
        buf = self._nodes()
        return buf[:self.lib.dbs_last(self.h, buf)]

    @property
    def executed(self) -> int:
        return self.lib.dbs_executed(self.h)

    @property
    def nbatches(self) -> int:
        return self.lib.dbs_nbatches(self.h)

    def bend(self) -> list[int]:
        """End offset of every batch in the flat schedule."""
        nb = self.nbatches
        buf = (ctypes.c_int32 * max(1, nb))()
        self.lib.dbs_bend(self.h, buf)
        return buf[:nb]

    def firsts(self) -> list[int]:
        nb = self.nbatches
        buf = (ctypes.c_int32 * max(1, nb))()
        self.lib.dbs_firsts(self.h, buf)
        return buf[:nb]

    def flat(self) -> list[int]:
        """Node ids in schedule order."""
        n = self.n
        out = (ctypes.c_int32 * max(1, n))()
        bend = (ctypes.c_int32 * (n + 1))()
        self.lib.dbs_result(self.h, out, bend)
        return out[:self.executed]

    def beam(self, width: int, power: int) -> list[int] | None:
        """Type sequence found by the compiled beam search (see ``dbs_beam``), from the start state (call on a
        fresh simulator); None when unsupported (more than 64 types)."""
        buf = (ctypes.c_int32 * (self.n + 1))()
        k = self.lib.dbs_beam(self.h, int(width), int(power), buf, self.n + 1)
        return None if k < 0 else buf[:k]

    def search(self, width: int, power: int, threshold: int) -> tuple[int, int | None]:
        """The FSM's search step on a fresh simulator: (type-wise lower bound, batches of the beam search's
        schedule, now held by this simulator); batches None when the bound is >= ``threshold`` (nothing to gain)
        or the search is unsupported."""
        lb = ctypes.c_int32(0)
        k = self.lib.dbs_search(self.h, int(width), int(power), int(threshold), ctypes.byref(lb))
        return lb.value, (k if k > 0 else None)

    def fresh(self) -> "FastSim":
        """A new simulator over the same graph, nothing run yet (copies the C arrays: no pass over the recorder's
        Python lists)."""
        c = FastSim.__new__(FastSim)
        c.lib, c.g, c.n, c.nt, c.dyn_ref, c._nodebuf = self.lib, self.g, self.n, self.nt, self.dyn_ref, None
        c.h = self.lib.dbs_clone(self.h)
        c._buf = (ctypes.c_int32 * max(1, self.nt))()
        return c

    def run_cp(self) -> int:
        """Schedule to the end with the critical-path choice (needs ``heights``); returns the number of decisions
        among several ready types."""
        k = self.lib.dbs_run_cp(self.h)
        if k < 0:
            from .errors import BatcherError

            raise BatcherError("fastsim: critical-path schedule stopped before the end (corrupt graph arrays)")
        return k

    def steps(self, shapes: list) -> tuple:
        """(loc_b, loc_r, steps) of the planner, built in C (needs the Python.h build; else None)."""
        if not self.lib.pylist:
            return None
        steps, gathers = self.lib.dbs_steps_py(self.h, "view", "bcast", "gather")
        for b, j, k, u0, o in gathers:  # byte counts need the output shapes
            steps[b][j] = ("gather", steps[b][j][1], k * math.prod(shapes[u0][o]) * 4)
        return _CLoc(self, 0), _CLoc(self, 1), steps

    def resolve(self):
        """Argument resolution of this simulator's schedule: (loc_b, loc_r, groups, runs) as in :func:`resolve`
        (locations as ctypes int64 arrays)."""
        lib, h, n = self.lib, self.h, self.n
        gmax, smax = max(1, lib.dbs_ngroups(h)), max(1, lib.dbs_nslots(h))
        loc = (ctypes.c_int64 * (2 * n))()
        blk = (ctypes.c_int32 * (6 * gmax + 4 * smax))()
        nr = ctypes.c_int32(0)
        G = lib.dbs_resolve_blk(h, loc, blk, gmax, smax, ctypes.byref(nr))
        R = nr.value
        cols = [blk[i * gmax:i * gmax + G] for i in range(6)]
        r0 = 6 * gmax
        runs = list(zip(*(blk[r0 + i * smax:r0 + i * smax + R] for i in range(4))))
        return _Loc(loc, 0), _Loc(loc, n), cols, runs


class _CLoc:
    """Batch (which 0) or row (which 1) of each node, read from the simulator."""

    __slots__ = ("fs", "w")

    def __init__(self, fs, w):
        self.fs, self.w = fs, w

    def __getitem__(self, v: int) -> int:
        if not 0 <= v < self.fs.n:
            raise IndexError(v)
        return self.fs.lib.dbs_loc(self.fs.h, v, self.w)

    def tolist(self) -> list[int]:
        return [self[v] for v in range(self.fs.n)]

    def __iter__(self):
        return iter(self.tolist())

    def __len__(self) -> int:
        return self.fs.n


class _Loc:
    """Read-only view of half of a ctypes location array (batch or row of each node)."""

    __slots__ = ("a", "o")

    def __init__(self, a, o):
        self.a, self.o = a, o

    def __getitem__(self, v: int) -> int:
        return self.a[self.o + v]

    def tolist(self) -> list[int]:
        return self.a[self.o:self.o + len(self.a) // 2]

    def __iter__(self):
        return iter(self.tolist())

    def __len__(self) -> int:
        return len(self.a) // 2


class FlatSchedule(Sequence):
    """A schedule as the compiled simulator leaves it (inside ``fs``): it reads like a list of batches (each a
    list of node ids, built on first access), while the execution planner resolves it inside the simulator, so
    no per-node Python list is built per flush."""

    __slots__ = ("fs", "_bend", "_lists")

    def __init__(self, fs: "FastSim"):
        self.fs = fs
        self._bend = fs.bend()
        self._lists = None

    def __len__(self) -> int:
        return len(self._bend)

    def _all(self) -> list[list[int]]:
        if self._lists is None:
            fl, be = self.fs.flat(), self._bend
            self._lists = [fl[a:b] for a, b in zip([0] + be[:-1], be)]
        return self._lists

    def __getitem__(self, i):
        return self._all()[i]

    def __iter__(self):
        return iter(self._all())

    def __eq__(self, other) -> bool:
        try:
            return self._all() == [list(b) for b in other]
        except TypeError:
            return NotImplemented

    __hash__ = None

    @property
    def flat(self):
        import numpy as np

        return np.asarray(self.fs.flat(), dtype=np.int64)

    @property
    def lens(self):
        import numpy as np

        return np.diff(np.asarray(self._bend, dtype=np.int64), prepend=0)

    def first(self) -> list[int]:
        """The first node of every batch (what the executor needs per batch)."""
        return self.fs.firsts()

    def __repr__(self) -> str:
        return f"FlatSchedule({self._all()!r})"


def flat_schedule(fs: FastSim) -> FlatSchedule:
    fs.g = None  # the finished simulator keeps its arrays, not the graph view
    return FlatSchedule(fs)


def _resolve_call(n: int, gmax: int, smax: int, call):
    import numpy as np

    lb = np.zeros(n, dtype=np.int64)
    lr = np.zeros(n, dtype=np.int64)
    gi = np.empty((6, max(1, gmax)), dtype=np.int32)
    ri = np.empty((4, max(1, smax)), dtype=np.int32)
    nr = np.zeros(1, dtype=np.int32)
    G = call(lb.ctypes.data, lr.ctypes.data, *(gi[i].ctypes.data for i in range(6)),
             *(ri[i].ctypes.data for i in range(4)), nr.ctypes.data)
    R = int(nr[0])
    return lb, lr, gi[:, :G].tolist(), list(zip(*ri[:, :R].tolist()))


def resolve(n: int, flat: Any, lens: Any, arity: Any, argflat: Any):
    """Compiled argument resolution of any schedule: (lb, lr, groups, runs) where groups = [batch, kind (0 view,
    1 broadcast, 2 gather), first run, #runs, size, first source] columns and runs = (batch, output, row start,
    row end) tuples; None without the library."""
    import numpy as np

    lib = load()
    if lib is None:
        return None
    nb = len(lens)
    flat = np.ascontiguousarray(flat, dtype=np.int32)
    bend = np.cumsum(lens).astype(np.int32)
    arity = np.ascontiguousarray(arity, dtype=np.int32)
    argflat = np.ascontiguousarray(argflat, dtype=np.int64)
    gmax = int(arity[flat[bend - lens]].sum()) if nb else 0
    return _resolve_call(n, gmax, len(argflat) // 2 + 1,
                         lambda *ptrs: lib.dbs_resolve(n, nb, flat.ctypes.data, bend.ctypes.data,
                                                       arity.ctypes.data, argflat.ctypes.data, *ptrs))


__all__ = ["resolve", "available", "load", "FastSim", "FlatSchedule", "flat_schedule"]
