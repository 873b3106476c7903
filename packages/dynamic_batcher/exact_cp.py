"""Exact minimum number of batches by constraint programming (OR-tools CP-SAT), for graphs too large for the A*
search in :func:`dynamic_batcher.policies.exact_optimum`.

Model: node v runs in slot s_v (one-hot over its window [depth_v, K - 1 - height_v], K = a heuristic's batch count);
an edge u -> v needs s_u < s_v; every slot holds one type (unbatchable nodes get a private type); minimise the
makespan M > s_v. Empty slots can be squeezed out of any schedule, so min M = min #batches. CP-SAT's proven
objective bound is a valid lower bound on the number of batches even when the time limit stops it before
optimality: that is how we show where the type-wise lower bound is loose.
"""
from __future__ import annotations

import time
from typing import Any

from .errors import BatcherError
from .graph import GraphView


def exact_cpsat(g: GraphView, upper: list[list[int]] | None = None, time_limit: float = 20.0,
                workers: int = 1, seed: int = 0) -> dict[str, Any]:
    """Solve; returns ``status`` (OPTIMAL / FEASIBLE / UNKNOWN), ``batches`` (best found), ``bound`` (proven lower
    bound), ``schedule`` (node lists) and ``seconds``. ``upper``: a valid schedule used as hint and slot budget."""
    try:
        from ortools.sat.python import cp_model
    except ImportError as e:  # optional dependency
        raise BatcherError(f"exact_cpsat needs ortools ({e})") from None
    from .policies import CriticalPath, check_schedule

    t0 = time.perf_counter()
    if upper is None:
        upper = CriticalPath().schedule(g)
    check_schedule(g, upper)
    K = len(upper)
    depth, height, types = g.depth, g.height, g.types
    m = cp_model.CpModel()
    x: list[dict[int, Any]] = []
    slot_types: list[dict[int, Any]] = [dict() for _ in range(K)]
    s_expr = []
    for v in range(g.n):
        t = types[v] if types[v] else -(v + 1)  # an unbatchable node is alone in its slot
        lo, hi = depth[v], K - 1 - height[v]
        if lo > hi:
            raise BatcherError(f"exact_cpsat: node {g.name(v)} has an empty slot window [{lo}, {hi}]")
        xv = {}
        for k in range(lo, hi + 1):
            b = m.NewBoolVar("")
            y = slot_types[k].get(t)
            if y is None:
                y = slot_types[k][t] = m.NewBoolVar("")
            m.AddImplication(b, y)
            xv[k] = b
        m.AddExactlyOne(xv.values())
        x.append(xv)
        s_expr.append(sum(k * b for k, b in xv.items()))
    for k in range(K):
        if len(slot_types[k]) > 1:
            m.AddAtMostOne(slot_types[k].values())
    for v, ps in enumerate(g.preds):
        for u in ps:
            m.Add(s_expr[v] >= s_expr[u] + 1)
    M = m.NewIntVar(0, K, "M")
    for v in range(g.n):
        if not g.succ[v]:
            m.Add(M >= s_expr[v] + 1)
    m.Minimize(M)
    # complete hint: the heuristic's schedule (a partial hint often leaves CP-SAT without a first solution)
    at = {v: i for i, b in enumerate(upper) for v in b}
    for v, xv in enumerate(x):
        for k, b in xv.items():
            m.AddHint(b, 1 if k == at[v] else 0)
    for k, ys in enumerate(slot_types):
        tk = types[upper[k][0]] if types[upper[k][0]] else -(upper[k][0] + 1)
        for t, y in ys.items():
            m.AddHint(y, 1 if t == tk else 0)
    m.AddHint(M, K)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit)
    solver.parameters.num_workers = int(workers)
    solver.parameters.random_seed = int(seed)
    st = solver.Solve(m)
    status = solver.StatusName(st)
    out: dict[str, Any] = {"status": status, "nodes": g.n, "slots": K, "bound": int(round(solver.BestObjectiveBound())),
                           "batches": None, "schedule": None}
    if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        slots: dict[int, list[int]] = {}
        for v, xv in enumerate(x):
            k = next(k for k, b in xv.items() if solver.BooleanValue(b))
            slots.setdefault(k, []).append(v)
        sched = [slots[k] for k in sorted(slots)]
        # split any slot holding several unbatchable nodes (cannot happen: private types) and validate
        check_schedule(g, sched)
        out["batches"] = len(sched)
        out["schedule"] = sched
        if status == "OPTIMAL":
            out["bound"] = len(sched)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


__all__ = ["exact_cpsat"]
