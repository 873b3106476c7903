"""The analytical model: exact data movement of a mapping tree by boundary deltas, then cycles and energy.

Buffer semantics (what "exact" means; the trace simulator ``fusion_perf.tracesim`` executes
exactly this, element by element)
----------------------------------------------------------------------------------------------------------------
* Loops. Each op's path from the root to its leaf gives its loop nest: the loops of every Tile node on the path,
  outermost first, a node's loops in their permutation order. The product of an op's factors over a dim equals
  the dim's extent. Spatial loops run on different instances in lock step; temporal loops run in time.
* Slots. Level 0 (DRAM) holds every tensor whole. For a level ``l >= 1``, the *slot node* on a path is the
  outermost Tile node that targets ``l``; each tensor that op touches and that no node targeting ``l`` on the path
  bypasses gets a *slot* there. A slot holds, per instance, the bounding box of the tensor's elements touched by
  every loop from the slot node down (Timeloop-style boxes: stride gaps and padding are included). Instances of
  a slot = product of the spatial factors above its node. Slots of a tensor nest: each slot's *parent* is the
  next slot above it on the path.
* Intermediates (tensors produced and consumed inside the problem) live at a *home*: the innermost slot above
  the least common ancestor (LCA) of the ops touching them; if none exists they go to DRAM, unless a node
  targeting DRAM bypasses them, in which case the home sits at the LCA scope itself, at the outermost level used
  below it. Below the LCA, the producer's slots drain into the home and the consumer's slots fill from it.
  Nothing moves above the home.
* Moves. Whenever execution reaches a slot node (every iteration of the loops above it) the slot's box moves to
  its new position. An input slot fills the elements of the new box not in the previous box (the previous box
  is empty on the first arrival). An output slot drains the elements of the previous box not in the new box
  to its parent, and drains its whole box at the end. Slots strictly below a Sequential scope are emptied
  (outputs drained) every time the scope starts that child (Sharing/Parallel/Pipeline children keep theirs).
* Multicast / reduction. At one step, sibling instances under one parent instance whose moved element sets
  are identical are served by one parent access (multicast of inputs; in-network reduction of output drains).
  Different sets are served separately even when they overlap (halos).
* Compute. Every point of an op reads each input element from that input's innermost slot and updates its
  output element in the output's innermost slot (one access each); PEs under one slot instance that need the
  same element at the same step share one access.
* Counts, per level and tensor: ``fills`` (written from the parent), ``updates`` (written from a child or the
  compute), ``reads`` (read to serve a child fill, a compute operand, or an output drain to the parent),
  ``writes = fills + updates``.

Closed form (never unrolled): with ``F_i`` the factors above a slot at nest position ``p``, ``box`` its tile and
``r`` the position below the lowest Sequential scope above it, moves per instance are
``Π_{i<r, temporal} F_i · box + Σ_{r<=j<p, temporal} (F_j − 1)·Π_{i<j, temporal} F_i · δ_j`` where ``δ_j`` is the
box minus its overlap with the box shifted by loop ``j``'s step minus the reset of the loops inside ``j``.

Cycles: an op leaf takes 1 cycle per point per PE; a temporal Tile multiplies its child's cycles by its trip
count; a node hosting slots takes ``max(child-derived cycles, reads/read_bw, writes/write_bw,
(reads+writes)/shared_bw)`` per entry and instance; Sequential and Sharing scopes add their children, Parallel
takes the max, Pipeline takes the max plus the fill/drain term ``(Σ − max)/n`` per entry (``n`` = entries of the
scope), which TileFlow leaves out.

The reference's rules (``Arch.semantics``, :mod:`fusion_perf.semantics`; TileFlow/Timeloop files get them)
----------------------------------------------------------------------------------------------------------------
Everything above holds, with these changes, and a single-op tree then gives Timeloop's counts and cycles:

* Nested slots. A temporal node below a scope that lies under a node of its own level is a slot node too (at
  DRAM as well): it keeps its own copy, filled from the slot above on every arrival (TileFlow's storage per tile
  node). Its placement is shared with the trace simulator like every slot's.
* Partial sums round-trip (Timeloop's first-read elision is off): an output slot below the top is filled from its
  parent on every arrival of its box, the first too (parent reads, after the same reduction/multicast grouping as
  its drains); drains read nothing at the child; every compute update of an output is a read plus an update.
* Bandwidth is charged to the node holding the accessed level's tile on the accessing op's path (the innermost
  temporal node targeting that level above the access; the slot's node for its own fills), and bounds that
  node's whole run as Timeloop's ``ComputePerformance`` does: slowdown = min over the read, write and shared
  ports of bandwidth / (accesses per instance / compute cycles), cycles = ``ceil(compute cycles / slowdown)``.
* Energy per vector access: per level, tensor and action (read, fill, update), ``ceil(words per instance / block
  size)`` × the action's pJ × instances; accesses charged to a ``profile: False`` node count no energy.
* No pipeline fill/drain term.

Under ``nest_calls`` (``semantics: tileflow``) none of the closed form above counts: :mod:`fusion_perf.nest` runs
TileFlow's own call-by-call analysis per factor vector (the structural checks still apply).
"""
from __future__ import annotations

import itertools
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from .arch import Arch
from .errors import CapacityError, FanoutError, MappingError
from .mapping import Node, OpLeaf, Scope, Tile, free_variables
from .problem import Problem

ROOT = -1  # the virtual root node: DRAM, above everything


@dataclass
class _N:
    id: int
    kind: str  # tile | scope | op
    path: str
    parent: int
    children: list[int] = field(default_factory=list)
    level: int = -1
    tkind: str = ""
    loops: list[int] = field(default_factory=list)
    scope: str = ""
    op: str = ""
    bypass: tuple[str, ...] = ()
    split: int | None = None
    is_slot: bool = False
    profile: bool = True
    ops: set = field(default_factory=set)
    label: str = ""


