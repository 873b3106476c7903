"""The compiled fitness path: COMB's decoder and the schedule simulator in C (``fastsim.c``), bit-identical to
the Python code in :mod:`soc_mapper.decoder` and :mod:`soc_mapper.simulator`, which stays the oracle.

Why: one fitness evaluation of mixed3 (4,392 layers) on soc_large took ~0.45 s in Python, ~85 % of it in the
decoder's profile scans (``profile.earliest``, ~7 calls per layer), so a GA of population 8 managed ~1
generation per 2 s on two cores; COMB needs ≥ 50 generations within a minute there. The C code does the same
operations in the same order (float sums in Python's order, CPython's compensated ``sum`` from 3.12 on, ties
broken as Python's stable sorts and strict comparisons break them, no FMA contraction), so decoded plans,
start/finish times, latency and energy are equal to the last bit (tests/test_soc_mapper/test_fast_fitness.py).

The source is compiled once per source, compiler and flags by :func:`shared_ir.cbuild.build_shared` and cached
under ``$SOC_MAPPER_CACHE`` (default ``~/.cache/soc_mapper``). Without a working compiler the first use warns
once and everything runs in Python; ``SOC_MAPPER_FASTSIM=0`` (or ``fastsim.enabled = False``) turns the fast
path off. Any input the C code does not take (more than 64 accelerators, a layer needing more PEs than its
accelerator has, an invalid plan judged without validation) silently takes the Python path, which then
computes — or rejects — it as before.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
import warnings
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

_SRC = Path(__file__).with_name("fastsim.c")
_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_error: Optional[str] = None

enabled = os.environ.get("SOC_MAPPER_FASTSIM", "1") != "0"
"""Use the compiled path when it loads (tests switch it off to run the Python oracle)."""

_NEUMAIER = int(sys.version_info >= (3, 12))
"""CPython's ``sum`` of floats is compensated (Neumaier) from 3.12 on; the C sums follow the running Python."""

_P = ctypes.c_void_p


class _Tables(ctypes.Structure):
    _fields_ = [("L", ctypes.c_int32), ("A", ctypes.c_int32), ("keep", ctypes.c_int32), ("neumaier", ctypes.c_int32),
                ("lat", _P), ("latp", _P), ("power", _P), ("pes", _P), ("mask", _P), ("pptr", _P), ("pidx", _P),
                ("pbytes", _P), ("sptr", _P), ("sidx", _P), ("sbytes", _P), ("inv_bw", _P), ("npe", _P),
                ("streams", _P)]


def _cache_dir() -> Path:
    return Path(os.environ.get("SOC_MAPPER_CACHE", Path.home() / ".cache" / "soc_mapper"))


def load() -> Optional[ctypes.CDLL]:
    """The compiled library, or None when disabled or when no C compiler works (warned once)."""
    global _lib, _lib_error
    if not enabled:
        return None
    if _lib is not None or _lib_error is not None:
        return _lib
    with _lock:
        if _lib is not None or _lib_error is not None:
            return _lib
        from shared_ir.cbuild import CompileError, build_shared

        try:
            # -ffp-contract=off: a fused multiply-add would round differently from Python's b * x + y
            so = build_shared(_SRC, _cache_dir(), flag_sets=(["-O2", "-ffp-contract=off"], ["-O2"]))
            lib = ctypes.CDLL(str(so))
            lib.sm_decode.argtypes = [_P, _P, ctypes.c_int, ctypes.c_int] + [_P] * 9
            lib.sm_decode.restype = ctypes.c_int
            lib.sm_simulate.argtypes = [_P] * 11
            lib.sm_simulate.restype = ctypes.c_int
            _lib = lib
        except (OSError, CompileError, AttributeError) as e:
            _lib_error = str(e)
            warnings.warn(f"soc_mapper: the compiled decoder/simulator is unavailable, using the Python ones "
                          f"(much slower on large mixes): {e}", RuntimeWarning, stacklevel=2)
        return _lib


def available() -> bool:
    return load() is not None


def reload() -> None:
    """Forget the loaded library and any load error (the next use builds or loads it again)."""
    global _lib, _lib_error
    with _lock:
        _lib, _lib_error = None, None


