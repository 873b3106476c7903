"""The one schedule simulator that judges every algorithm.

A :class:`Plan` (placement of each layer, a dispatch order, optional barriers, an optional stream cap and
optional pinned weights) becomes start/finish times by list scheduling in the dispatch order: a layer starts at
the earliest time ≥ (its barrier, each predecessor's finish + transfer over the mesh) at which its accelerator
has a free stream and enough free PEs for the whole duration (earlier gaps are filled: insertion scheduling).
Transfers: bytes / bandwidth(src, dst) (nearest-neighbour bandwidth / Manhattan distance; the intra-accelerator
bandwidth when producer and consumer share an accelerator). Energy = Σ over phases (intervals between
consecutive start/finish events) of phase length × the highest power among the tasks running in it.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np

from shared_ir.graph import gc_paused

from .cost import CostTable
from .errors import MapperError
from .profile import add as prof_add
from .profile import earliest as prof_earliest
from .profile import new_profile
from .soc import SoC
from .workload import Workload


@dataclass
class Plan:
    """What an algorithm decides; the simulator derives the times."""

    placement: list[int]
    """Accelerator index of each layer."""
    order: list[int]
    """Dispatch order (a topological order of the layers)."""
    phase: list[int] | None = None
    """Barrier phase of each layer (non-decreasing along ``order``): a layer of phase p starts after every layer
    of an earlier phase finished. None: no barriers."""
    max_streams: int | None = None
    """Cap on concurrent tasks per accelerator (1 for the one-stream baselines); None: the SoC's streams."""
    pinned: list[bool] | None = None
    """Weights of the layer resident in its accelerator's buffer (H2H's weight locality)."""
    algorithm: str = ""
    """Name of the algorithm that produced it."""


@dataclass
class Result:
    """A simulated schedule."""

    latency: float
    """Makespan, s."""
    energy: float
    """J (phase model)."""
    occupancy: float
    """Σ PEs × duration / (Σ PEs of all accelerators × makespan)."""
    start: np.ndarray
    finish: np.ndarray
    stream: np.ndarray
    acc_busy: list[float] = field(default_factory=list)
    """Per accelerator: time with ≥ 1 task running, s."""
    algorithm: str = ""

    def summary(self) -> dict:
        return {"latency_s": self.latency, "energy_j": self.energy, "pe_occupancy": self.occupancy}


def validate_plan(plan: Plan, w: Workload, soc: SoC, cost: CostTable) -> None:
    L = len(w.layers)
    name = plan.algorithm or "plan"
    if len(plan.placement) != L:
        raise MapperError(f"{name}.placement", f"has {len(plan.placement)} entries for {L} layers")
    if sorted(plan.order) != list(range(L)):
        raise MapperError(f"{name}.order", "must be a permutation of the layers")
    if not w.is_topological(plan.order):
        pos = {v: i for i, v in enumerate(plan.order)}
        u, v = next((u, v) for u, v in w.edge_bytes if pos[u] > pos[v])
        raise MapperError(f"{name}.order", f"not topological: {w.layers[v].name!r} before its producer "
                                           f"{w.layers[u].name!r}")
    for v, a in enumerate(plan.placement):
        if not (0 <= a < soc.n) or not cost.supported[v, a]:
            an = soc.accs[a].name if 0 <= a < soc.n else a
            raise MapperError(f"{name}.placement.{w.layers[v].name}", f"accelerator {an!r} cannot run this layer")
    if plan.phase is not None:
        ph = [plan.phase[v] for v in plan.order]
        if any(b < a for a, b in zip(ph, ph[1:])):
            raise MapperError(f"{name}.phase", "phases must not decrease along the dispatch order")
    if plan.pinned is not None:
        used = np.zeros(soc.n)
        for v, p in enumerate(plan.pinned):
            if p:
                used[plan.placement[v]] += w.layers[v].weight_bytes
        for a in range(soc.n):
            if used[a] > soc.accs[a].buffer_bytes:
                raise MapperError(f"{name}.pinned.{soc.accs[a].name}", f"pins {int(used[a])} B of weights in a "
                                                                      f"{soc.accs[a].buffer_bytes} B buffer")


