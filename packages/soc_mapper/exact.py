"""The exact optimum of small instances with OR-Tools CP-SAT (the yardstick of every algorithm's gap).

Model (the simulator's rules without barriers): each layer picks one supporting accelerator (an optional
interval per pair); per accelerator a cumulative constraint on streams (each task demands 1) and one on PEs;
for every edge u→v and every pair of accelerators (a, b), if u is on a and v on b then
start(v) ≥ end(u) + transfer(a, b). Minimise the makespan. Times are integers in ``tick_s`` units (default 1 ns),
rounded up, so the solver's optimum is within L·tick of the true one; the returned plan is re-judged by the
simulator (ordering the layers by the solver's start times).
"""
from __future__ import annotations

import math
import time

from .comb import SearchResult
from .cost import CostTable
from .errors import MapperError
from .simulator import Plan, simulate
from .soc import SoC
from .workload import Workload

MAX_EXACT_LAYERS = 24


def solve_exact(w: Workload, soc: SoC, cost: CostTable, time_limit_s: float = 30.0, tick_s: float = 1e-9,
                workers: int = 2) -> SearchResult:
    """Optimal placement and start times (``status`` in ``history``: the solver's bound first)."""
    try:
        from ortools.sat.python import cp_model
    except ImportError:
        raise MapperError("exact", "needs OR-Tools (pip install ortools; the project's 'search' extra)") from None
    L, A = len(w.layers), soc.n
    if L > MAX_EXACT_LAYERS:
        raise MapperError("exact.layers", f"{L} layers: the exact solver is for small instances "
                                          f"(≤ {MAX_EXACT_LAYERS}); take a subset with Workload.subset", L)
    t0 = time.perf_counter()
    m = cp_model.CpModel()
    dur = [[int(math.ceil(cost.latency[v, a] / tick_s)) if cost.supported[v, a] else None for a in range(A)]
           for v in range(L)]
    horizon = sum(max(d for d in row if d is not None) for row in dur)
    horizon += sum(int(math.ceil(b / soc.bandwidth.min() / tick_s)) for b in w.edge_bytes.values())
    start = [m.NewIntVar(0, horizon, f"s{v}") for v in range(L)]
    end = [m.NewIntVar(0, horizon, f"e{v}") for v in range(L)]
    x: dict[tuple[int, int], object] = {}
    per_acc: list[list[tuple[object, int]]] = [[] for _ in range(A)]
    for v in range(L):
        lits = []
        for a in range(A):
            if dur[v][a] is None:
                continue
            lit = m.NewBoolVar(f"x{v}_{a}")
            iv = m.NewOptionalIntervalVar(start[v], dur[v][a], end[v], lit, f"i{v}_{a}")
            x[v, a] = lit
            lits.append(lit)
            per_acc[a].append((iv, int(cost.pes[v, a])))
        m.AddExactlyOne(lits)
    for a in range(A):
        if per_acc[a]:
            ivs = [iv for iv, _ in per_acc[a]]
            m.AddCumulative(ivs, [1] * len(ivs), soc.accs[a].streams)
            m.AddCumulative(ivs, [p for _, p in per_acc[a]], soc.accs[a].num_pes)
    for (u, v), b in w.edge_bytes.items():
        for a in range(A):
            if (u, a) not in x:
                continue
            for c in range(A):
                if (v, c) not in x:
                    continue
                tr = int(math.ceil(b / soc.bandwidth[a, c] / tick_s))
                m.Add(start[v] >= end[u] + tr).OnlyEnforceIf([x[u, a], x[v, c]])
        m.Add(start[v] >= end[u])
    mk = m.NewIntVar(0, horizon, "makespan")
    m.AddMaxEquality(mk, end)
    m.Minimize(mk)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit_s)
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = 0
    status = solver.Solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise MapperError("exact", f"CP-SAT found no schedule in {time_limit_s} s (status "
                                   f"{solver.StatusName(status)})")
    placement = [next(a for a in range(A) if (v, a) in x and solver.Value(x[v, a])) for v in range(L)]
    starts = [solver.Value(start[v]) for v in range(L)]
    order = sorted(range(L), key=lambda v: (starts[v], v))
    plan = Plan(placement, order, None, None, None, "exact")
    res = simulate(plan, w, soc, cost)
    out = SearchResult("exact", plan, res, time.perf_counter() - t0,
                       history=[solver.BestObjectiveBound() * tick_s, solver.ObjectiveValue() * tick_s])
    out.optimal = status == cp_model.OPTIMAL  # type: ignore[attr-defined]
    out.solver_latency = solver.ObjectiveValue() * tick_s  # type: ignore[attr-defined]
    out.lower_bound = solver.BestObjectiveBound() * tick_s  # type: ignore[attr-defined]
    return out
