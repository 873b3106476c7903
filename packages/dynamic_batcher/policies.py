"""Batching policies behind one interface: ``policy.schedule(graph_view) -> list of batches`` (node id lists).

Every policy except depth-based runs on the same frontier simulator (:class:`Sim`): ready unbatchable nodes run
first, one at a time; then the policy picks a type and the batch is every ready node of that type (taking all
ready nodes of the chosen type never hurts: they are ready and running them earlier only frees more nodes).
On recorded graphs, a policy that does not need the type-wise counts (``fast_kwargs`` not None: critical path, the
DyNet agenda policies, the FSM with the critical-path fallback) runs on the compiled simulator of
:mod:`dynamic_batcher.fastsim` instead: the same schedule, node for node, with the per-node work in C.
"""
from __future__ import annotations

import heapq
from typing import Callable

from .errors import BatcherError, ConfigError
from .graph import GraphView

FAST = [True]  # use the compiled simulator where available (tests switch it off to compare)


class Sim:
    """Frontier state of a partial execution. ``typewise=True`` also maintains, per type t, the number of
    unexecuted type-t nodes with no unexecuted type-t ancestor (in-degree 0 in the reduced graph G_t)."""

    __slots__ = ("g", "indeg", "frontier", "ready", "unb", "executed", "typewise", "gindeg", "gsucc", "twcnt",
                 "ran")

    def __init__(self, g: GraphView, typewise: bool = False):
        self.g = g
        self.indeg = list(g.indeg)
        self.frontier: list[list[int]] = [[] for _ in range(g.ntypes)]
        self.ready: set[int] = set()  # batchable types with a non-empty frontier
        self.unb: list[int] = []
        self.executed = 0
        self.typewise = False
        self.ran: list[list[int]] = []  # executed batches (the executed set is only needed for lookahead/type-wise)
        if typewise:
            self.enable_typewise()
        for v in g.sources:
            self._push(v)

    def enable_typewise(self) -> None:
        """Start maintaining the type-wise frontier counts (from the current state; lazy for inference)."""
        if self.typewise:
            return
        g = self.g
        self.typewise = True
        if True:
            gs = getattr(g, "_gsucc", None)
            gp = g.typewise_preds()
            if gs is None:
                gs = [[] for _ in range(g.n)]
                for v, ps in enumerate(gp):
                    for p in ps:
                        gs[p].append(v)
                g._gsucc = gs
            self.gsucc = gs
            done = self.done
            if self.executed:
                self.gindeg = [sum(1 for p in ps if not done[p]) for ps in gp]
            else:
                self.gindeg = [len(p) for p in gp]
            self.twcnt = [0] * g.ntypes
            tw = self.twcnt
            for v, (t, d) in enumerate(zip(g.types, self.gindeg)):
                if t and not d and not done[v]:
                    tw[t] += 1

    @property
    def done(self) -> bytearray:
        """Executed flag per node (built on demand from the executed batches)."""
        d = bytearray(self.g.n)
        for b in self.ran:
            for v in b:
                d[v] = 1
        return d

    def clone(self) -> "Sim":
        """An independent copy of the frontier state (without type-wise counts), for lookahead."""
        c = Sim.__new__(Sim)
        c.g, c.indeg, c.frontier = self.g, list(self.indeg), [list(f) for f in self.frontier]
        c.ready, c.unb, c.executed, c.typewise, c.ran = set(self.ready), list(self.unb), self.executed, False, \
            list(self.ran)
        return c

    def _push(self, v: int) -> None:
        t = self.g.types[v]
        if t == 0:
            self.unb.append(v)
        else:
            self.frontier[t].append(v)
            self.ready.add(t)

    def _done(self, nodes: list[int]) -> None:
        # hot loop: everything local, no method calls per node
        indeg, succ, types, fr, ready, unb = self.indeg, self.g.succ, self.g.types, self.frontier, self.ready, self.unb
        self.ran.append(nodes)
        for v in nodes:
            for s in succ[v]:
                d = indeg[s] - 1
                indeg[s] = d
                if not d:
                    t = types[s]
                    if t:
                        f = fr[t]
                        if not f:
                            ready.add(t)
                        f.append(s)
                    else:
                        unb.append(s)
        self.executed += len(nodes)
        if self.typewise:
            gindeg, gsucc, tw = self.gindeg, self.gsucc, self.twcnt
            for v in nodes:
                t = types[v]
                if t:
                    tw[t] -= 1
                    for s in gsucc[v]:
                        d = gindeg[s] - 1
                        gindeg[s] = d
                        if not d:
                            tw[t] += 1

    def drain_unbatchable(self) -> list[list[int]]:
        """Run every ready unbatchable node (and those they free), one per batch."""
        out = []
        while self.unb:
            v = self.unb.pop(0)
            out.append([v])
            self._done([v])
        return out

    def step(self, t: int) -> list[int]:
        """Run the batch of every ready node of type t."""
        nodes = self.frontier[t]
        if not nodes:
            raise BatcherError(f"policy chose type {self.g.type_keys[t]} with an empty frontier")
        self.frontier[t] = []
        self.ready.discard(t)
        self._done(nodes)
        return nodes

    def count(self, t: int) -> int:
        """Frontier size of type t (the compiled simulator has the same method)."""
        return len(self.frontier[t])

    @property
    def finished(self) -> bool:
        return self.executed == self.g.n

    def ratio(self, t: int) -> float:
        """|frontier_t| / typewise_frontier_cnt[t]: 1 when the batch takes every type-t node batchable now."""
        return len(self.frontier[t]) / max(1, self.twcnt[t])


