"""COMB's decoder: a topological order → windows (dynamic programming) → dataflow groups → placement.

dp[i] = min over j ≤ max_window of dp[i−j] + cost(order[i−j:i]). A window is split into its weakly connected
components (the dataflow groups; a window is rejected when some component has no accelerator able to run all of
its layers). Groups are placed longest first, each on the accelerator where it finishes earliest; several groups
share one accelerator while its streams and PEs last (spatial sharing). A barrier closes every window. A group
runs its layers one after another on one stream, with PEs = the most any of its layers needs; its inputs from
earlier windows arrive over the mesh from where the DP's chain placed their producers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from shared_ir.graph import gc_paused

from .cost import CostTable
from .profile import add as prof_add
from .profile import copy_profile, horizon, new_profile
from .profile import earliest as prof_earliest
from .profile import fold as prof_fold
from .simulator import Plan
from .soc import SoC
from .workload import Workload

INF = math.inf


@dataclass
class Group:
    """One dataflow group of a decoded window."""

    layers: tuple[int, ...]
    acc: int
    start: float
    finish: float
    occupancy: float
    """Σ latency × PEs of its layers / (accelerator PEs × group duration)."""


class DecodeContext:
    """Everything the decoder needs as plain Python lists (fast in the inner loops; picklable for workers)."""

    def __init__(self, w: Workload, soc: SoC, cost: CostTable, max_window: int = 20,
                 max_streams: int | None = None):
        self.L, self.A = len(w.layers), soc.n
        self.max_window = max_window
        self.lat = [[float(x) for x in row] for row in cost.latency]
        self.pes = [[int(x) for x in row] for row in cost.pes]
        self.sup = [[a for a in range(soc.n) if cost.supported[v, a]] for v in range(self.L)]
        self.mask = [sum(1 << a for a in s) for s in self.sup]
        self.succs = [list(s) for s in w.succs]
        self.succ_bytes = [[(s, float(w.edge_bytes[(v, s)])) for s in w.succs[v]] for v in range(self.L)]
        self.preds = [[(u, float(w.edge_bytes[(u, v)])) for u in w.preds[v]] for v in range(self.L)]
        self.inv_bw = [[1.0 / float(b) for b in row] for row in soc.bandwidth]
        self.npe = [a.num_pes for a in soc.accs]
        self.streams = [a.streams if max_streams is None else min(a.streams, max_streams) for a in soc.accs]
        self.max_streams = max_streams
        self.keep = 2 * KEEP_BOXES if max_window > 1 else 1 << 30
        """Breakpoints kept per accelerator profile along a chain; single-layer windows (one chain, one copy-on-
        write profile per step) keep all of them: list scheduling exactly as the simulator does it."""
        self.acc_bits = [[a for a in range(soc.n) if m >> a & 1] for m in range(1 << soc.n)] if soc.n <= 12 else None

    def __getstate__(self) -> dict:
        # the compiled decoder's tables (soc_mapper.fastsim) hold raw pointers: each worker builds its own
        return {k: v for k, v in self.__dict__.items() if k != "_fast"}

    def accs_of(self, mask: int) -> list[int]:
        if self.acc_bits is not None:
            return self.acc_bits[mask]
        return [a for a in range(self.A) if mask >> a & 1]


KEEP_BOXES = 48
"""Busy boxes remembered per accelerator along a DP chain (as 2 × KEEP_BOXES breakpoints of its usage profile);
the older past folds into a floor before which nothing new may start (keeps the state small and the estimate
conservative)."""


def _place_window(ctx: DecodeContext, stats, boxes: tuple | None,
                  limit: float = INF) -> tuple[float, list[tuple], tuple]:
    """Longest-first earliest-finish placement of a window's groups.

    ``stats``: per group [members, mask, sumlat, maxpes, busy, ready, key-dur, accs, key] (see :func:`decode`).
    ``boxes``: None for a window after a barrier (it starts at 0 with idle accelerators and ``ready`` holds
    transfer times), else (usage profiles, floors) of the accelerators carried from earlier windows (``ready``
    holds absolute arrival times). Returns (latest finish, placed groups as (members, acc, start, finish,
    occupancy), (profiles, floors)); gives up (inf) once a finish reaches ``limit``. Profiles are copied on
    write: the caller's state stays intact."""
    order = sorted(stats, key=lambda st: -st[8])
    A = ctx.A
    if boxes is None:
        prs: list = [new_profile() for _ in range(A)]
        floor = [0.0] * A
        own = [True] * A
    else:
        prs = list(boxes[0])
        floor = list(boxes[1])
        own = [False] * A
    streams, npe = ctx.streams, ctx.npe
    keep = ctx.keep
    span = 0.0
    placed = []
    for st in order:
        members, sumlat, pes, busy, ready, accs = st[0], st[2], st[3], st[4], st[5], st[7]
        ba, bf, bt = -1, INF, 0.0
        for a in accs:
            t0 = ready[a] if ready[a] > floor[a] else floor[a]
            d = sumlat[a]
            t = prof_earliest(prs[a], t0, d, pes[a], streams[a], npe[a])
            f = t + d
            if f < bf:
                ba, bf, bt = a, f, t
        if not own[ba]:
            prs[ba] = copy_profile(prs[ba])
            own[ba] = True
        pr = prs[ba]
        prof_add(pr, bt, bf, pes[ba])
        if len(pr[0]) > keep:
            fl = prof_fold(pr, keep)
            if fl is not None and fl > floor[ba]:
                floor[ba] = fl
        if bf > span:
            span = bf
            if span >= limit:
                return INF, [], (prs, floor)
        d = bf - bt
        placed.append((members, ba, bt, bf, busy[ba] / (npe[ba] * d) if d > 0 else 0.0))
    return span, placed, (prs, floor)