class SimState:
    """Incremental list scheduling (the simulator's core): place layers one by one in a dispatch order.
    The constructive heuristics use it to compare accelerators by earliest finish under the same rules.
    Per accelerator a usage profile (:mod:`soc_mapper.profile`); costs and edges come as plain lists
    precomputed once per (workload, SoC, cost table) (:func:`fast_tables`)."""

    def __init__(self, w: Workload, soc: SoC, cost: CostTable, max_streams: int | None = None):
        self.w, self.soc, self.cost, self.max_streams = w, soc, cost, max_streams
        L = len(w.layers)
        self.tb = fast_tables(w, soc, cost)
        self.start = np.zeros(L)
        self.finish = np.zeros(L)
        self._fin = [0.0] * L
        self.placement = [-1] * L
        self.prof = [new_profile() for _ in range(soc.n)]
        self.streams = [a.streams if max_streams is None else min(a.streams, max_streams) for a in soc.accs]
        self.npe = [a.num_pes for a in soc.accs]
        self.barrier = 0.0
        self.horizon = 0.0
        """Latest finish so far (the next barrier)."""

    def duration(self, v: int, a: int, pinned: bool = False) -> float:
        return (self.tb.latp if pinned else self.tb.lat)[v][a]

    def ready(self, v: int, a: int, transfers: bool = True) -> float:
        t = self.barrier
        fin, pl = self._fin, self.placement
        if transfers:
            inv = self.tb.inv_bw
            for u, b in self.tb.preds[v]:
                r = fin[u] + b * inv[pl[u]][a]
                if r > t:
                    t = r
        else:
            for u, _ in self.tb.preds[v]:
                if fin[u] > t:
                    t = fin[u]
        return t

    def earliest(self, v: int, a: int, pinned: bool = False, transfers: bool = True) -> tuple[float, float]:
        """(start, finish) if ``v`` were placed on ``a`` now."""
        d = (self.tb.latp if pinned else self.tb.lat)[v][a]
        t = prof_earliest(self.prof[a], self.ready(v, a, transfers), d, self.tb.pes[v][a], self.streams[a],
                          self.npe[a])
        return t, t + d

    def place(self, v: int, a: int, pinned: bool = False) -> tuple[float, float]:
        self.placement[v] = a
        t, f = self.earliest(v, a, pinned)
        self.start[v], self.finish[v] = t, f
        self._fin[v] = f
        prof_add(self.prof[a], t, f, self.tb.pes[v][a])
        if f > self.horizon:
            self.horizon = f
        return t, f

    def close_phase(self) -> None:
        """A barrier: later layers start after everything placed so far finished."""
        self.barrier = max(self.barrier, self.horizon)


@dataclass
class FastTables:
    """Costs and edges as nested Python lists (scalar reads from lists are ~10× faster than from numpy)."""

    lat: list[list[float]]
    latp: list[list[float]]
    pes: list[list[int]]
    preds: list[list[tuple[int, float]]]
    """(producer, bytes) of each layer."""
    inv_bw: list[list[float]]
    """1 / bandwidth between accelerators, s per byte."""

    def __getstate__(self) -> dict:
        # the compiled simulator's tables (soc_mapper.fastsim) hold raw pointers: each worker builds its own
        return {k: v for k, v in self.__dict__.items() if k != "_c"}


def fast_tables(w: Workload, soc: SoC, cost: CostTable) -> FastTables:
    """:class:`FastTables` of a problem, cached on the cost table (one per (workload, SoC))."""
    key = (id(w), id(soc))
    cached = getattr(cost, "_fast", None)
    if cached is not None and cached[0] == key and cached[1] is w and cached[2] is soc:
        return cached[3]
    tb = FastTables(cost.latency.tolist(), cost.latency_pinned.tolist(), cost.pes.astype(int).tolist(),
                    [[(u, float(w.edge_bytes[(u, v)])) for u in w.preds[v]] for v in range(len(w.layers))],
                    (1.0 / np.asarray(soc.bandwidth, dtype=float)).tolist())
    try:
        cost._fast = (key, w, soc, tb)
    except AttributeError:
        pass
    return tb


def simulate(plan: Plan, w: Workload, soc: SoC, cost: CostTable, validate: bool = True) -> Result:
    """Start/finish times, latency, energy and PE occupancy of a plan."""
    if validate:
        validate_plan(plan, w, soc, cost)
    from . import fastsim

    # the same schedule to the last bit, compiled (None: not taken)
    fast = fastsim.simulate(plan, fast_tables(w, soc, cost), w, soc, cost)
    if fast is not None:
        start, finish, stream, busy, makespan, energy = fast
        return Result(makespan, energy, _occupancy(start, finish, plan.placement, soc, cost, makespan), start,
                      finish, stream, busy.tolist(), plan.algorithm)
    with gc_paused():
        return _simulate(plan, w, soc, cost)


def _occupancy(start, finish, pl, soc: SoC, cost: CostTable, makespan: float) -> float:
    work = float(np.sum((finish - start) * cost.pes[np.arange(len(start)), np.asarray(pl)]))
    return work / (sum(a.num_pes for a in soc.accs) * makespan) if makespan > 0 else 0.0