class Policy:
    """Base class. Subclasses implement :meth:`choose` (frontier policies) or override :meth:`schedule`."""

    name = "policy"
    typewise = False

    def prepare(self, g: GraphView) -> None:
        """Per-graph precomputation (e.g. mean depths)."""

    def choose(self, sim: Sim, ready: list[int]) -> int:
        raise NotImplementedError

    def after_step(self, sim: Sim, t: int, batch: list[int]) -> None:
        pass

    # --- compiled simulator (fastsim): same semantics, per-node work in C --------------------------------------
    def fast_kwargs(self, g: GraphView) -> dict | None:
        """What the policy needs from the compiled simulator (``heights`` / ``depths``), or None when it can only
        run on the Python :class:`Sim` (e.g. it needs the type-wise counts)."""
        return None

    def choose_fast(self, fs, ready: list[int]) -> int:
        raise NotImplementedError

    def after_step_fast(self, fs, t: int) -> None:
        pass

    def _schedule_fast(self, g: GraphView, kw: dict) -> list[list[int]]:
        from .fastsim import FastSim, flat_schedule

        fs = FastSim(g, **kw)
        choose, after = self.choose_fast, self.after_step_fast
        hook = type(self).after_step_fast is not Policy.after_step_fast
        nxt = fs.next
        ready = nxt(-1)
        while ready:
            t = ready[0] if len(ready) == 1 else choose(fs, ready)
            ready = nxt(t)
            if ready is None:
                raise BatcherError(f"policy chose type {g.type_keys[t]} with an empty frontier")
            if hook:
                after(fs, t)
        if fs.executed != g.n:
            raise BatcherError(f"{self.name}: schedule stopped with {g.n - fs.executed} nodes left")
        return flat_schedule(fs)

    def schedule(self, g: GraphView) -> list[list[int]]:
        self.prepare(g)
        if getattr(g, "dyn", None) is not None and FAST[0]:
            kw = self.fast_kwargs(g)
            if kw is not None:
                from . import fastsim

                if fastsim.available():
                    return self._schedule_fast(g, kw)
        sim = Sim(g, typewise=self.typewise)
        out: list[list[int]] = []
        while True:
            out.extend(sim.drain_unbatchable())
            if not sim.ready:
                break
            ready = sorted(sim.ready)
            t = ready[0] if len(ready) == 1 else self.choose(sim, ready)
            b = sim.step(t)
            self.after_step(sim, t, b)
            out.append(b)
        if not sim.finished:  # cannot happen on a DAG; guards a corrupted graph view
            raise BatcherError(f"{self.name}: schedule stopped with {g.n - sim.executed} nodes left")
        return out


