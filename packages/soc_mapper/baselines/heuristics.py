"""The simple list-scheduling heuristics of MAGMA's code base (FCFS, HEFT, round robin, greedy), adapted to a
layer DAG: a layer is dispatched once its producers are placed, and every plan is judged by the simulator with
the SoC's own streams."""
from __future__ import annotations

import time

import numpy as np

from ..comb import SearchResult
from ..cost import CostTable
from ..simulator import Plan, SimState, simulate
from ..soc import SoC
from ..workload import Workload


def _finish(name: str, w: Workload, soc: SoC, cost: CostTable, placement: list[int], order: list[int],
            t0: float) -> SearchResult:
    plan = Plan(placement, order, None, None, None, name)
    return SearchResult(name, plan, simulate(plan, w, soc, cost), time.perf_counter() - t0)


def fcfs(w: Workload, soc: SoC, cost: CostTable) -> SearchResult:
    """First come first served: layers in index (arrival) order, each to the supporting accelerator that frees
    up first (ignoring how fast it runs the layer)."""
    t0 = time.perf_counter()
    free = [0.0] * soc.n
    fin = [0.0] * len(w.layers)
    pl = []
    for v in range(len(w.layers)):
        ready = max((fin[u] for u in w.preds[v]), default=0.0)
        a = min((a for a in range(soc.n) if cost.supported[v, a]), key=lambda a: (max(free[a], ready), a))
        s = max(free[a], ready)
        fin[v] = free[a] = s + float(cost.latency[v, a])
        pl.append(a)
    return _finish("fcfs", w, soc, cost, pl, list(range(len(w.layers))), t0)


def round_robin(w: Workload, soc: SoC, cost: CostTable) -> SearchResult:
    """Layers in index order dealt to the accelerators in turn (skipping those that cannot run the layer)."""
    t0 = time.perf_counter()
    pl, k = [], 0
    for v in range(len(w.layers)):
        for step in range(soc.n):
            a = (k + step) % soc.n
            if cost.supported[v, a]:
                pl.append(a)
                k = a + 1
                break
    return _finish("round_robin", w, soc, cost, pl, list(range(len(w.layers))), t0)


def greedy(w: Workload, soc: SoC, cost: CostTable) -> SearchResult:
    """Layers in index order, each to the accelerator where it finishes earliest (transfers and streams
    included, under the simulator's rules)."""
    t0 = time.perf_counter()
    st = SimState(w, soc, cost)
    for v in range(len(w.layers)):
        a = min((a for a in range(soc.n) if cost.supported[v, a]), key=lambda a: (st.earliest(v, a)[1], a))
        st.place(v, a)
    return _finish("greedy", w, soc, cost, st.placement, list(range(len(w.layers))), t0)


def heft(w: Workload, soc: SoC, cost: CostTable) -> SearchResult:
    """HEFT (Topcuoglu et al. 2002): order by upward rank (mean cost over the supporting accelerators + mean
    transfer), then earliest finish time with insertion into gaps (the simulator's insertion scheduling)."""
    t0 = time.perf_counter()
    L = len(w.layers)
    lat = np.where(cost.supported, cost.latency, np.nan)
    mean_c = np.nanmean(lat, axis=1)
    off = soc.bandwidth[~np.eye(soc.n, dtype=bool)]
    mean_inv_bw = float(np.mean(1.0 / off)) if off.size else 0.0
    rank = np.zeros(L)
    for v in reversed(range(L)):  # indices are topological
        rank[v] = mean_c[v] + max((w.edge_bytes[(v, s)] * mean_inv_bw + rank[s] for s in w.succs[v]), default=0.0)
    order = sorted(range(L), key=lambda v: (-rank[v], v))  # decreasing rank is topological (positive costs)
    st = SimState(w, soc, cost)
    for v in order:
        a = min((a for a in range(soc.n) if cost.supported[v, a]), key=lambda a: (st.earliest(v, a)[1], a))
        st.place(v, a)
    return _finish("heft", w, soc, cost, st.placement, order, t0)