def _simulate(plan: Plan, w: Workload, soc: SoC, cost: CostTable) -> Result:
    """The Python schedule (the oracle of :mod:`soc_mapper.fastsim`)."""
    L = len(w.layers)
    st = SimState(w, soc, cost, plan.max_streams)
    pl = plan.placement
    pinned = plan.pinned
    cur_phase = None
    for v in plan.order:
        if plan.phase is not None and plan.phase[v] != cur_phase:
            st.close_phase()
            cur_phase = plan.phase[v]
        st.place(v, pl[v], bool(pinned[v]) if pinned is not None else False)
    start, finish = st.start, st.finish
    makespan = float(finish.max()) if L else 0.0
    power = cost.power[np.arange(L), np.asarray(pl)] if L else np.zeros(0)
    energy = phase_energy(start, finish, power)
    stream, busy = _streams(start, finish, pl, soc.n)
    return Result(makespan, energy, _occupancy(start, finish, pl, soc, cost, makespan), start, finish, stream, busy,
                  plan.algorithm)


def _phases(start: np.ndarray, finish: np.ndarray, power: np.ndarray) -> Iterator[tuple[float, int]]:
    """The elementary intervals between events: (length, task of highest power active in it); idle ones skipped."""
    ev = sorted([(float(s), 1, i) for i, s in enumerate(start)] + [(float(f), 0, i) for i, f in enumerate(finish)])
    heap: list[tuple[float, int]] = []
    alive: set[int] = set()
    last = None
    for t, kind, i in ev:
        if last is not None and t > last:
            while heap and heap[0][1] not in alive:
                heapq.heappop(heap)
            if heap:
                yield t - last, heap[0][1]
        last = t
        if kind == 1:
            alive.add(i)
            heapq.heappush(heap, (-float(power[i]), i))
        else:
            alive.discard(i)


def phase_energy(start: np.ndarray, finish: np.ndarray, power: np.ndarray) -> float:
    """Σ over elementary intervals between events of length × max power of the tasks active in it."""
    return sum(dt * float(power[k]) for dt, k in _phases(start, finish, power))


def energy_breakdown(plan: Plan, res: Result, w: Workload, soc: SoC, cost: CostTable) -> dict:
    """Where a schedule's phase energy goes: per elementary phase, the task of highest power is charged, so its
    power splits into the accelerator's static share, MAC power and buffer-traffic power (``cost``'s
    ``power_static`` / ``mac_share``). Also: time with some task running (``active_s``; idle time costs nothing
    in the phase model), the phase energy charged per accelerator kind, and the activation bytes moved between
    accelerators over the mesh with the seconds they spend on links (the phase model charges no link energy)."""
    L = len(w.layers)
    pl = plan.placement
    idx = np.arange(L)
    acc = np.asarray(pl)
    power = cost.power[idx, acc] if L else np.zeros(0)
    static = cost.power_static[idx, acc] if cost.power_static is not None else np.zeros(L)
    share = cost.mac_share[idx, acc] if cost.mac_share is not None else np.ones(L)
    parts = {"static_j": 0.0, "mac_j": 0.0, "buffer_j": 0.0}
    by_kind: dict[str, float] = {}
    active = 0.0
    for dt, k in _phases(res.start, res.finish, power):
        active += dt
        dyn = power[k] - static[k]
        parts["static_j"] += dt * static[k]
        parts["mac_j"] += dt * dyn * share[k]
        parts["buffer_j"] += dt * dyn * (1 - share[k])
        df = soc.accs[pl[k]].dataflow
        by_kind[df] = by_kind.get(df, 0.0) + dt * power[k]
    moved = sum(b for (u, v), b in w.edge_bytes.items() if pl[u] != pl[v])
    link_s = sum(b / soc.bandwidth[pl[u], pl[v]] for (u, v), b in w.edge_bytes.items() if pl[u] != pl[v])
    return {**parts, "active_s": active, "idle_s": max(0.0, res.latency - active),
            "energy_by_accelerator_kind_j": by_kind, "mesh_bytes": int(moved), "mesh_transfer_s": link_s}


def _streams(start: np.ndarray, finish: np.ndarray, pl: Sequence[int], n_acc: int) -> tuple[np.ndarray, list[float]]:
    """Stream index of each task (interval colouring per accelerator) and busy time per accelerator."""
    stream = np.zeros(len(start), dtype=np.int64)
    busy = [0.0] * n_acc
    by_acc: list[list[int]] = [[] for _ in range(n_acc)]
    for v, a in enumerate(pl):
        by_acc[a].append(v)
    for a, vs in enumerate(by_acc):
        vs.sort(key=lambda v: (start[v], finish[v]))
        free_at: list[float] = []
        cover_end = -1.0
        for v in vs:
            s, f = start[v], finish[v]
            k = next((i for i, e in enumerate(free_at) if e <= s + 1e-15), None)
            if k is None:
                free_at.append(f)
                k = len(free_at) - 1
            else:
                free_at[k] = f
            stream[v] = k
            if f > cover_end:
                busy[a] += f - max(s, cover_end)
                cover_end = f
    return stream, busy