class NoBatching(Policy):
    """Every node alone, in topological order."""

    name = "no_batching"

    def schedule(self, g: GraphView) -> list[list[int]]:
        return [[v] for v in g.topo]


class DepthBased(Policy):
    """DyNet depth-based: group by (depth, signature), run in order of increasing depth."""

    name = "dynet_depth"

    def schedule(self, g: GraphView) -> list[list[int]]:
        depth, types = g.depth, g.types
        groups: dict[tuple[int, int], list[int]] = {}
        out_unb: dict[int, list[list[int]]] = {}
        for v in range(g.n):
            if types[v] == 0:
                out_unb.setdefault(depth[v], []).append([v])
            else:
                groups.setdefault((depth[v], types[v]), []).append(v)
        out: list[list[int]] = []
        for d in sorted(set(depth)):
            out.extend(out_unb.get(d, ()))
            out.extend(groups[k] for k in sorted(k for k in groups if k[0] == d))
        return out


_MATMUL_LIKE = ("linear", "matmul", "block")


def _mean_depths(g: GraphView) -> list[float]:
    s = [0.0] * g.ntypes
    c = [0] * g.ntypes
    for t, d in zip(g.types, g.depth):
        s[t] += d
        c[t] += 1
    return [s[t] / c[t] if c[t] else 0.0 for t in range(g.ntypes)]


class Agenda(Policy):
    """DyNet agenda-based: the ready signature with the lowest mean depth; ties defer matmul-like ops."""

    name = "dynet_agenda"

    def prepare(self, g: GraphView) -> None:
        md = _mean_depths(g)
        self._key = [(md[t], any(g.type_keys[t].startswith(k) for k in _MATMUL_LIKE), t) for t in range(g.ntypes)]

    def choose(self, sim: Sim, ready: list[int]) -> int:
        return min(ready, key=self._key.__getitem__)

    def fast_kwargs(self, g: GraphView) -> dict | None:
        return {}

    def choose_fast(self, fs, ready: list[int]) -> int:
        return min(ready, key=self._key.__getitem__)


class AgendaDepth(Agenda):
    """Agenda with the depth constraint: a signature is eligible only when none of its unexecuted nodes lies at
    a lower depth than its ready ones."""

    name = "dynet_agenda_depth"

    def prepare(self, g: GraphView) -> None:
        super().prepare(g)
        self._depth = g.depth
        rem: list[dict[int, int]] = [dict() for _ in range(g.ntypes)]
        for v, d in enumerate(g.depth):
            r = rem[g.types[v]]
            r[d] = r.get(d, 0) + 1
        self._rem = rem
        self._heaps = [sorted(r) for r in rem]
        self._seen: dict[int, list] = {}

    def _min_rem(self, t: int) -> int:
        h, r = self._heaps[t], self._rem[t]
        while h and not r.get(h[0]):
            heapq.heappop(h)
        return h[0] if h else 1 << 30

    def choose(self, sim: Sim, ready: list[int]) -> int:
        # the min depth of a frontier is kept incrementally (frontier lists only grow until their type runs), the
        # same bookkeeping as the critical-path heuristic: no O(frontier) rescan per type per step
        dep, fr, seen = self._depth.__getitem__, sim.frontier, self._seen
        ok = []
        for t in ready:
            f = fr[t]
            c = seen.get(t)
            if c is None or c[0] is not f:
                c = seen[t] = [f, len(f), min(map(dep, f))]
            elif c[1] < len(f):
                m = min(map(dep, f[c[1]:]))
                if m < c[2]:
                    c[2] = m
                c[1] = len(f)
            if c[2] <= self._min_rem(t):
                ok.append(t)
        return min(ok or ready, key=self._key.__getitem__)

    def after_step(self, sim: Sim, t: int, batch: list[int]) -> None:
        r, dep = self._rem[t], self._depth
        for v in batch:
            r[dep[v]] -= 1

    def fast_kwargs(self, g: GraphView) -> dict | None:
        return {"depths": True}

    def choose_fast(self, fs, ready: list[int]) -> int:
        # the frontier's min depth is kept by the simulator (same test as choose)
        mind, mr = fs.mind, self._min_rem
        ok = [t for t in ready if mind(t) <= mr(t)]
        return min(ok or ready, key=self._key.__getitem__)

    def after_step_fast(self, fs, t: int) -> None:
        r, dep = self._rem[t], self._depth
        for v in fs.last_batch():
            r[dep[v]] -= 1