@dataclass
class _Slot:
    tensor: str
    node: int
    level: int
    role: str  # top | home | in | out
    parent: tuple | None
    pos: int
    rep: str  # representative op
    reset: int
    terms: tuple  # per tensor dim: ((dim, |coeff|), ...)
    tile_gids: dict  # dim -> gids of loops above with that dim
    js: list  # relevant temporal loop positions in [reset, pos), inner to outer, with info
    link: Any = None  # (parent pos, distinct spec) for non-top slots


class Compiled:
    """The tree-shape-dependent precomputation for one (problem, arch, tree); evaluate many factor vectors."""

    def __init__(self, problem: Problem, arch: Arch, tree: Node):
        self.problem, self.arch, self.tree = problem, arch, tree
        self.nodes: list[_N] = []
        self.loops: list[tuple[str, bool, int, Any]] = []  # (dim, spatial, node, factor)
        self._build(tree, ROOT, "mapping")
        self._check_ops()
        self._paths()
        self._slots()
        self.vars = free_variables(tree)
        self.points, self.macs = problem.points, problem.macs
        self.var_index = {v: [g for g, l in enumerate(self.loops) if l[3] == v] for v in self.vars}

    # --- structure ----------------------------------------------------------------------------------------
    def _build(self, n: Node, parent: int, path: str) -> int:
        i = len(self.nodes)
        if isinstance(n, OpLeaf):
            if n.name not in self.problem.op_names:
                raise MappingError(f"{path}.name", f"unknown op {n.name!r}; the problem has {self.problem.op_names}",
                                   n.name)
            if n.binding and any(k != v for k, v in n.binding.items()):
                raise MappingError(f"{path}.binding", f"only identity bindings are supported, got {n.binding}")
            self.nodes.append(_N(i, "op", path, parent, op=n.name, label=f"Op {n.name}"))
            self.nodes[i].ops = {n.name}
            return i
        if isinstance(n, Scope):
            self.nodes.append(_N(i, "scope", path, parent, scope=n.kind, label=f"Scope {n.kind}"))
            if not n.children:
                raise MappingError(f"{path}.subtree", "a Scope node needs at least one child")
            for k, c in enumerate(n.children):
                j = self._build(c, i, f"{path}.subtree[{k}]")
                self.nodes[i].children.append(j)
                self.nodes[i].ops |= self.nodes[j].ops
            return i
        if not isinstance(n, Tile):
            raise MappingError(path, f"not a mapping node: {type(n).__name__}")
        lv = self.arch.index(n.target, f"{path}.target")
        gids = []
        seen = set()
        for d, f in n.loops:
            if d in seen:
                raise MappingError(f"{path}.factors", f"dimension {d!r} appears twice in one Tile node")
            seen.add(d)
            if d not in self.problem.dims:
                raise MappingError(f"{path}.factors.{d}", f"unknown dimension {d!r}; the problem has "
                                   f"{sorted(self.problem.dims)}", d)
            gids.append(len(self.loops))
            self.loops.append((d, n.kind == "spatial", i, f))
        for t in n.bypass:
            if t not in self.problem.tensors:
                raise MappingError(f"{path}.bypass", f"unknown tensor {t!r}; tensors are "
                                   f"{sorted(self.problem.tensors)}", t)
        desc = " ".join(f"{d}={f}" for d, f in n.loops)
        self.nodes.append(_N(i, "tile", path, parent, level=lv, tkind=n.kind, loops=gids, bypass=n.bypass,
                             split=n.split, label=f"Tile {n.kind} @{n.target} [{desc}]", profile=n.profile))
        if n.child is None:
            raise MappingError(f"{path}.subtree", "a Tile node needs exactly one child")
        j = self._build(n.child, i, f"{path}.subtree[0]")
        self.nodes[i].children.append(j)
        self.nodes[i].ops = set(self.nodes[j].ops)
        for g in gids:
            d = self.loops[g][0]
            for o in self.nodes[i].ops:
                if d not in self.problem.op_dims(o):
                    raise MappingError(f"{path}.factors.{d}", f"dimension {d!r} is not a loop of op {o!r} below this "
                                       "node (loops above a scope must be shared by every op under it)", d)
        return i

    def _check_ops(self):
        leaves = [n.op for n in self.nodes if n.kind == "op"]
        for o in self.problem.op_names:
            if leaves.count(o) != 1:
                raise MappingError("mapping", f"op {o!r} must appear exactly once in the tree, found {leaves.count(o)}")

    def _anc(self, i: int) -> list[int]:
        out = []
        while i != ROOT:
            out.append(i)
            i = self.nodes[i].parent
        return out[::-1]

    def _paths(self):
        self.path: dict[str, list[int]] = {}
        self.oploops: dict[str, list[int]] = {}
        self.pos: dict[str, dict[int, int]] = {}
        for n in self.nodes:
            if n.kind != "op":
                continue
            nodes = self._anc(n.id)
            loops, pos, last = [], {}, -1
            for k in nodes:
                nk = self.nodes[k]
                pos[k] = len(loops)
                if nk.kind == "tile":
                    if nk.level < last:
                        raise MappingError(f"{nk.path}.target", f"level {self.arch.levels[nk.level].name!r} is outside "
                                           f"level {self.arch.levels[last].name!r} of a node above it (targets must "
                                           "go from outer to inner levels down a path)")
                    last = nk.level
                    loops += nk.loops
            self.path[n.op], self.oploops[n.op], self.pos[n.op] = nodes, loops, pos
        # slot nodes: outermost node targeting a level >= 1 on the path (an ancestor property); with nested slots
        # (TileFlow) also a temporal node below a scope under a node of its own level, which keeps its own copy
        nested = self.arch.semantics.nested_slots
        for n in self.nodes:
            if n.kind != "tile":
                continue
            anc = self._anc(n.id)[:-1]
            same = [a for a in anc if self.nodes[a].kind == "tile" and self.nodes[a].level == n.level]
            n.is_slot = n.level >= 1 and not same
            if nested and same and n.tkind == "temporal":
                n.is_slot = any(self.nodes[a].kind == "scope" for a in anc[anc.index(same[-1]) + 1:])
        # per-op dim loop lists, fan-out groups
        self.opdim = {o: {d: [g for g in self.oploops[o] if self.loops[g][0] == d] for d in self.problem.op_dims(o)}
                      for o in self.path}
        self.fan = []
        for o, nodes in self.path.items():
            per: dict[int, list] = {}
            for k in nodes:
                nk = self.nodes[k]
                if nk.kind == "tile" and nk.tkind == "spatial":
                    per.setdefault(nk.level, []).append(k)
            for lv, ks in per.items():
                xs, ys, allg = [], [], []
                for k in ks:
                    nk = self.nodes[k]
                    allg += nk.loops
                    if nk.split is not None:
                        xs += nk.loops[:nk.split]
                        ys += nk.loops[nk.split:]
                self.fan.append((o, lv, ks[-1], allg, xs, ys))
        self.fan = list({(f[1], f[2], tuple(f[3])): f for f in self.fan}.values())

    def _bypassed(self, op: str, t: str, level: int) -> bool:
        return any(self.nodes[k].kind == "tile" and self.nodes[k].level == level and t in self.nodes[k].bypass
                   for k in self.path[op])

    def _lca(self, ops: Sequence[str]) -> int:
        paths = [self.path[o] for o in ops]
        lca = ROOT
        for col in zip(*paths):
            if all(c == col[0] for c in col):
                lca = col[0]
            else:
                break
        return lca

    def _slots(self):
        """Places every slot (``self.slots``) and precomputes what evaluation walks: each slot's link to its
        parent, the compute operand accesses, concurrent scopes, the leaf tile of each op, the levels each node
        hosts, and a post-order of the nodes."""
        P = self.problem
        self.slots: dict[tuple, _Slot] = {}
        self.compute_links = []  # (op, tensor, innermost slot key, is_output)
        for o, t in P.access:
            chain, hl, top_role, users = self._slot_chain(o, t)
            inner = self._add_chain(o, t, chain, hl, top_role, users)
            self.compute_links.append((o, t, inner, P.producer.get(t) == o))
        self._link_slots()
        self._concurrent_scopes()
        # compute traffic is charged to the innermost Tile node above each op (or the root)
        self.leaf_tile = {}
        for o, nodes in self.path.items():
            tiles = [k for k in nodes if self.nodes[k].kind == "tile"]
            self.leaf_tile[o] = tiles[-1] if tiles else ROOT
        self._holders()
        # nodes hosting slots (bandwidth) and capacity ownership
        self.host: dict[int, set] = {}
        for key, s in self.slots.items():
            self.host.setdefault(s.node, set()).add(s.level)
        self.order = [n.id for n in reversed(self.nodes)]  # children have larger ids: reversed is post-order

    def _holder(self, op: str, below: int, level: int, default: int) -> int:
        """The node whose tile of ``level`` serves ``below`` on ``op``'s path: the innermost temporal Tile node
        targeting ``level`` above ``below`` (TileFlow's parent storage node), else ``default``."""
        path = self.path[op]
        stop = path.index(below) if below in path else len(path)
        for k in reversed(path[:stop]):
            nk = self.nodes[k]
            if nk.kind == "tile" and nk.level == level and nk.tkind == "temporal":
                return k
        return default

    def _holders(self):
        """Per slot, the node charged for its parent's accesses (``pholder``); per compute operand, the node
        charged for it (``cholder``) — the reference charges a level's accesses to the node holding its tile."""
        self.pholder = {}
        for key, s in self.slots.items():
            if s.parent is not None:
                ps = self.slots[s.parent]
                self.pholder[key] = self._holder(s.rep, s.node, ps.level, ps.node) if s.node != ROOT else ps.node
        self.cholder = {}
        for (o, t, key, is_out) in self.compute_links:
            s = self.slots[key]
            leaf = next(n.id for n in self.nodes if n.kind == "op" and n.op == o)
            self.cholder[(o, t)] = self._holder(o, leaf, s.level, s.node)

    def _slot_chain(self, o: str, t: str) -> tuple[list[int], int, str, list[str]]:
        """The nodes holding slots of tensor ``t`` on op ``o``'s path, outer to inner, the first being the top
        slot (``ROOT`` = DRAM, or an intermediate's home); the top slot's level and role; the ops using ``t``."""
        P = self.problem
        cands = [k for k in self.path[o] if self.nodes[k].kind == "tile" and self.nodes[k].is_slot
                 and not self._bypassed(o, t, self.nodes[k].level)]
        users = ([P.producer[t]] if t in P.producer else []) + P.consumers.get(t, [])
        if not (t in P.producer and t in P.consumers):
            return [ROOT] + cands, 0, "top", users
        lca = self._lca(sorted(set(users)))
        anc = set(self._anc(lca)[:-1]) if lca != ROOT else set()
        home, hl = self._home(t, users, cands, lca, anc)
        below = [k for k in cands if k not in anc and k != lca]
        return [home] + [k for k in below if self.nodes[k].level > hl], hl, "home", users

    def _home(self, t: str, users: list[str], cands: list[int], lca: int, anc: set) -> tuple[int, int]:
        """The node and level of intermediate ``t``'s home (rules in the module docstring); ``cands`` are the
        slot nodes on one user's path, ``anc`` the strict ancestors of the users' LCA."""
        P = self.problem
        above = [k for k in cands if k in anc]
        if t in P.outputs:
            return ROOT, 0
        if above:
            return above[-1], self.nodes[above[-1]].level
        if any(self._bypassed(u, t, 0) for u in set(users)) and lca != ROOT:
            firsts = []
            for u in set(users):
                cu = [k for k in self.path[u] if self.nodes[k].kind == "tile" and self.nodes[k].is_slot
                      and not self._bypassed(u, t, self.nodes[k].level) and k not in anc and k != lca]
                if cu:
                    firsts.append(self.nodes[cu[0]].level)
            return (lca, min(firsts)) if firsts else (ROOT, 0)
        return ROOT, 0

    def _add_chain(self, o: str, t: str, chain: list[int], hl: int, top_role: str, users: list[str]) -> tuple:
        """Creates the slots of ``t`` along ``chain`` for op ``o`` (sharing those other ops already created, which
        must agree on parent and role); returns the innermost slot's key."""
        P = self.problem
        role = "out" if P.producer.get(t) == o else "in"
        prev = None
        for idx, k in enumerate(chain):
            key = (t, k)
            lvl = hl if idx == 0 else self.nodes[k].level
            r = top_role if idx == 0 else role
            if key in self.slots:
                s = self.slots[key]
                if s.parent != prev or (s.role != r and idx > 0):
                    raise MappingError(self.nodes[k].path if k != ROOT else "mapping",
                                       f"tensor {t!r} is kept inconsistently by the ops under this node "
                                       "(bypass lists disagree)")
            else:
                rep = o
                if idx == 0 and top_role == "home":
                    # the home holds what every user touches: the widest index map (a consumer's halo window)
                    rep = max(sorted(set(users)), key=lambda u: sum(len(kt) for kt in P.access[(u, t)].terms))
                self.slots[key] = self._make_slot(t, k, lvl, r, prev, rep)
            prev = key
        return prev

    def _link_slots(self):
        """The spatial loops between each slot and its parent, and between each op's innermost slots and its
        compute (``compute_specs``), as distinct-access specs."""
        for key, s in self.slots.items():
            if s.parent is None:
                continue
            ps = self.slots[s.parent]
            s.link = (ps.pos, self._distinct_spec(s.tensor, self.oploops[s.rep][ps.pos:s.pos], s.rep))
        self.compute_specs = []
        for (o, t, key, is_out) in self.compute_links:
            s = self.slots[key]
            loops = self.oploops[o]
            pc = s.pos if s.node != ROOT else 0
            self.compute_specs.append((o, t, key, is_out, pc, self._distinct_spec(t, loops[pc:], o)))

    def _concurrent_scopes(self):
        """Per Parallel/Pipeline scope: the spatial loops above it, and per child, per op, those below it."""
        # concurrent scopes run their children at once: the children share the PE array
        self.concurrent = []
        for n in self.nodes:
            if n.kind == "scope" and n.scope in ("parallel", "pipeline"):
                o0 = next(iter(n.ops))
                above = [g for g in self.oploops[o0][:self.pos[o0][n.id]] if self.loops[g][1]]
                kids = []
                for c in n.children:
                    kids.append([[g for g in self.oploops[o][self.pos[o][n.id]:] if self.loops[g][1]]
                                 for o in self.nodes[c].ops])
                self.concurrent.append((n.id, above, kids))

    def _make_slot(self, t: str, k: int, level: int, role: str, parent, op: str) -> _Slot:
        acc = self.problem.access[(op, t)]
        loops = self.oploops[op]
        pos = 0 if k == ROOT else self.pos[op][k]
        reset = 0
        if k != ROOT:
            for a in self._anc(k)[:-1]:
                if self.nodes[a].kind == "scope" and self.nodes[a].scope == "sequential":
                    reset = self.pos[op][a]
        terms = tuple(tuple((d, abs(c)) for d, c in kt) for kt in acc.terms)
        tdims = acc.dims
        tile_gids = {d: [g for g in loops[:pos] if self.loops[g][0] == d] for d in tdims}
        js = []
        relevant_inside = False
        for j in range(pos - 1, reset - 1, -1):
            g = loops[j]
            d, sp = self.loops[g][0], self.loops[g][1]
            if sp:
                continue
            ind = d in tdims
            if ind or relevant_inside:
                coeffs = tuple(acc.coeff(kk, d) for kk in range(len(acc.terms)))
                # steps: extent // product of this dim's factors at and above j
                same = [gg for gg in loops[:j + 1] if self.loops[gg][0] == d]
                js.append((j, g, d, ind, coeffs, same))
            if ind:
                relevant_inside = True
        return _Slot(t, k, level, role, parent, pos, op, reset, terms, tile_gids, js)

    def _distinct_spec(self, t: str, gids: Sequence[int], op: str):
        acc = self.problem.access[(op, t)]
        rel = [g for g in gids if self.loops[g][1] and self.loops[g][0] in acc.dims]
        simple = acc.separable and all(len({self.loops[g][0] for g in rel if acc.coeff(k, self.loops[g][0])}) <= 1
                                       for k in range(len(acc.terms)))
        return (rel, simple, acc)

    # --- factor vectors ----------------------------------------------------------------------------------
    def factor_vector(self, values: Mapping[str, int] | None = None) -> list[int]:
        values = values or {}
        out = []
        for d, sp, node, f in self.loops:
            if isinstance(f, str):
                if f not in values:
                    raise MappingError(f"{self.nodes[node].path}.factors.{d}", f"free variable {f!r} has no value")
                f = values[f]
            out.append(int(f))
        return out

    # --- evaluation --------------------------------------------------------------------------------------
    def evaluate(self, x: Sequence[int] | np.ndarray, check: bool = True, batched: bool = False):
        """Counts, cycles and energy for factor vector ``x`` (one per loop; ``batched``: shape [B, loops]).

        Single: a :class:`fusion_perf.result.Result`; factors not multiplying to the extents raise, and with
        ``check`` so do exceeded capacities and fan-outs. Batched: a :class:`BatchResult`, inf where any of these
        constraints is violated."""
        F, feas = self._factor_columns(x, batched)
        mx = np.maximum if batched else max
        self._check_extents(F, batched, feas)
        if batched and not feas.any():
            return BatchResult(np.full(len(feas), np.inf), np.full(len(feas), np.inf), feas)
        tpre, spre, step = self._prefixes(F)
        box, perinst = self._boxes(F, mx, tpre, step)
        reads, fills, upd, nacc = self._counts(F, batched, perinst, tpre, spre, step)
        nest = self.arch.semantics.nest_calls
        # TileFlow's own analysis checks capacity by TileFlow's rule (in _nest), the closed form by its slots
        need = self._capacity(box, mx, batched, check and not nest, feas if not nest else np.ones_like(feas))
        self._check_fanout(F, batched, check, feas)
        self._check_concurrent(F, mx, batched, check, feas)
        if nest:
            return self._nest(F, feas, need, spre, batched, check)
        total, cyc, comp, slow, fill_drain = self._cycles(F, mx, tpre, nacc)
        energy = self._energy(reads, fills, upd)
        if batched:
            return BatchResult(np.where(feas, total, np.inf), np.where(feas, energy, np.inf), feas)
        self._last_cycles = (cyc, comp)
        return self._result(F, reads, fills, upd, total, energy, slow, need, fill_drain, spre)

    def _nest(self, F: list, feas, need: dict, spre: dict, batched: bool, check: bool = True):
        """TileFlow's own analysis (``nest_calls``, :mod:`fusion_perf.nest`) of each feasible factor vector, with
        TileFlow's capacity rule (:meth:`fusion_perf.nest.NestAnalysis.capacity_violation`); the other checks
        above still apply."""
        from .nest import NestAnalysis

        if batched:
            cyc, en = np.full(len(feas), np.inf), np.full(len(feas), np.inf)
            for b in np.flatnonzero(feas):
                na = NestAnalysis(self, [int(f[b]) for f in F])
                if na.capacity_violation() is not None:
                    feas[b] = False
                    continue
                cyc[b] = na.run()
                en[b] = na.energy
            return BatchResult(cyc, en, feas)
        na = NestAnalysis(self, F)
        bad = na.capacity_violation() if check else None
        if bad is not None:
            path, lv, words, cap, fp = bad
            raise CapacityError(path, self.arch.levels[lv].name, words, cap,
                                f"TileFlow's rule; tensors of this tile: {fp}")
        total = na.run()
        tabs = [[{} for _ in self.arch.levels] for _ in range(3)]
        for (name, t), c in na.counts.items():
            lv = self.arch.index(name)
            for tab, k in zip(tabs, ("reads", "fills", "updates")):
                tab[lv][t] = c[k]
        slow = {(ROOT, self.arch.index(name)): v for name, v in na.slow.items()}
        self._last_cycles = tuple({n.id: na.node_cycles.get(n.id, (0, 0))[k] for n in self.nodes} for k in (1, 0))
        return self._result(F, *tabs, total, na.energy, slow, need, 0.0, spre)

    def _factor_columns(self, x: Sequence[int] | np.ndarray, batched: bool) -> tuple[list, Any]:
        """``x`` as one entry per loop (an int, or batched a view of the loop's int64 column) and the feasibility
        mask the checks narrow in place (batched; a single vector's violations raise instead: ``True``)."""
        if batched:
            X = np.asarray(x, dtype=np.int64)
            F = [X[:, g] for g in range(X.shape[1])]
            feas = np.ones(X.shape[0], dtype=bool)
        else:
            F = [int(v) for v in x]
            feas = True
        if len(F) != len(self.loops):
            raise MappingError("mapping", f"factor vector has {len(F)} entries, the tree has {len(self.loops)} loops")
        return F, feas

    def _check_extents(self, F: list, batched: bool, feas) -> None:
        """Each op's factors over a dim must multiply to the dim's extent: batched, violations are cleared in
        ``feas``; single, the first raises a :class:`MappingError` naming the loops."""
        P = self.problem
        for o, dl in self.opdim.items():
            for d, gs in dl.items():
                prod = 1
                for g in gs:
                    prod = prod * F[g]
                if batched:
                    feas &= prod == P.dims[d]
                elif prod != P.dims[d]:
                    where = ", ".join(f"{self.nodes[self.loops[g][2]].path}:{d}={F[g]}" for g in gs) or "no loop"
                    raise MappingError(f"mapping (op {o}, dim {d})", f"product of factors {prod} != extent "
                                       f"{P.dims[d]} ({where})", prod)

    def _prefixes(self, F: list) -> tuple[dict, dict, dict]:
        """Per op, down its loop nest: the products of the temporal and of the spatial factors of the loops above
        each position (lists one longer than the nest, starting at 1), and each loop's step (its dim's extent
        over the product of that dim's factors at and above the loop)."""
        P = self.problem
        tpre, spre, step = {}, {}, {}
        for o, loops in self.oploops.items():
            tp, sp_, t_, s_ = [1], [1], 1, 1
            cum = {}
            st = []
            for g in loops:
                d, spatial = self.loops[g][0], self.loops[g][1]
                if spatial:
                    s_ = s_ * F[g]
                else:
                    t_ = t_ * F[g]
                tp.append(t_)
                sp_.append(s_)
                c = cum.get(d, 1) * F[g]
                cum[d] = c
                st.append(P.dims[d] // c)
            tpre[o], spre[o], step[o] = tp, sp_, st
        return tpre, spre, step

    def _boxes(self, F: list, mx, tpre: dict, step: dict) -> tuple[dict, dict]:
        """Per slot, its box (words per instance); per slot below the top, the words moved per instance over
        the run (filled for inputs, drained for outputs), by the closed form in the module docstring."""
        P = self.problem
        perinst, box = {}, {}
        for key, s in self.slots.items():
            tp = tpre[s.rep]
            st = step[s.rep]
            spans = []
            for kt in s.terms:
                sp_ = 1
                for d, c in kt:
                    tile = P.dims[d]
                    for g in s.tile_gids[d]:
                        tile = tile // F[g]
                    sp_ = sp_ + c * (tile - 1)
                spans.append(sp_)
            b = 1
            for v in spans:
                b = b * v
            box[key] = b
            if s.parent is None:
                continue
            tot = tp[s.reset] * b
            nk = len(spans)
            accs = [0] * nk
            for (j, g, d, ind, coeffs, same) in s.js:
                fj = F[g]
                stj = st[j]
                ov = 1
                for kk in range(nk):
                    dl = coeffs[kk] * stj - accs[kk]
                    ov = ov * mx(0, spans[kk] - abs(dl))
                tot = tot + (fj - 1) * tp[j] * (b - ov)
                if ind:
                    for kk in range(nk):
                        if coeffs[kk]:
                            accs[kk] = accs[kk] + coeffs[kk] * stj * (fj - 1)
            perinst[key] = tot
        return box, perinst

    def _counts(self, F: list, batched: bool, perinst: dict, tpre: dict, spre: dict, step: dict):
        """``(reads, fills, updates, nacc)``: the first three per level, ``{tensor: words}``, from slot moves, the
        parent accesses serving them (after multicast/reduction) and compute operands; ``nacc``, per node whose
        execution moves words, ``{level: [reads, writes]}`` per instance (for bandwidth)."""
        L = len(self.arch.levels)
        sem = self.arch.semantics
        reads = [dict() for _ in range(L)]
        fills = [dict() for _ in range(L)]
        upd = [dict() for _ in range(L)]
        nacc: dict[int, dict[int, list]] = {}
        self._inst: dict[tuple, Any] = {}  # (count kind, level, tensor) -> instances of the slot counted (energy)
        self._unprofiled: dict[tuple, Any] = {}  # (count kind, level, tensor) -> words charged to profile: False

        def add(kind, lv, t, v, node, inst):
            # counts per level/tensor; for bandwidth, words per instance charged to ``node``
            tab = (reads, fills, upd)[kind]
            tab[lv][t] = tab[lv].get(t, 0) + v
            a = nacc.setdefault(node, {}).setdefault(lv, [0, 0])
            a[kind > 0] = a[kind > 0] + v / inst
            self._inst.setdefault((kind, lv, t), inst)
            if node != ROOT and not self.nodes[node].profile:
                self._unprofiled[(kind, lv, t)] = self._unprofiled.get((kind, lv, t), 0) + v

        for key, s in self.slots.items():
            if s.parent is None:
                continue
            ps = self.slots[s.parent]
            sp = spre[s.rep]
            moved = sp[s.pos] * perinst[key]
            ppos, spec = s.link
            up = sp[ppos] * self._distinct(spec, F, batched, step[s.rep], s.rep) * perinst[key]
            # the reference charges every access of a level to the node holding that level's tile
            pnode = self.pholder[key] if sem.charge_holder else s.node
            if s.role == "in" or sem.psum_round_trip:
                add(1, s.level, s.tensor, moved, s.node, sp[s.pos])
                add(0, ps.level, s.tensor, up, pnode, sp[ppos])
            if s.role != "in":
                if sem.drain_reads:
                    add(0, s.level, s.tensor, moved, s.node, sp[s.pos])
                add(2, ps.level, s.tensor, up, pnode, sp[ppos])
        for (o, t, key, is_out, pc, spec) in self.compute_specs:
            s = self.slots[key]
            v = spre[o][pc] * self._distinct(spec, F, batched, step[o], o) * tpre[o][-1]
            node = self.cholder[(o, t)] if sem.charge_holder else self.leaf_tile[o]
            if is_out:
                add(2, s.level, t, v, node, spre[o][pc])
            if not is_out or sem.psum_round_trip:  # the reference's compute updates are read-modify-writes
                add(0, s.level, t, v, node, spre[o][pc])
        return reads, fills, upd, nacc

    def _capacity(self, box: dict, mx, batched: bool, check: bool, feas) -> dict:
        """Per node, ``{level: words}`` needed by its subtree: its own slots' boxes plus its children's needs
        (the max over a Sequential scope's children, which never hold slots at once; else the sum). A level
        over capacity raises a :class:`CapacityError` (single, with ``check``) or is cleared in ``feas`` at the
        root (batched)."""
        arch = self.arch
        own: dict[int, dict[int, Any]] = {}
        for key, s in self.slots.items():
            if s.node != ROOT:
                d = own.setdefault(s.node, {})
                d[s.level] = d.get(s.level, 0) + box[key]
        need: dict[int, dict[int, Any]] = {}
        for i in self.order:
            n = self.nodes[i]
            acc: dict[int, Any] = {}
            if n.children:
                kids = [need[c] for c in n.children]
                lvls = set().union(*kids)
                for lv in lvls:
                    vals = [k.get(lv, 0) for k in kids]
                    if n.kind == "scope" and n.scope == "sequential":
                        v = vals[0]
                        for w in vals[1:]:
                            v = mx(v, w)
                    else:
                        v = sum(vals[1:], vals[0])
                    acc[lv] = v
            for lv, v in own.get(i, {}).items():
                acc[lv] = acc.get(lv, 0) + v
            need[i] = acc
            if not batched and check:
                for lv, v in acc.items():
                    cap = arch.levels[lv].capacity_words
                    if v > cap:
                        fp = {s.tensor: box[k] for k, s in self.slots.items() if s.node == i and s.level == lv}
                        raise CapacityError(n.path, arch.levels[lv].name, v, cap,
                                            f"{n.label}; tiles held here: {fp}" if fp else n.label)
        if batched:
            for lv, v in need[0].items():
                feas &= v <= arch.levels[lv].capacity_words
        return need

    def _check_fanout(self, F: list, batched: bool, check: bool, feas) -> None:
        """Each op's spatial loops per level must fit the level's fan-out (x and y separately where a node splits
        them): batched, violations are cleared in ``feas``; single, with ``check``, a :class:`FanoutError`."""
        arch = self.arch
        for (o, lv, k, allg, xs, ys) in self.fan:
            fx, fy = arch.fanout(lv)
            tot = 1
            for g in allg:
                tot = tot * F[g]
            px, py = 1, 1
            for g in xs:
                px = px * F[g]
            for g in ys:
                py = py * F[g]
            if batched:
                feas &= (tot <= fx * fy) & (px <= fx) & (py <= fy)
            elif check and (tot > fx * fy or px > fx or py > fy):
                raise FanoutError(self.nodes[k].path, arch.levels[lv].name, tot if tot > fx * fy else max(px, py),
                                  fx * fy if tot > fx * fy else (fx if px > fx else fy),
                                  f"spatial loops of op {o} below {arch.levels[lv].name}: "
                                  f"x {px} of {fx}, y {py} of {fy}")

    def _check_concurrent(self, F: list, mx, batched: bool, check: bool, feas) -> None:
        """The children of a Parallel or Pipeline scope (each as wide as its widest op), times the spatial loops
        above the scope, must fit the PE array: batched, violations are cleared in ``feas``; single, with
        ``check``, a :class:`FanoutError`."""
        arch = self.arch
        for (k, above, kids) in self.concurrent:
            used = 0
            for paths in kids:
                m = 0
                for gs in paths:
                    v = 1
                    for g in gs:
                        v = v * F[g]
                    m = mx(m, v)
                used = used + m
            for g in above:
                used = used * F[g]
            if batched:
                feas &= used <= arch.num_pes
            elif check and used > arch.num_pes:
                raise FanoutError(self.nodes[k].path, "PE array", used, arch.num_pes,
                                  f"{self.nodes[k].label}: its children run concurrently and together need {used} PEs")

    def _cycles(self, F: list, mx, tpre: dict, nacc: dict):
        """``(total, cyc, comp, slow, fill_drain)`` by the rules in the module docstring, bottom-up: per node its
        cycles with (``cyc``) and without (``comp``) its own bandwidth bound, per ``(node, level)`` the slowdown
        that bound causes, and the pipelines' fill/drain cycles."""
        sem = self.arch.semantics
        cyc: dict[int, Any] = {}
        comp: dict[int, Any] = {}
        pure: dict[int, Any] = {}  # compute cycles per entry, no bandwidth bound anywhere below
        slow: dict[int, Any] = {}
        fill_drain = 0
        for i in self.order:
            n = self.nodes[i]
            if n.kind == "op":
                c = p = 1
            elif n.kind == "tile":
                c, p = cyc[n.children[0]], pure[n.children[0]]
                if n.tkind == "temporal":
                    for g in n.loops:
                        c, p = c * F[g], p * F[g]
            else:
                vals = [cyc[k] for k in n.children]
                pv = [pure[k] for k in n.children]
                if n.scope in ("sequential", "sharing"):
                    c, p = sum(vals[1:], vals[0]), sum(pv[1:], pv[0])
                else:
                    m, p = vals[0], pv[0]
                    for v, q in zip(vals[1:], pv[1:]):
                        m, p = mx(m, v), mx(p, q)
                    if n.scope == "pipeline" and sem.pipeline_fill_drain:
                        o = next(iter(n.ops))
                        ent = tpre[o][self.pos[o][i]]
                        extra = (sum(vals[1:], vals[0]) - m) / ent
                        fill_drain = fill_drain + extra * ent
                        m = m + extra
                    c = m
            comp[i], pure[i] = c, p
            if i in nacc:
                o = next(iter(n.ops))
                c = self._bound(i, c, p, tpre[o][self.pos[o][i]], nacc[i], mx, slow)
            cyc[i] = c
        total = cyc[0]
        if ROOT in nacc:
            total = self._bound(ROOT, total, pure[0], 1, nacc[ROOT], mx, slow)
        if sem.ceil_cycles:
            total = _ceil(total * (1 - 1e-12))  # the bounds are whole cycles; float noise must not add one
        return total, cyc, comp, slow, fill_drain

    def _bound(self, i: int, c, p, ent, acc: dict, mx, slow: dict):
        """Node ``i``'s cycles per entry under its bandwidth bounds: ``c`` without them, ``p`` its pure compute
        cycles per entry, ``ent`` its entries, ``acc`` ``{level: [reads, writes]}`` per instance over the run.
        Project: ``max(c, reads/read_bw, writes/write_bw, (reads+writes)/shared_bw)`` per entry. Reference:
        Timeloop's ``ComputePerformance`` over the node's run (slowdown against its compute cycles, ceil)."""
        sem = self.arch.semantics
        c0 = c
        for lv, (r, w) in acc.items():
            lvl = self.arch.levels[lv]
            if sem.charge_holder:
                b = _timeloop_cycles(p * ent, r, w, lvl, sem.ceil_cycles) / ent
            else:
                b = mx(mx(r / (ent * lvl.read_bw), w / (ent * lvl.write_bw)), (r + w) / (ent * lvl.shared_bw))
            slow[(i, lv)] = mx(c0, b) / c0
            c = mx(c, b)
        return c

    def _energy(self, reads: list, fills: list, upd: list):
        """pJ: each level's reads, fills and updates at its per-access energies, plus the MAC energy per compute
        point. Reference: per vector access, ``ceil(words per instance / block size)`` per level, tensor and
        action, times the instances (Timeloop's ``ComputeVectorAccesses``); project: per word."""
        arch = self.arch
        vector = arch.semantics.vector_energy
        energy = 0.0
        for lv in range(len(arch.levels)):
            lvl = arch.levels[lv]
            for kind, tab, e in ((0, reads, lvl.read_energy), (1, fills, lvl.fill_e), (2, upd, lvl.update_e)):
                for t, v in tab[lv].items():
                    v = v - self._unprofiled.get((kind, lv, t), 0)
                    if vector:
                        inst = self._inst[(kind, lv, t)]
                        v = _ceil(v / inst / lvl.block_size - 1e-9) * inst
                    elif lvl.block_size > 1:
                        v = v / lvl.block_size  # per word: the vector energy spread over its words
                    energy = energy + v * e
        energy = energy + self.points * arch.mac_energy
        return energy

    def _distinct(self, spec, F, batched, step, op):
        rel, simple, acc = spec
        if not rel:
            return 1
        if simple:
            v = 1
            for g in rel:
                v = v * F[g]
            return v
        loops = self.oploops[op]
        posof = {g: i for i, g in enumerate(loops)}

        def one(Fv, stv):
            ranges = [range(Fv[g]) for g in rel]
            pts = set()
            for xs in itertools.product(*ranges):
                pts.add(tuple(sum(acc.coeff(k, self.loops[g][0]) * stv[posof[g]] * x for g, x in zip(rel, xs))
                              for k in range(len(acc.terms))))
            return len(pts)

        if not batched:
            return one(F, step)
        B = len(F[0])
        return np.array([one([int(f[b]) for f in F], [int(s[b]) if hasattr(s, "__len__") else int(s) for s in step])
                         for b in range(B)], dtype=np.int64)

    def _result(self, F, reads, fills, upd, total, energy, slow, need, fill_drain, spre):
        from .result import LevelStats, Result

        arch = self.arch
        levels = []
        for lv, lvl in enumerate(arch.levels):
            ts = sorted(set(reads[lv]) | set(fills[lv]) | set(upd[lv]))
            per = {t: {"reads": int(reads[lv].get(t, 0)), "fills": int(fills[lv].get(t, 0)),
                       "updates": int(upd[lv].get(t, 0)),
                       "writes": int(fills[lv].get(t, 0) + upd[lv].get(t, 0))} for t in ts}
            sl = [float(v) for (i, lv2), v in slow.items() if lv2 == lv]
            cap = lvl.capacity_words
            used = need[0].get(lv, 0)
            levels.append(LevelStats(lvl.name, per, max(sl) if sl else 1.0,
                                     float(used / cap) if math.isfinite(cap) and cap else 0.0, int(used)))
        pes = max(spre[o][-1] for o in self.oploops)
        worst = max(levels, key=lambda s: s.slowdown)
        return Result(cycles=float(total), energy_pj=float(energy), macs=self.macs, points=self.points,
                      levels=levels, bottleneck=worst.name if worst.slowdown > 1 + 1e-12 else "compute",
                      spatial_util=pes / arch.num_pes, pipeline_fill_drain=float(fill_drain),
                      factors={f"{self.nodes[self.loops[g][2]].path}:{self.loops[g][0]}": F[g] for g in range(len(F))},
                      node_cycles=[(n.path, n.label, float(self._last_cycles[1][n.id]),
                                    float(self._last_cycles[0][n.id])) for n in self.nodes])


def _ceil(x):
    return np.ceil(x) if isinstance(x, np.ndarray) else math.ceil(x)


def _timeloop_cycles(T0, r, w, lvl, ceil: bool):
    """Cycles of a run of ``T0`` compute cycles that reads ``r`` and writes ``w`` words per instance, as Timeloop's
    ``BufferLevel::ComputePerformance`` (same float operations): the slowdown is the least of each port's bandwidth
    over its demand per cycle (read, write, and the shared port for both), the cycles ``ceil(T0 / slowdown)``."""
    if isinstance(T0, np.ndarray) or isinstance(r, np.ndarray) or isinstance(w, np.ndarray):
        with np.errstate(divide="ignore", invalid="ignore"):
            ur, uw = r / T0, w / T0
            sd = np.minimum(1.0, np.minimum(np.minimum(lvl.read_bw / ur, lvl.write_bw / uw), lvl.shared_bw / (ur + uw)))
        out = T0 / sd
        return np.ceil(out) if ceil else out
    ur, uw = r / T0, w / T0
    sd = 1.0
    for bw, u in ((lvl.read_bw, ur), (lvl.write_bw, uw), (lvl.shared_bw, ur + uw)):
        if bw < u:
            sd = min(sd, bw / u)
    return math.ceil(T0 / sd) if ceil else T0 / sd


@dataclass
class BatchResult:
    """Cycles and energy of many factor vectors (inf where infeasible)."""

    cycles: np.ndarray
    energy_pj: np.ndarray
    feasible: np.ndarray


_CACHE: "OrderedDict[tuple, Compiled]" = OrderedDict()


def _tree_key(n: Node, fac: list | None = None) -> tuple:
    """The tree's shape (what compilation depends on); with ``fac``, also collects its factors in compiled loop
    order (pre-order, each node's loops outer to inner) in the same walk."""
    if isinstance(n, OpLeaf):
        return ("op", n.name, tuple(sorted((n.binding or {}).items())))
    if isinstance(n, Scope):
        return ("scope", n.kind, tuple(_tree_key(c, fac) for c in n.children))
    if fac is not None:
        fac.extend(f for _, f in n.loops)
    return ("tile", n.target, n.kind, tuple(d for d, _ in n.loops),
            tuple(f if isinstance(f, str) else None for _, f in n.loops), n.bypass, n.split, n.profile,
            _tree_key(n.child, fac) if n.child is not None else None)


def compile_tree(problem: Problem, arch: Arch, tree: Node, _key: tuple | None = None) -> Compiled:
    """Cached per (problem, arch, tree shape): factor values may change between calls without recompiling."""
    key = (id(problem), arch.signature(), _key if _key is not None else _tree_key(tree))
    c = _CACHE.get(key)
    if c is not None and c.problem is problem:
        _CACHE.move_to_end(key)
        return c
    c = Compiled(problem, arch, tree)
    _CACHE[key] = c
    if len(_CACHE) > 256:
        _CACHE.popitem(last=False)
    return c


def evaluate(problem: Problem, arch: Any, tree: Node, values: Mapping[str, int] | None = None, check: bool = True):
    """Evaluate one mapping: a :class:`fusion_perf.result.Result`. Raises typed errors on bad input/constraints."""
    from .arch import load_arch

    arch = load_arch(arch)
    fac: list = []
    key = _tree_key(tree, fac)  # one walk for the cache key and the factor vector (single evaluations are hot)
    c = compile_tree(problem, arch, tree, key)
    if any(isinstance(f, str) for f in fac):
        fac = tree_factors(tree, values, c)  # resolves free variables, or names the one without a value
    return c.evaluate(fac, check=check)


def tree_factors(tree: Node, values: Mapping[str, int] | None = None, c: "Compiled | None" = None) -> list[int]:
    """The factor vector of ``tree`` in the compiled loop order (pre-order, each node's loops outer to inner);
    free variables are looked up in ``values``."""
    values = values or {}
    out: list[int] = []

    def rec(n: Node, path: str):
        if isinstance(n, Tile):
            for d, f in n.loops:
                if isinstance(f, str):
                    if f not in values:
                        raise MappingError(f"{path}.factors.{d}", f"free variable {f!r} has no value")
                    f = values[f]
                out.append(int(f))
            rec(n.child, f"{path}.subtree[0]")
        elif isinstance(n, Scope):
            for i, ch in enumerate(n.children):
                rec(ch, f"{path}.subtree[{i}]")

    rec(tree, "mapping")
    return out


__all__ = ["Compiled", "compile_tree", "evaluate", "tree_factors", "BatchResult"]