class CTables:
    """One problem's tables as contiguous arrays plus the C struct pointing into them (kept alive here)."""

    def __init__(self, L: int, A: int, keep: int = 1 << 30, **arrays: np.ndarray):
        self.arrays = arrays
        self.s = _Tables(L, A, min(keep, 2**31 - 1), _NEUMAIER,
                         *[arrays[f].ctypes.data if f in arrays else None for f, _ in _Tables._fields_[4:]])
        self.ptr = ctypes.addressof(self.s)


def _csr(rows: Sequence[Sequence[tuple[int, float]]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ptr = np.zeros(len(rows) + 1, dtype=np.int32)
    ptr[1:] = np.cumsum([len(r) for r in rows])
    idx = np.array([u for r in rows for u, _ in r], dtype=np.int32)
    byt = np.array([b for r in rows for _, b in r], dtype=np.float64)
    return ptr, idx, byt


def _i32(x) -> np.ndarray:
    a = np.asarray(x, dtype=np.int64)
    if a.size and (a.min() < -2**31 or a.max() >= 2**31):
        raise OverflowError("out of int32 range")
    return np.ascontiguousarray(a, dtype=np.int32)


def decoder_tables(ctx) -> Optional[CTables]:
    """The C tables of a :class:`soc_mapper.decoder.DecodeContext` (built once, not pickled), or None when the
    C decoder does not take this problem."""
    t = getattr(ctx, "_fast", None)
    if t is None:
        t = False
        if ctx.A <= 64 and all(s >= 1 for s in ctx.streams) and all(
                ctx.pes[v][a] <= ctx.npe[a] for v in range(ctx.L) for a in ctx.sup[v]):
            pptr, pidx, pb = _csr(ctx.preds)
            sptr, sidx, sb = _csr(ctx.succ_bytes)
            t = CTables(ctx.L, ctx.A, ctx.keep, lat=np.array(ctx.lat, dtype=np.float64).reshape(ctx.L, ctx.A),
                        pes=_i32(ctx.pes).reshape(ctx.L, ctx.A), mask=np.array(ctx.mask, dtype=np.uint64),
                        pptr=pptr, pidx=pidx, pbytes=pb, sptr=sptr, sidx=sidx, sbytes=sb,
                        inv_bw=np.array(ctx.inv_bw, dtype=np.float64), npe=_i32(ctx.npe),
                        streams=_i32(ctx.streams))
        ctx._fast = t
    return t or None


def sim_tables(tb, w, soc, cost) -> CTables:
    """The C tables of the simulator for (workload, SoC, cost table), kept on their
    :func:`soc_mapper.simulator.fast_tables` ``tb`` (passed in: this module imports neither simulator nor decoder,
    which import it)."""
    t = getattr(tb, "_c", None)
    if t is None:
        L, A = len(w.layers), soc.n
        pptr, pidx, pb = _csr(tb.preds)
        t = CTables(L, A, lat=np.array(tb.lat, dtype=np.float64).reshape(L, A),
                    latp=np.array(tb.latp, dtype=np.float64).reshape(L, A),
                    power=np.ascontiguousarray(cost.power, dtype=np.float64).reshape(L, A),
                    pes=_i32(tb.pes).reshape(L, A), pptr=pptr, pidx=pidx, pbytes=pb,
                    inv_bw=np.array(tb.inv_bw, dtype=np.float64), npe=_i32([a.num_pes for a in soc.accs]))
        tb._c = t
    return t


def _ptr(a: Optional[np.ndarray]) -> Optional[int]:
    return None if a is None else a.ctypes.data


class Decoded:
    """One decode from C: the decoder's estimate, the placement and the windows' groups as flat arrays."""

    def __init__(self, est: float, placement: np.ndarray, win, acc, start, finish, occ, off, members, G: int):
        self.est, self.placement, self.G = est, placement, G
        self.win, self.acc, self.start, self.finish, self.occ = win[:G], acc[:G], start[:G], finish[:G], occ[:G]
        self.off, self.members = off[:G + 1], members[:off[G]]

    def groups(self) -> list[tuple[tuple[int, ...], float]]:
        """[(layers, occupancy)] of every group, window by window (what the GA's operators read)."""
        m, off = self.members.tolist(), self.off.tolist()
        return [(tuple(m[off[k]:off[k + 1]]), o) for k, o in enumerate(self.occ.tolist())]

    def windows(self, Group) -> list:
        """The windows as lists of ``Group`` (:class:`soc_mapper.decoder.Group`: what the Python decoder returns)."""
        out: list[list] = []
        m, off = self.members.tolist(), self.off.tolist()
        for k, (w, a, s, f, o) in enumerate(zip(self.win.tolist(), self.acc.tolist(), self.start.tolist(),
                                                self.finish.tolist(), self.occ.tolist())):
            while len(out) <= w:
                out.append([])
            out[w].append(Group(tuple(m[off[k]:off[k + 1]]), a, s, f, o))
        return out


def decode(order: Sequence[int], ctx, barriers: bool = False) -> Optional[Decoded]:
    """:func:`soc_mapper.decoder.decode` in C, or None (then the caller runs the Python decoder)."""
    lib = load()
    t = decoder_tables(ctx) if lib is not None else None
    if t is None or len(order) != ctx.L:
        return None
    L = ctx.L
    try:
        o = _i32(order)
    except (OverflowError, TypeError, ValueError):
        return None
    est = ctypes.c_double(0.0)
    pl = np.zeros(L, dtype=np.int32)
    win, acc, off, mem = (np.zeros(L + 1, dtype=np.int32) for _ in range(4))
    start, finish, occ = (np.zeros(L + 1, dtype=np.float64) for _ in range(3))
    G = lib.sm_decode(t.ptr, _ptr(o), int(bool(barriers)), ctx.max_window, ctypes.byref(est), _ptr(pl), _ptr(win),
                      _ptr(acc), _ptr(start), _ptr(finish), _ptr(occ), _ptr(off), _ptr(mem))
    if G < 0:
        return None
    return Decoded(est.value, pl, win, acc, start, finish, occ, off, mem, G)


def _streams(soc, max_streams: Optional[int]) -> np.ndarray:
    return _i32([a.streams if max_streams is None else min(a.streams, max_streams) for a in soc.accs])


def _run(t: CTables, lib, placement: np.ndarray, order: np.ndarray, phase, pinned, streams, full: bool):
    L, A = t.s.L, t.s.A
    start, finish = np.zeros(L), np.zeros(L)
    stream, busy = (np.zeros(L, dtype=np.int64), np.zeros(A)) if full else (None, None)
    out = np.zeros(2)
    rc = lib.sm_simulate(t.ptr, _ptr(placement), _ptr(order), _ptr(phase), _ptr(pinned), _ptr(streams),
                         _ptr(start), _ptr(finish), _ptr(stream), _ptr(busy), _ptr(out))
    return None if rc < 0 else (start, finish, stream, busy, float(out[0]), float(out[1]))


def simulate(plan, tb, w, soc, cost, full: bool = True) -> Optional[tuple]:
    """:func:`soc_mapper.simulator.simulate`'s schedule in C: (start, finish, stream, busy, latency, energy)
    (stream and busy None unless ``full``), or None (then the caller runs the Python simulator)."""
    lib = load()
    L = len(w.layers)
    if lib is None or soc.n > 64 or len(plan.order) != L or len(plan.placement) != L:
        return None
    try:
        pl, order = _i32(plan.placement), _i32(plan.order)
        phase = None if plan.phase is None else np.ascontiguousarray(plan.phase, dtype=np.int64)
        pinned = None if plan.pinned is None else np.ascontiguousarray([bool(p) for p in plan.pinned],
                                                                       dtype=np.uint8)
    except (OverflowError, TypeError, ValueError):
        return None
    if (phase is not None and len(phase) != L) or (pinned is not None and len(pinned) != L):
        return None
    return _run(sim_tables(tb, w, soc, cost), lib, pl, order, phase, pinned, _streams(soc, plan.max_streams), full)


def judge(d: Decoded, tb, w, soc, cost, max_streams: Optional[int], barriers: bool) -> Optional[tuple[float, float]]:
    """(latency, energy) of the plan :func:`soc_mapper.decoder.windows_to_plan` makes of a decode, simulated
    in C without building the plan; None when the decode does not cover every layer."""
    lib = load()
    L = len(w.layers)
    if lib is None or len(d.members) != L:
        return None
    counts = np.diff(d.off)
    pl = np.zeros(L, dtype=np.int32)
    pl[d.members] = np.repeat(d.acc, counts)
    phase = None
    if barriers:
        phase = np.zeros(L, dtype=np.int64)
        phase[d.members] = np.repeat(d.win, counts)
    r = _run(sim_tables(tb, w, soc, cost), lib, pl, np.ascontiguousarray(d.members), phase, None,
             _streams(soc, max_streams), False)
    return None if r is None else (r[4], r[5])