class TypewiseLB(Policy):
    """Type-wise lower-bound heuristic: prefer a type whose batch takes every type-t node that could ever be
    batched now (ratio 1, reward 0); otherwise the largest ratio; ties: larger frontier, then type id."""

    name = "typewise_lb"
    typewise = True

    def rank(self, sim: Sim, t: int) -> tuple:
        # no depth-based tie-break: it would cost a pass over the graph per minibatch for rare ties
        return (-sim.ratio(t), -len(sim.frontier[t]), t)

    def choose(self, sim: Sim, ready: list[int]) -> int:
        return min(ready, key=lambda t: self.rank(sim, t))


class CriticalPath(Policy):
    """Cheap critical-path heuristic: the ready type whose frontier holds the node with the longest path to a sink
    (ties: larger frontier, then type id). Needs one reverse pass for heights and no reduced per-type graphs, so
    it is the FSM's cheap fallback; on lattices (chains of differently typed cells, a shortest-common-supersequence
    problem) it finds fewer batches than the type-wise heuristic, elsewhere the same."""

    name = "critical_path"

    def prepare(self, g: GraphView) -> None:
        self._g = g
        self._h = None  # heights: computed on the first Python-simulator decision (the compiled one has its own)
        self._seen: dict[int, list] = {}  # t -> [frontier list, nodes scanned, max height]: frontiers only grow
        self.decisions = 0
        """Choices among several ready types in the last schedule."""

    def choose(self, sim: Sim, ready: list[int]) -> int:
        self.decisions += 1
        if self._h is None:
            self._h = sim.g.height
        h, fr, seen = self._h.__getitem__, sim.frontier, self._seen
        best, bk = ready[0], None
        for t in ready:
            f = fr[t]
            c = seen.get(t)
            if c is None or c[0] is not f:  # a new frontier list (the type ran since): rescan
                c = seen[t] = [f, len(f), max(map(h, f))]
            elif c[1] < len(f):  # only the appended tail is new
                m = max(map(h, f[c[1]:]))
                if m > c[2]:
                    c[2] = m
                c[1] = len(f)
            k = (c[2], c[1])
            if bk is None or k > bk:
                best, bk = t, k
        return best

    def fast_kwargs(self, g: GraphView) -> dict | None:
        return {"heights": True}

    def choose_fast(self, fs, ready: list[int]) -> int:
        return fs.cp()

    def _schedule_fast(self, g: GraphView, kw: dict) -> list[list[int]]:
        # the whole schedule in one compiled call (each decision is the simulator's own choice: no Python per step)
        from .fastsim import FastSim, flat_schedule

        fs = FastSim(g, **kw)
        self.decisions = fs.run_cp()
        return flat_schedule(fs)


class Rollout(Policy):
    """Pilot method (offline reference, not for inference): at every decision try each ready type, finish the
    schedule with the critical-path heuristic, keep the type with the fewest batches. Costs |ready| full
    simulations per decision (about a second on a 32-lattice minibatch), so it only shows how far a better
    policy could go."""

    name = "rollout"

    def __init__(self):
        self.base = CriticalPath()

    def prepare(self, g: GraphView) -> None:
        self.base.prepare(g)

    def _finish(self, sim: Sim) -> int:
        n = 0
        while True:
            n += len(sim.drain_unbatchable())
            if not sim.ready:
                return n
            ready = sorted(sim.ready)
            sim.step(ready[0] if len(ready) == 1 else self.base.choose(sim, ready))
            n += 1

    def choose(self, sim: Sim, ready: list[int]) -> int:
        best = None
        for t in ready:
            c = sim.clone()
            c.step(t)
            n = self._finish(c)
            if best is None or n < best[0]:
                best = (n, t)
        return best[1]


