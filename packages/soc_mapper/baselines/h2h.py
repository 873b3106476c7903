"""H2H (Zhang et al., DAC 2022: computation- and communication-aware mapping of multi-DNN workloads on
heterogeneous multi-accelerator systems), in its four steps:

1. computation-first greedy: ready layers (longest first) go to the accelerator that finishes their
   computation earliest, ignoring communication;
2. weight locality: per accelerator, a 0/1 knapsack pins the weights that save the most time into its buffer;
3. activation-transfer removal: a consumer moves to its producer's accelerator when that removes a transfer
   and shortens the schedule;
4. local search: a layer moves to an accelerator one mesh hop away while that shortens the schedule.

Steps 3–4 judge each move with the shared simulator (each judgement is one evaluation of the search budget)
and repeat in passes until a whole pass improves nothing (converged) or a pass cap. Also here:
``h2h_wave_greedy``, the simplified "H2H" of COMB's experiments (wave-by-wave, one stream, transfer-aware
greedy, a barrier after each wave).
"""
from __future__ import annotations

import time

import numpy as np

from ..budget import Curve, converged
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


MEMO_ENTRIES = 256
"""Knapsack choices :func:`pin_weights` keeps (least recently used dropped): the current placement's per
accelerator plus the recent trials'."""


def pin_weights(w: Workload, soc: SoC, cost: CostTable, placement: list[int], unit: int = 1024,
                memo: dict | None = None) -> list[bool]:
    """Step 2: per accelerator, the 0/1 knapsack (capacity = its buffer, in ``unit``-byte steps) maximising the
    latency saved by keeping weights resident. ``memo`` keeps each accelerator's choice per set of layers on it:
    a move changes two accelerators, so the others' knapsacks need not be solved again (same result)."""
    pinned = [False] * len(w.layers)
    on: list[list[int]] = [[] for _ in range(soc.n)]
    for v, p in enumerate(placement):
        if w.layers[v].weight_bytes > 0:
            on[p].append(v)
    for a in range(soc.n):
        key = (a, tuple(on[a]))
        chosen = memo.pop(key, None) if memo is not None else None
        if chosen is None:
            chosen = _knapsack(w, soc, cost, a, on[a], unit)
        if memo is not None:
            memo[key] = chosen  # most recently used last; the oldest go first
            if len(memo) > MEMO_ENTRIES:
                del memo[next(iter(memo))]
        for v in chosen:
            pinned[v] = True
    return pinned


def _knapsack(w: Workload, soc: SoC, cost: CostTable, a: int, layers: list[int], unit: int) -> list[int]:
    """The layers of ``layers`` (all on accelerator ``a``) whose weights to pin there."""
    gain = [float(cost.latency[v, a] - cost.latency_pinned[v, a]) for v in layers]
    items = [v for v, g in zip(layers, gain) if g > 0]
    gain = [g for g in gain if g > 0]
    if not items:
        return []
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
    out, r = [], cap
    for k in reversed(range(len(items))):
        if take[k, r]:
            out.append(items[k])
            r -= wt[k]
    return out


class _Judge:
    """H2H's moves judged by the simulator (weights re-pinned for each placement), counted as evaluations."""

    def __init__(self, w: Workload, soc: SoC, cost: CostTable, order: list[int], cfg: H2HConfig, t0: float):
        self.w, self.soc, self.cost, self.order, self.cfg = w, soc, cost, order, cfg
        self.curve = Curve()
        self.deadline = t0 + cfg.time_budget_s if cfg.time_budget_s else None
        self.memo: dict = {}

    def __call__(self, pl: list[int]) -> tuple[float, list[bool] | None]:
        pin = pin_weights(self.w, self.soc, self.cost, pl, memo=self.memo) if self.cfg.weight_pinning else None
        plan = Plan(pl, self.order, None, None, pin, "h2h")
        lat = simulate(plan, self.w, self.soc, self.cost, validate=False).latency
        self.curve.add(lat)
        return lat, pin

    def exhausted(self) -> bool:
        """The evaluation budget is spent or the (optional) deadline passed."""
        cap = self.cfg.max_evaluations
        return ((cap is not None and self.curve.evaluations >= cap)
                or (self.deadline is not None and time.perf_counter() > self.deadline))


def _transfer_pass(w: Workload, soc: SoC, cost: CostTable, judge: _Judge, state: list) -> bool:
    """Step 3, one pass: edges by transfer time, largest first; a consumer moves to its producer's accelerator
    when that shortens the schedule. ``state`` = [placement, latency, pinned], updated in place."""
    pl0 = state[0]
    edges = sorted(((u, v) for (u, v) in w.edge_bytes if pl0[u] != pl0[v]),
                   key=lambda e: (-w.edge_bytes[e] / soc.bandwidth[pl0[e[0]], pl0[e[1]]], e))
    improved = False
    for u, v in edges:
        if judge.exhausted():
            break
        pl = state[0]
        a = pl[u]
        if pl[v] == a or not cost.supported[v, a]:
            continue
        trial = pl[:]
        trial[v] = a
        lat, pin = judge(trial)
        if lat < state[1]:
            state[:] = [trial, lat, pin]
            improved = True
    return improved


def _local_pass(w: Workload, soc: SoC, cost: CostTable, judge: _Judge, state: list) -> bool:
    """Step 4, one pass: each layer moves to the first accelerator one mesh hop away that shortens the schedule."""
    improved = False
    for v in range(len(w.layers)):
        for b in soc.neighbours(state[0][v]):
            if judge.exhausted():
                return improved
            if not cost.supported[v, b]:
                continue
            trial = state[0][:]
            trial[v] = b
            lat, pin = judge(trial)
            if lat < state[1]:
                state[:] = [trial, lat, pin]
                improved = True
                break
    return improved


def h2h(w: Workload, soc: SoC, cost: CostTable, cfg: H2HConfig | None = None) -> SearchResult:
    """Step 1 (with step 2 in every judgement), then passes of steps 3 and 4 until one improves nothing
    (converged), ``cfg.max_passes`` passes, or the evaluation budget is spent."""
    cfg = cfg or H2HConfig()
    t0 = time.perf_counter()
    placement, order = computation_first(w, soc, cost)
    judge = _Judge(w, soc, cost, order, cfg, t0)
    state = [placement, *judge(placement)]
    history = [state[1]]
    done = not (cfg.transfer_removal or cfg.local_search)
    passes = 0
    while not done and passes < cfg.max_passes and not judge.exhausted():
        improved = cfg.transfer_removal and _transfer_pass(w, soc, cost, judge, state)
        local = cfg.local_search and (cfg.local_search_rounds is None or passes < cfg.local_search_rounds)
        improved = (local and _local_pass(w, soc, cost, judge, state)) or improved
        passes += 1
        history.append(state[1])
        done = not improved and not judge.exhausted()  # a whole pass without an improving move
    plan = Plan(state[0], order, None, None, state[2], "h2h")
    return SearchResult("h2h", plan, simulate(plan, w, soc, cost), time.perf_counter() - t0, passes,
                        judge.curve.evaluations, history, cfg.max_evaluations, judge.curve.as_list(),
                        converged(judge.curve, cfg.max_evaluations, stopped_by_test=done))


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