def decode(order: Sequence[int], ctx: DecodeContext, barriers: bool = False
           ) -> tuple[float, list[list[Group]], list[int]]:
    """(estimated latency, windows of placed groups, placement) of one chromosome.

    ``barriers=True`` is the reference's decoder: a barrier closes every window, dp[i] = dp[i−j] + window
    length. ``barriers=False`` (default) carries the accelerators' busy boxes and the layers' finish times along
    the DP chain instead of a barrier: each window's groups are placed longest first at their earliest finish
    given what earlier windows left (insertion into gaps), and dp[i] keeps the chain whose last window ends
    earliest (ties: least total accelerator load, then makespan). Inputs produced before a window are taken from
    the best chain ending just before the window's last layer (dp[i−1]): one lookup per step instead of one per
    (step, window size), which keeps the group statistics incremental as the window grows (the simulator judges
    the result). Accelerators are usage profiles (:mod:`soc_mapper.profile`), copied on write along the chain."""
    with gc_paused():
        return _decode(order, ctx, barriers)


def _decode(order: Sequence[int], ctx: DecodeContext, barriers: bool = False
            ) -> tuple[float, list[list[Group]], list[int]]:
    """The body of :func:`decode` (run with the cyclic GC paused)."""
    n, A = ctx.L, ctx.A
    pos = [0] * n
    for k, v in enumerate(order):
        pos[v] = k
    INFK = (INF, INF, INF)
    dp: list = [(0.0, 0.0, 0.0)] + [INFK] * n
    back = [0] * (n + 1)
    best_place: list = [None] * (n + 1)
    # chain state after step i: (placement, finish times, boxes per accelerator)
    chain: list = [None] * (n + 1)
    chain[0] = ([0] * n, [0.0] * n, ([new_profile() for _ in range(A)], [0.0] * A))
    J = ctx.max_window
    mask_of, preds, lat, pes_t, inv_bw = ctx.mask, ctx.preds, ctx.lat, ctx.pes, ctx.inv_bw
    succ_bytes = ctx.succ_bytes
    intra = [inv_bw[a][a] for a in range(A)]
    rA = range(A)
    for i in range(1, n + 1):
        prev, prev_fin, _ = chain[i - 1]
        parent: dict[int, int] = {}
        gstat: dict[int, list] = {}  # root -> [members, mask, sumlat, maxpes, busy, ready, dur, accs, key]
        new_state = None

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        def node_ready(v: int, lo: int) -> list[float]:
            out = [0.0] * A
            for u, b in preds[v]:
                if pos[u] < lo:  # produced in an earlier window: crosses the mesh (or stays local)
                    row = inv_bw[prev[u]]
                    base = 0.0 if barriers else prev_fin[u]
                    for a in rA:
                        t = base + b * row[a]
                        if t > out[a]:
                            out[a] = t
            return out

        lb = 0.0  # barrier mode: max over groups of their shortest duration, a lower bound on the window
        for j in range(1, min(J, i) + 1):
            lo = i - j
            x = order[lo]
            parent[x] = x
            lx = lat[x]
            px = pes_t[x]
            st = [[x], mask_of[x], lx[:], px[:], [lx[a] * px[a] if px[a] else 0.0 for a in rA], node_ready(x, lo)]
            gstat[x] = st
            merged = False
            for s, b in succ_bytes[x]:
                if lo < pos[s] < i:
                    rs = find(s)
                    rx = find(x)
                    g = gstat[rx]
                    if rs != rx:
                        o = gstat.pop(rs)
                        parent[rs] = rx
                        g[0] += o[0]
                        g[1] &= o[1]
                        g[2] = [p + q for p, q in zip(g[2], o[2])]
                        g[3] = [p if p > q else q for p, q in zip(g[3], o[3])]
                        g[4] = [p + q for p, q in zip(g[4], o[4])]
                        merged = True
                    # the edge stays inside the accelerator: intra-accelerator bandwidth
                    g[2] = [p + b * intra[a] for a, p in enumerate(g[2])]
            rx = find(x)
            g = gstat[rx]
            if g[1] == 0:
                break  # a component no accelerator can run whole; larger windows keep it
            if merged:  # x's consumers now get x's output inside the group: recompute the group's inputs
                rd = [0.0] * A
                for v in g[0]:
                    for a, t in enumerate(node_ready(v, lo)):
                        if t > rd[a]:
                            rd[a] = t
                g[5] = rd
            sl, rd = g[2], g[5]
            accs_x = ctx.accs_of(g[1])
            dur = [sl[a] + rd[a] for a in rA]
            key = min(dur[a] for a in accs_x)
            g[6:] = [dur, accs_x, key]
            if barriers:
                if key > lb:
                    lb = key  # groups only grow with j, so their shortest durations only grow
                base = dp[lo][0]
                if base + lb >= dp[i][0]:
                    continue
                span, placed, _ = _place_window(ctx, gstat.values(), None, dp[i][0] - base)
                cand = (base + span, 0.0, 0.0)
            else:
                _, _, boxes_lo = chain[lo]
                span, placed, bxs = _place_window(ctx, gstat.values(), boxes_lo)
                load = sum(horizon(p) for p in bxs[0])
                mk = max(dp[lo][2], span)
                cand = (span, load, mk)
            if cand < dp[i]:
                dp[i], back[i], best_place[i] = cand, lo, placed
                if not barriers:
                    new_state = bxs
        lo = back[i]
        pl2 = chain[lo][0][:]
        fin2 = chain[lo][1][:]
        base = dp[lo][0] if barriers else 0.0
        for g, a, t, f, _ in best_place[i]:
            for v in g:
                pl2[v] = a
                fin2[v] = base + f
        chain[i] = (pl2, fin2, new_state if new_state is not None else ([], []))
        if i - J - 1 > 0:
            chain[i - J - 1] = None  # no window reaches back further: free the memory
    windows: list[list[Group]] = []
    i = n
    while i > 0:
        lo = back[i]
        base = dp[lo][0] if barriers else 0.0
        windows.append([Group(tuple(sorted(g)), a, base + t, base + f, occ) for g, a, t, f, occ in best_place[i]])
        i = lo
    windows.reverse()
    return (dp[n][0] if barriers else dp[n][2]), windows, chain[n][0]


def windows_to_plan(windows: list[list[Group]], n: int, max_streams: int | None, algorithm: str = "comb",
                    barriers: bool = True) -> Plan:
    """Dispatch order = windows in turn, groups in placement (longest-first) order; one phase per window
    (``barriers``) or none."""
    order, phase, placement = [], [0] * n, [0] * n
    for k, win in enumerate(windows):
        for g in win:
            for v in sorted(g.layers, key=lambda v: v):  # layer indices are topological
                order.append(v)
                phase[v] = k
                placement[v] = g.acc
    return Plan(placement, order, phase if barriers else None, max_streams, None, algorithm)