def _zobrist(n: int) -> list[int]:
    """The compiled search's Zobrist keys (xorshift64 then a multiply), so both paths dedupe identically."""
    M = (1 << 64) - 1
    x, out = 0x9E3779B97F4A7C15, []
    for _ in range(n):
        x ^= (x << 13) & M
        x ^= x >> 7
        x ^= (x << 17) & M
        out.append((x * 0x2545F4914F6CDD1D) & M)
    return out


def head_tail_types(g: GraphView) -> tuple[list[int], list[int]]:
    """Types a search over type sequences can leave out (the Python twin of ``fastsim``'s ``head_tail``): head
    types (only source nodes: one batch first) and tail types in a runnable order (their nodes feed only tail
    nodes, at most one of each type on any path, no type cycle: one batch each at the end). Both reach their
    type's minimum of one batch, and the rest of an optimal schedule is an optimal schedule of the other types."""
    nt, types, succ = g.ntypes, g.types, g.succ
    role = [0] + [1] * (nt - 1)
    for v, ps in enumerate(g.preds):
        if ps:
            role[types[v]] = 0
    best = g._maxpath_counts(range(g.n))
    for t in range(1, nt):
        if not role[t] and best.get(t, 0) == 1:
            role[t] = 2
    while True:
        changed = True
        while changed:
            changed = False
            for v in range(g.n):
                if role[types[v]] == 2 and any(role[types[w]] != 2 for w in succ[v]):
                    role[types[v]] = 0
                    changed = True
        edge = {(types[v], types[w]) for v in range(g.n) if role[types[v]] == 2 for w in succ[v]}
        indeg = [0] * nt
        for a, b in edge:
            if a != b:
                indeg[b] += 1
        tails = [t for t in range(nt) if role[t] == 2]
        order = [t for t in tails if not indeg[t]]
        i = 0
        while i < len(order):
            for b in range(nt):
                if b != order[i] and (order[i], b) in edge:
                    indeg[b] -= 1
                    if not indeg[b]:
                        order.append(b)
            i += 1
        if len(order) == len(tails):
            return [t for t in range(1, nt) if role[t] == 1], order
        for t in tails:
            if indeg[t] > 0:
                role[t] = 0


