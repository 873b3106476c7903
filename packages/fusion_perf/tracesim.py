"""Reference trace simulator for fusion_perf (small sizes): the exactness check of the tests and the benchmark.

It executes the mapping tree loop by loop and point by point, keeps the actual set of elements held by every
slot instance, and counts every transfer with the buffer semantics documented in ``fusion_perf.model``:
fills of new elements on each arrival at a slot node, drains of leaving output elements, emptying below
Sequential scopes, final drains, multicast/reduction of identical sets among sibling instances, and one compute
access per point and operand (shared among PEs reading the same element at the same step). Under the reference
semantics (:mod:`fusion_perf.semantics`) arriving output elements are also filled from the parent, drains read
nothing at the child, and each compute update also reads its partial sum.

It shares only the *placement* decision (which (tensor, node) slots exist, their level, role and parent) with the
model; all counting is done here by enumeration, never by formula. Under TileFlow's own analysis
(``nest_calls``) it is :func:`simulate_calls`: TileFlow's calls enumerated one by one.
"""
from __future__ import annotations

import itertools
from collections import defaultdict

from fusion_perf.model import ROOT, Compiled


class TraceSimulator:
    def __init__(self, comp: Compiled):
        self.c = comp
        self.P = comp.problem
        self.slots_at = defaultdict(list)
        for key, s in comp.slots.items():
            self.slots_at[s.node].append(key)
        self.inner = {(o, t): key for (o, t, key, is_out) in comp.compute_links}
        self.anc = {n.id: set(comp._anc(n.id)[:-1]) for n in comp.nodes}
        self.anc[ROOT] = set()

    def run(self, x):
        c = self.c
        self.F = list(x)
        self.state = {}  # (slot key, inst) -> frozenset of elements
        self.moves = defaultdict(set)  # (slot, parent inst, marker) -> distinct moved sets
        self.refills = defaultdict(set)  # output slots refilled from the parent (reference semantics), likewise
        self.compute = defaultdict(set)  # (slot, tensor-role, inst, time) -> elements
        L = len(c.arch.levels)
        self.reads = [defaultdict(int) for _ in range(L)]
        self.fills = [defaultdict(int) for _ in range(L)]
        self.upd = [defaultdict(int) for _ in range(L)]
        base = {d: 0 for d in self.P.dims}
        rem = dict(self.P.dims)
        self._node(0, base, rem, (), ())
        for (key, inst), cur in list(self.state.items()):
            s = c.slots[key]
            if s.role == "out" and cur:
                self._moved(key, inst, ("end",), cur)
        # settle grouped counts
        for (key, pinst, marker), sets in self.moves.items():
            s = c.slots[key]
            ps = c.slots[s.parent]
            n = sum(len(m) for m in sets if m)
            if s.role == "in":
                self.reads[ps.level][s.tensor] += n
            else:
                self.upd[ps.level][s.tensor] += n
        for (key, pinst, marker), sets in self.refills.items():
            self.reads[c.slots[c.slots[key].parent].level][c.slots[key].tensor] += sum(len(m) for m in sets if m)
        for (key, out, inst, time), elems in self.compute.items():
            s = c.slots[key]
            (self.upd if out else self.reads)[s.level][s.tensor] += len(elems)
            if out and c.arch.semantics.psum_round_trip:  # each update reads its partial sum first
                self.reads[s.level][s.tensor] += len(elems)
        res = {}
        for lv in range(L):
            for t in set(self.reads[lv]) | set(self.fills[lv]) | set(self.upd[lv]):
                r, f, u = self.reads[lv][t], self.fills[lv][t], self.upd[lv][t]
                if r or f or u:
                    res[(c.arch.levels[lv].name, t)] = {"reads": r, "fills": f, "updates": u, "writes": f + u}
        return res

    # --- helpers --------------------------------------------------------------------------------------------
    def _inst_above(self, inst, node):
        a = self.anc[node] if node != ROOT else set()
        return tuple(e for e in inst if e[0] in a)

    def _box(self, t, base, rem, op):
        acc = self.P.access[(op, t)]
        dims = sorted(acc.dims)
        lo = [None] * len(acc.terms)
        hi = [None] * len(acc.terms)
        for ys in itertools.product(*[range(base[d], base[d] + rem[d]) for d in dims]):
            pt = dict(zip(dims, ys))
            for k, kt in enumerate(acc.terms):
                v = sum(cf * pt[d] for d, cf in kt)
                lo[k] = v if lo[k] is None else min(lo[k], v)
                hi[k] = v if hi[k] is None else max(hi[k], v)
        return frozenset(itertools.product(*[range(a, b + 1) for a, b in zip(lo, hi)]))

    def _moved(self, key, inst, marker, elems):
        s = self.c.slots[key]
        ps = self.c.slots[s.parent]
        pinst = self._inst_above(inst, ps.node)
        if s.role == "in":
            self.fills[s.level][s.tensor] += len(elems)
        elif self.c.arch.semantics.drain_reads:
            self.reads[s.level][s.tensor] += len(elems)
        self.moves[(key, pinst, marker)].add(frozenset(elems))

    def _arrive(self, key, base, rem, inst, time):
        s = self.c.slots[key]
        if s.parent is None:
            return
        sinst = self._inst_above(inst, s.node)
        new = self._box(s.tensor, base, rem, s.rep)
        prev = self.state.get((key, sinst), frozenset())
        moved = (new - prev) if s.role == "in" else (prev - new)
        self.state[(key, sinst)] = new
        if moved:
            self._moved(key, sinst, ("move", time), moved)
        if s.role != "in" and self.c.arch.semantics.psum_round_trip and new - prev:
            # the reference refills arriving partial sums from the parent (no first-read elision)
            self.fills[s.level][s.tensor] += len(new - prev)
            self.refills[(key, self._inst_above(sinst, self.c.slots[s.parent].node), time)].add(frozenset(new - prev))

    def _reset(self, sub, inst, time):
        below = set()
        stack = [sub]
        while stack:
            i = stack.pop()
            below.add(i)
            stack += self.c.nodes[i].children
        for (key, sinst), cur in list(self.state.items()):
            s = self.c.slots[key]
            if s.node in below and sinst[:len(inst)] == inst:
                if s.role == "out" and cur:
                    self._moved(key, sinst, ("reset", time, sub), cur)
                self.state[(key, sinst)] = frozenset()

    def _node(self, i, base, rem, inst, time):
        n = self.c.nodes[i]
        for key in self.slots_at.get(i, []):
            self._arrive(key, base, rem, inst, time)
        if n.kind == "op":
            self._point(n.op, base, inst, time)
            return
        if n.kind == "scope":
            for ch in n.children:
                if n.scope == "sequential":
                    self._reset(ch, inst, time)
                self._node(ch, base, rem, inst, time)
            return
        self._loops(n, 0, base, rem, inst, time)

    def _loops(self, n, li, base, rem, inst, time):
        if li == len(n.loops):
            self._node(n.children[0], base, rem, inst, time)
            return
        g = n.loops[li]
        d = self.c.loops[g][0]
        f = self.F[g]
        step = rem[d] // f
        for xv in range(f):
            b2 = dict(base)
            b2[d] = base[d] + xv * step
            r2 = dict(rem)
            r2[d] = step
            if n.tkind == "spatial":
                self._loops(n, li + 1, b2, r2, inst + ((n.id, g, xv),), time)
            else:
                self._loops(n, li + 1, b2, r2, inst, time + ((g, xv),))

    def _point(self, op, base, inst, time):
        o = self.P.op(op)
        for a in o.accesses:
            t = a.tensor.name
            key = self.inner[(op, t)]
            s = self.c.slots[key]
            acc = self.P.access[(op, t)]
            el = tuple(sum(cf * base[d] for d, cf in kt) for kt in acc.terms)
            out = t in o.output_names
            self.compute[(key, out, self._inst_above(inst, s.node) if s.node != ROOT else (), time)].add(el)


def simulate(comp: Compiled, x):
    """The counts of factor vector ``x``; under TileFlow's own analysis those of :func:`simulate_calls`."""
    if comp.arch.semantics.nest_calls:
        return simulate_calls(comp, x)
    return TraceSimulator(comp).run(x)


def simulate_calls(comp: Compiled, x) -> dict:
    """TileFlow's own analysis with every call enumerated: each loop iteration and each spatial instance from its
    actual previous working set, where TileFlow (and the model) evaluates one step per loop standing for all of
    its steps and translates the first instance's delta to the others. Per (level, tensor) the reads, fills and
    updates before TileFlow truncates them per call (``[reads, fills, updates]``; :attr:`NestAnalysis.exact`).
    TileFlow's extrapolation is not exact for sliding windows (conv halos) nor where a scope hands the instances
    of a spatial node states they do not share; elsewhere the two agree."""
    from fusion_perf.nest import NestAnalysis

    na = NestAnalysis(comp, [int(v) for v in x], enumerate_all=True)
    na.run()
    return na.exact
