"""H2H (Zhang et al., DAC 2022: computation- and communication-aware mapping of multi-DNN workloads on
heterogeneous multi-accelerator systems), in its four steps:

1. computation-first greedy: ready layers (longest first) go to the accelerator that finishes their
   computation earliest, ignoring communication;
2. weight locality: per accelerator, a 0/1 knapsack pins the weights that save the most time into its buffer;
3. activation-transfer removal: a consumer moves to its producer's accelerator when that removes a transfer
   and shortens the schedule;
4. local search: a layer moves to an accelerator one mesh hop away while that shortens the schedule.

Steps 3–4 judge each move with the shared simulator. Also here: ``h2h_wave_greedy``, the simplified
"H2H" of COMB's experiments (wave-by-wave, one stream, transfer-aware greedy, a barrier after each wave).
"""
from __future__ import annotations

import time

import numpy as np

from ..comb import SearchResult
from ..config import H2HConfig
from ..cost import CostTable
from ..simulator import Plan, SimState, simulate
from ..soc import SoC
from ..workload import Workload


def _levels(w: Workload) -> list[int]:
    lv = [0] * len(w.layers)
    for v in range(len(w.layers)):  # indices are topological
        lv[v] = max((lv[u] + 1 for u in w.preds[v]), default=0)
    return lv


def computation_first(w: Workload, soc: SoC, cost: CostTable) -> tuple[list[int], list[int]]:
    """Step 1: (placement, dispatch order)."""
    L = len(w.layers)
    st = SimState(w, soc, cost)
    indeg = [len(p) for p in w.preds]
    ready = [v for v in range(L) if indeg[v] == 0]
    order: list[int] = []
    minlat = cost.latency.min(axis=1)
    while ready:
        ready.sort(key=lambda v: (-minlat[v], v))  # longest computation first
        nxt = []
        for v in ready:
            a = min((a for a in range(soc.n) if cost.supported[v, a]),
                    key=lambda a: (st.earliest(v, a, transfers=False)[1], a))
            st.place(v, a)
            order.append(v)
            for s in w.succs[v]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    nxt.append(s)
        ready = nxt
    return st.placement, order


def pin_weights(w: Workload, soc: SoC, cost: CostTable, placement: list[int], unit: int = 1024) -> list[bool]:
    """Step 2: per accelerator, the 0/1 knapsack (capacity = its buffer, in ``unit``-byte steps) maximising the
    latency saved by keeping weights resident."""
    pinned = [False] * len(w.layers)
    for a in range(soc.n):
        items = [v for v, p in enumerate(placement) if p == a and w.layers[v].weight_bytes > 0]
        gain = [float(cost.latency[v, a] - cost.latency_pinned[v, a]) for v in items]
        items = [v for v, g in zip(items, gain) if g > 0]
        gain = [g for g in gain if g > 0]
        if not items:
            continue
        cap = soc.accs[a].buffer_bytes // unit
        wt = [-(-w.layers[v].weight_bytes // unit) for v in items]
        best = np.zeros(cap + 1)
        take = np.zeros((len(items), cap + 1), dtype=bool)
        for k, (g, c) in enumerate(zip(gain, wt)):
            if c > cap:
                continue
            cand = best[:cap + 1 - c] + g
            better = cand > best[c:]
            take[k, c:] = better
            best[c:] = np.where(better, cand, best[c:])
        r = cap
        for k in reversed(range(len(items))):
            if take[k, r]:
                pinned[items[k]] = True
                r -= wt[k]
    return pinned


def h2h(w: Workload, soc: SoC, cost: CostTable, cfg: H2HConfig | None = None) -> SearchResult:
    cfg = cfg or H2HConfig()
    t0 = time.perf_counter()
    deadline = t0 + cfg.time_budget_s if cfg.time_budget_s else None
    placement, order = computation_first(w, soc, cost)

    def judge(pl: list[int]) -> tuple[float, list[bool] | None]:
        pin = pin_weights(w, soc, cost, pl) if cfg.weight_pinning else None
        return simulate(Plan(pl, order, None, None, pin, "h2h"), w, soc, cost, validate=False).latency, pin

    best, pin = judge(placement)
    history = [best]

    def out_of_time() -> bool:
        return deadline is not None and time.perf_counter() > deadline

    if cfg.transfer_removal:
        # edges by transfer time, largest first: the ones worth removing
        edges = sorted(((u, v) for (u, v) in w.edge_bytes if placement[u] != placement[v]),
                       key=lambda e: -w.edge_bytes[e] / soc.bandwidth[placement[e[0]], placement[e[1]]])
        for u, v in edges:
            if out_of_time():
                break
            a = placement[u]
            if placement[v] == a or not cost.supported[v, a]:
                continue
            trial = placement[:]
            trial[v] = a
            lat, p = judge(trial)
            if lat < best:
                placement, best, pin = trial, lat, p
        history.append(best)
    if cfg.local_search:
        for _ in range(cfg.local_search_rounds):
            improved = False
            for v in range(len(w.layers)):
                if out_of_time():
                    break
                for b in soc.neighbours(placement[v]):
                    if not cost.supported[v, b]:
                        continue
                    trial = placement[:]
                    trial[v] = b
                    lat, p = judge(trial)
                    if lat < best:
                        placement, best, pin, improved = trial, lat, p, True
                        break
            history.append(best)
            if not improved or out_of_time():
                break
    plan = Plan(placement, order, None, None, pin, "h2h")
    return SearchResult("h2h", plan, simulate(plan, w, soc, cost), time.perf_counter() - t0, history=history)


def h2h_wave_greedy(w: Workload, soc: SoC, cost: CostTable) -> SearchResult:
    """COMB's simplified "H2H": topological waves; in each, layers (longest first) go to the accelerator where
    they finish earliest including transfers, one stream per accelerator; a barrier after each wave."""
    t0 = time.perf_counter()
    lv = _levels(w)
    st = SimState(w, soc, cost, max_streams=1)
    minlat = cost.latency.min(axis=1)
    order: list[int] = []
    for k in range(max(lv) + 1 if lv else 0):
        wave = sorted((v for v in range(len(w.layers)) if lv[v] == k), key=lambda v: (-minlat[v], v))
        for v in wave:
            a = min((a for a in range(soc.n) if cost.supported[v, a]), key=lambda a: (st.earliest(v, a)[1], a))
            st.place(v, a)
            order.append(v)
        st.close_phase()
    plan = Plan(st.placement, order, lv, 1, None, "h2h_wave_greedy")
    return SearchResult("h2h_wave_greedy", plan, simulate(plan, w, soc, cost), time.perf_counter() - t0)