def beam_types_py(g: GraphView, width: int, power: int) -> list[int]:
    """The Python twin of the compiled beam search (``fastsim``'s ``dbs_beam``; same scores, ties and
    duplicate detection, so the same type sequence). A state is an executed set; a move runs every ready node of
    one type and then the unbatchable nodes it frees. Score: Σ_k r_k^power over instances k, r_k = the largest
    height of an unexecuted node of k. All unexecuted nodes at height r_k are ready, so a move of type t lowers
    r_k by exactly one when they all have type t and leaves it otherwise: children are scored without being built
    and only the ``width`` best distinct ones are."""
    n, types, succ, preds, h = g.n, g.types, g.succ, g.preds, g.height
    heads, tails = head_tail_types(g)
    left_out = set(heads) | set(tails)
    comp = [0] * n
    comps = g.components()
    for k, c in enumerate(sorted(comps, key=min)):  # numbered by first node id, as in C
        for v in c:
            comp[v] = k
    K = len(comps)
    levels: list[dict[int, list[int]]] = [dict() for _ in range(K)]
    maxh = [0] * K
    for v in range(n):
        if types[v] not in left_out:  # the search's (core) nodes only, as in C
            levels[comp[v]].setdefault(h[v], []).append(v)
            maxh[comp[v]] = max(maxh[comp[v]], h[v])
    # integer scores, exact in any summation order; the power is lowered until hmax^power * (K + 1) fits 62 bits
    hmax, lim = max(maxh, default=0), (1 << 62) // (K + 1)
    while power > 1 and hmax ** power > lim:
        power -= 1
    pw = [r ** power for r in range(hmax + 1)]
    Z = _zobrist(n)

    class St:
        __slots__ = ("ex", "rd", "r", "crit", "cnt", "zr", "hz", "score", "n0", "seq")

    def ready(S: St, w: int, queue: list[int]) -> None:
        S.rd[w] = 1
        if types[w] == 0:
            queue.append(w)  # unbatchable: run at once, one per batch
        else:
            S.cnt[types[w]] += 1
            S.zr[types[w]] ^= Z[w]

    def run(S: St, v: int, queue: list[int], touched: dict) -> None:
        S.ex[v] = 1
        S.rd[v] = 0
        touched[comp[v]] = True
        for w in succ[v]:
            if not (S.ex[w] or S.rd[w]) and all(S.ex[p] for p in preds[w]):
                ready(S, w, queue)

    def settle(S: St, k: int, r: int) -> tuple[int, int]:
        while True:
            cm = 0
            for v in levels[k].get(r, ()):
                if not S.ex[v]:
                    cm |= 1 << types[v]
            if cm or r == 0:
                return r, cm
            r -= 1

    S0 = St()
    S0.ex, S0.rd = bytearray(n), bytearray(n)
    S0.cnt, S0.zr, S0.hz, S0.n0, S0.seq = [0] * g.ntypes, [0] * g.ntypes, 0, 0, []
    for v in range(n):
        if types[v] in left_out:
            S0.ex[v] = 1
    queue: list[int] = []
    for v in range(n):
        if not S0.ex[v] and all(S0.ex[p] for p in preds[v]):
            ready(S0, v, queue)
    while queue:
        S0.n0 += 1
        run(S0, queue.pop(0), queue, {})
    S0.r, S0.crit = [0] * K, [0] * K
    for k in range(K):
        S0.r[k], S0.crit[k] = settle(S0, k, maxh[k])
    S0.score = sum(pw[r] for r in S0.r)
    beam = [S0]
    while True:
        for S in beam:
            if not any(S.cnt[1:]):
                return heads + S.seq + tails
        cands = []
        for i, S in enumerate(beam):
            delta = [0] * g.ntypes
            for k in range(K):
                c, r = S.crit[k], S.r[k]
                if c and not c & (c - 1) and r > 0:
                    delta[c.bit_length() - 1] += pw[r] - pw[r - 1]
            for t in range(1, g.ntypes):
                if S.cnt[t]:
                    cands.append((S.score - delta[t], i, t, S.hz ^ S.zr[t]))
        cands.sort(key=lambda c: c[:3])
        nxt: list[St] = []
        seen: set[int] = set()
        for score, i, t, hz in cands:
            if len(nxt) >= width:
                break
            if hz in seen:
                continue
            seen.add(hz)
            P, C = beam[i], St()
            C.ex, C.rd, C.r, C.crit = bytearray(P.ex), bytearray(P.rd), list(P.r), list(P.crit)
            C.cnt, C.zr, C.hz, C.n0, C.seq = list(P.cnt), list(P.zr), hz, P.n0, P.seq + [t]
            C.cnt[t] = C.zr[t] = 0
            queue, touched = [], {}
            for v in range(n):
                if P.rd[v] and types[v] == t:
                    run(C, v, queue, touched)
            while queue:
                C.n0 += 1
                run(C, queue.pop(0), queue, touched)
            C.score = P.score
            for k in touched:
                C.r[k], C.crit[k] = settle(C, k, C.r[k])
                C.score += pw[C.r[k]] - pw[P.r[k]]
            nxt.append(C)
        beam = nxt


class BeamSearch(Policy):
    """Beam search over type sequences (``width`` states kept per step, score Σ_k r_k^power, see
    :func:`beam_types_py`). On lattices, where the frontier-type states alias and one-step rules stop at
    1.2-1.3 × the lower bound, it finds schedules within a few percent of proven bounds; the FSM runs it as its
    search step. Compiled (``fastsim``) when available: ~1 ms on a 4k-node minibatch at width 32."""

    name = "beam"

    def __init__(self, width: int = 32, power: int = 6):
        if width < 1:
            raise ConfigError("beam.width", f"must be >= 1, got {width!r}")
        if power < 1:
            raise ConfigError("beam.power", f"must be >= 1, got {power!r}")
        self.width, self.power = int(width), int(power)

    def types(self, g: GraphView) -> list[int]:
        """The chosen type sequence (compiled search when available, else the Python twin)."""
        if FAST[0] and g.ntypes <= 64:
            from . import fastsim

            if fastsim.available():
                seq = fastsim.FastSim(g).beam(self.width, self.power)
                if seq is not None:
                    return seq
        return beam_types_py(g, self.width, self.power)

    def schedule(self, g: GraphView) -> list[list[int]]:
        return self.search(g)[1]

    def search(self, g: GraphView, threshold: int | None = None, like=None) -> tuple[int, list[list[int]] | None]:
        """(type-wise lower bound, the search's schedule); with ``threshold`` (the batches of a schedule in hand)
        the search only runs when the bound is below it (else None). Recorded graphs: bound, search and replay in
        one compiled call (``like``: a compiled schedule of ``g`` whose simulator arrays can be copied)."""
        if FAST[0] and g.ntypes <= 64 and getattr(g, "dyn", None) is not None:
            from . import fastsim

            if fastsim.available():
                src = getattr(like, "fs", None)
                fs = src.fresh() if isinstance(src, fastsim.FastSim) and src.h else fastsim.FastSim(g)
                lb, nb = fs.search(self.width, self.power, g.n + 1 if threshold is None else threshold)
                if nb is not None:
                    return lb, fastsim.flat_schedule(fs)
                if lb >= 0 and threshold is not None and lb >= threshold:
                    return lb, None
        lb = g.lower_bound()
        if threshold is not None and lb >= threshold:
            return lb, None
        return lb, FixedSequence(self.types(g), self.name).schedule(g)


class FixedSequence(Policy):
    """Replays a sequence of type choices on the frontier simulator (each step: every ready node of that type,
    then the unbatchable nodes it frees)."""

    def __init__(self, seq: list[int], name: str = "sequence"):
        self.seq, self.name = list(seq), name

    def _bad(self, t: int) -> BatcherError:
        return BatcherError(f"{self.name}: type sequence does not match the graph (type {t} has no ready node)")

    def schedule(self, g: GraphView) -> list[list[int]]:
        if getattr(g, "dyn", None) is not None and FAST[0]:
            from . import fastsim

            if fastsim.available():
                fs = fastsim.FastSim(g)
                fs.next(-1)
                for t in self.seq:
                    if fs.next(t) is None:
                        raise self._bad(t)
                if fs.executed != g.n:
                    raise BatcherError(f"{self.name}: schedule stopped with {g.n - fs.executed} nodes left")
                return fastsim.flat_schedule(fs)
        sim = Sim(g)
        out = sim.drain_unbatchable()
        for t in self.seq:
            if not sim.frontier[t]:
                raise self._bad(t)
            out.append(sim.step(t))
            out.extend(sim.drain_unbatchable())
        if not sim.finished:
            raise BatcherError(f"{self.name}: schedule stopped with {g.n - sim.executed} nodes left")
        return out


class FixedSchedule(Policy):
    """Replays a precomputed schedule (used by caching and by the exact search)."""

    def __init__(self, batches: list[list[int]], name: str = "fixed"):
        self.batches = batches
        self.name = name

    def schedule(self, g: GraphView) -> list[list[int]]:
        return [list(b) for b in self.batches]


def exact_optimum(g: GraphView, max_states: int = 200_000) -> list[list[int]] | None:
    """Minimum-batch schedule by A* over executed-node sets (h = lower bound of the remaining subgraph).

    Returns None when the search exceeds ``max_states`` (only meant for small graphs)."""
    n = g.n
    if n > 62:
        return None
    pm = [0] * n
    for v, ps in enumerate(g.preds):
        for p in ps:
            pm[v] |= 1 << p
    full = (1 << n) - 1
    types = g.types
    hcache: dict[int, int] = {}

    def h(state: int) -> int:
        if state not in hcache:
            hcache[state] = g.lower_bound_of([v for v in range(n) if not state >> v & 1])
        return hcache[state]

    best_g = {0: 0}
    parent: dict[int, tuple[int, list[int]]] = {}
    heap = [(h(0), 0, 0)]
    expanded = 0
    while heap:
        f, gcost, st = heapq.heappop(heap)
        if st == full:
            out = []
            while st:
                st, b = parent[st]
                out.append(b)
            return out[::-1]
        if gcost > best_g.get(st, 1 << 30):
            continue
        expanded += 1
        if expanded > max_states:
            return None
        byt: dict[int, list[int]] = {}
        for v in range(n):
            if not st >> v & 1 and pm[v] & ~st == 0:
                byt.setdefault(types[v], []).append(v)
        moves = [[v] for v in byt.pop(0, [])] + list(byt.values())
        for b in moves:
            ns = st
            for v in b:
                ns |= 1 << v
            ng = gcost + 1
            if ng < best_g.get(ns, 1 << 30):
                best_g[ns] = ng
                parent[ns] = (st, b)
                heapq.heappush(heap, (ng + h(ns), ng, ns))
    return None


class ExactSearch(Policy):
    """Optimal number of batches by search; raises for graphs too large to search."""

    name = "exact"

    def __init__(self, max_states: int = 200_000):
        self.max_states = max_states

    def schedule(self, g: GraphView) -> list[list[int]]:
        s = exact_optimum(g, self.max_states)
        if s is None:
            raise BatcherError(f"exact search: graph of {g.n} nodes is too large (state limit {self.max_states})")
        return s


POLICIES: dict[str, Callable[[], Policy]] = {
    "no_batching": NoBatching, "dynet_depth": DepthBased, "dynet_agenda": Agenda,
    "dynet_agenda_depth": AgendaDepth, "typewise_lb": TypewiseLB, "critical_path": CriticalPath,
    "rollout": Rollout, "beam": BeamSearch,
    "exact": ExactSearch,
}
DYNET_BASELINES = ("dynet_depth", "dynet_agenda", "dynet_agenda_depth")


def make_policy(name: str) -> Policy:
    if name not in POLICIES:
        raise BatcherError(f"policy: unknown policy {name!r}; expected one of {sorted(POLICIES)} or an FSMPolicy")
    return POLICIES[name]()


def check_schedule(g: GraphView, batches: list[list[int]]) -> None:
    """Validate a schedule: every node once, dependencies respected, one type per batch."""
    done = [False] * g.n
    for i, b in enumerate(batches):
        ts = {g.types[v] for v in b}
        if len(ts) != 1 or (0 in ts and len(b) != 1):
            raise BatcherError(f"schedule batch {i}: mixes types or batches an unbatchable node: "
                               f"{[g.name(v) for v in b]}")
        for v in b:
            if done[v]:
                raise BatcherError(f"schedule batch {i}: node {g.name(v)} scheduled twice")
            for p in g.preds[v]:
                if not done[p]:
                    raise BatcherError(f"schedule batch {i}: node {g.name(v)} runs before its argument {g.name(p)}")
        for v in b:
            done[v] = True
    if not all(done):
        raise BatcherError(f"schedule misses node {g.name(done.index(False))}")


__all__ = ["FAST", "Sim", "Policy", "NoBatching", "DepthBased", "Agenda", "AgendaDepth", "TypewiseLB", "CriticalPath",
           "Rollout", "BeamSearch", "FixedSequence", "beam_types_py", "head_tail_types", "FixedSchedule",
           "ExactSearch", "exact_optimum", "POLICIES", "DYNET_BASELINES", "make_policy", "check_schedule"]
