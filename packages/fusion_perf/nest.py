"""TileFlow's own analysis of a mapping tree (the ``tileflow`` rules of :mod:`fusion_perf.semantics`).

A port of pku-liang/TileFlow's ``DatamovementCalculator`` (``src/loop-analysis/dm-calculator.cpp``,
``nest-analysis.cpp``), its active-tensor pass (``src/mapper/checker.cpp``, ``add_access_pattern``) and of what it
calls in Timeloop v0.2 (gulang2019/timeloop ``BufferLevel::ComputePerformance`` and the buffer energy, the
``MultiAAHR`` point sets). Its rules, where they differ from Timeloop's loop-nest analysis:

* Calls. A node is evaluated per *call* of its parent, with the number of repetitions (``epochs``) it stands
  for: a temporal node calls its child once at its loops' origin with an empty previous state, then once per
  loop ``i`` with more than one iteration, at the step from iteration 0 (loops inside ``i`` at their last
  iteration) to iteration 1 (inside loops at 0), for ``epochs · (T_{i+1} − T_i)`` repetitions (``T_i`` the trip
  count of the loops outside ``i``). The previous working set of each call is that of the same node one
  iteration earlier, so an inner tile restarts empty at every call of its parent (no reuse across the parent's
  loops, unlike Timeloop). A Sequential/Pipeline scope passes each child the last working set of the child
  before it (the first child gets the scope's own), a Sharing/Parallel scope the scope's.
* Spatial nodes evaluate their first instance only and translate its delta and working set to the others;
  equal deltas among instances are one multicast access, a delta equal to a mesh neighbour's previous working
  set is a link transfer (Timeloop's ``ComputeNetworkLinkTransfers`` test).
* Which tensors a node holds (``checker.cpp``): for every producer→consumer pair, the nodes from the pair's
  lowest common ancestor down to each op; the first reads (and updates, for the producer) the tensor, each next
  one fills it (and writes it back). Global inputs and outputs pair with the root. The released TileFlow starts
  these chains at the first tile (skipping scopes) and skips bypassed nodes.
* Counts are per instance of the node finalised (each temporal node below a non-spatial parent, each outermost
  spatial node, for its child's level), summed over calls: reads and updates are the distinct words its child
  calls asked for, fills the parent's words times their multicast factor over the level's whole fan-out
  (``ComputeParentShareAccess``: the arch fan-out, not the instances used), truncated to an integer per call.
  The fan-outs are Timeloop's: a component's own ``meshX``, the rest of its instances along y.
* Cycles: per finalised call, Timeloop's ``ComputePerformance`` (the slowdown of the least sufficient port over
  the call's compute cycles, ``ceil``); Sequential/Sharing scopes add, Parallel/Pipeline take the max; a
  temporal node adds its child calls' cycles.
* Energy: per finalised call, ``ceil(words per instance / block size)`` per tensor and action times the
  action's energy and the instances used; the MACs at their op energy; accesses of ``profile: False`` nodes
  count no energy and no words.

``early_tileflow`` gives TileFlow as of commit 4200e63 (2023-04-23), which wrote the result CSVs of its
``tests/cases``: the chains start at the common ancestor even when it is a scope, which holds nothing (an
intermediate whose ops meet at a scope is then filled into their tiles with no read above, since a scope passes
up only the accesses of the tensors it fills or writes back); bypass and ``profile`` play no part; a node
accumulates its child calls' accesses of every tensor; and each tensor's index map is taken from the wrong data
space (:meth:`NestAnalysis._projections`). That commit's active-tensor lists could hold a tensor twice (one
entry per consumer), counting its fills twice; the CSVs have them once, as here (and in the released TileFlow).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .errors import MappingError

Box = tuple  # per tensor dimension a half-open range (lo, hi)


# --- point sets: Timeloop's MultiAAHR (src/loop-analysis/point-set-multi-aahr.cpp, point-set-aahr.cpp) ---------
def _box_minus(a: Box, b: Box) -> list:
    """``AxisAlignedHyperRectangle::MultiSubtract``: ``a − b`` as disjoint slices, rank by rank."""
    for (alo, ahi), (blo, bhi) in zip(a, b):
        if ahi <= blo or bhi <= alo:
            return [a]
    out, mid = [], list(a)
    for r, (blo, bhi) in enumerate(b):
        lo, hi = mid[r]
        if lo < blo:
            out.append(tuple(mid[:r]) + ((lo, blo),) + tuple(mid[r + 1:]))
            lo = blo
            mid[r] = (lo, hi)
        if bhi < hi:
            out.append(tuple(mid[:r]) + ((bhi, hi),) + tuple(mid[r + 1:]))
            mid[r] = (lo, bhi)
    return out


def _minus(a: tuple, b: tuple) -> tuple:
    """``MultiAAHR::Subtract``: every box of ``a`` minus each box of ``b`` in turn."""
    cur = list(a)
    for bb in b:
        nxt = []
        for aa in cur:
            nxt += _box_minus(aa, bb)
        cur = nxt
    return tuple(cur)


def _size(s: tuple) -> int:
    n = 0
    for bx in s:
        v = 1
        for lo, hi in bx:
            v *= hi - lo
        n += v
    return n


def _same(a: tuple, b: tuple) -> bool:
    """``MultiAAHR::operator==``: the same boxes (they are disjoint, so as sets)."""
    return len(a) == len(b) and set(a) == set(b)


def _space_minus(a: dict, b: dict) -> dict:
    return {t: _minus(s, b[t]) if t in b else s for t, s in a.items()}


def _space_add(a: dict, b: dict) -> dict:
    """``MultiAAHR::operator+=`` per tensor: ``a − b`` then ``b``'s boxes."""
    out = dict(a)
    for t, s in b.items():
        out[t] = _minus(out.get(t, ()), s) + tuple(bx for bx in s if _size((bx,)))
    return out


@dataclass
class _Ret:
    """``RetVal``: deltas and last working sets per spatial id, the tile being built, the accesses asked of the
    parent per tensor ({(multicast, scatter): words}) and the cycles."""

    deltas: dict = field(default_factory=dict)
    last: dict = field(default_factory=dict)
    tile: dict | None = None
    stat: dict = field(default_factory=dict)
    cycle: int = 0


@dataclass
class _TN:
    """One node of TileFlow's tree with what its passes compute (``NodeConfig`` and the active tensors)."""

    kind: str
    parent: Any = None
    id: int = 0  # the compiled tree's node
    children: list = field(default_factory=list)
    nest: list = field(default_factory=list)  # (dim, count, x) outer to inner; x: along mesh x
    level: int = 0  # TileFlow's storage level index (0 = innermost)
    spatial: bool = False
    profile: bool = True
    bypass: tuple = ()
    op: str = ""
    scope: str = ""
    path: str = ""
    read: set = field(default_factory=set)
    fill: set = field(default_factory=set)
    update: set = field(default_factory=set)
    wb: set = field(default_factory=set)
    span: dict = field(default_factory=dict)
    strides: list = field(default_factory=list)
    fanout: tuple = (1, 1)
    logical: tuple = (1, 1)
    offset: tuple = (0, 0)
    rep: int = 1
    expansion: tuple = (1, 1)


class NestAnalysis:
    """TileFlow's analysis of one factor vector of a compiled tree. :meth:`run` returns the cycles and sets
    ``energy`` (pJ), ``counts`` ``{(level name, tensor): {reads, fills, updates}}`` (per instance, summed over the
    finalised calls), ``exact`` (per count key ``[reads, fills, updates]`` before TileFlow truncates reads and
    fills per call), ``slow`` (per level the largest slowdown) and ``node_cycles`` (per compiled node, its calls'
    cycles before and after its bandwidth bound).

    ``enumerate_all`` is the trace simulator's mode (:mod:`fusion_perf.tracesim`): every loop iteration and every
    spatial instance is evaluated from its actual previous state instead of one call per loop standing for its
    steps and translated copies of the first instance; the counts are still those of the first instance."""

    # comp is a model.Compiled, untyped here because model imports this module
    def __init__(self, comp: Any, F: list[int], enumerate_all: bool = False):
        self.c, self.F, self.enum = comp, F, enumerate_all
        self.P, self.arch, self.sem = comp.problem, comp.arch, comp.arch.semantics
        self.nlev = len(self.arch.levels)
        # tensors in TileFlow's data-space order (first declaration; sums over tensors run in this order)
        self.decl = {o.name: list(o.attr("data_spaces") or [a.tensor.name for a in o.outputs + o.inputs])
                     for o in self.P.ops}
        self.tensors = list(dict.fromkeys(t for o in self.P.ops for t in self.decl[o.name]))
        self.proj = self._projections()
        self.rw = set(self.P.producer)
        self.dims = list(self.P.dims)
        self._di = {d: i for i, d in enumerate(self.dims)}
        self.root = self._tree(0, None)
        self._active()
        self._scales(self.root)
        self._offsets()
        self._expansion(self.root, (1, 1))

    def _projections(self) -> dict:
        """Each tensor's index map in TileFlow's common workload: that of the first op declaring it. TileFlow as of
        4200e63 (``problem/parser.cpp``, ``set_common_shape``, fixed by e71d06b "frontend index") appended every
        op's data spaces to the list of projections but numbered only new tensors, so tensor number ``i`` (in
        order of first declaration) took the ``i``-th data space declared, counting repeats."""
        first = {t: self.P.tensor_access(t).terms for t in self.tensors}
        if not self.sem.early_tileflow:
            return first
        decl = [self.P.access[(o.name, t)].terms for o in self.P.ops for t in self.decl[o.name]]
        return {t: decl[i] for i, t in enumerate(self.tensors)}

    # --- the tree TileFlow analyses ------------------------------------------------------------------------
    def _tree(self, i: int, parent):
        n = self.c.nodes[i]
        if n.kind == "op":
            return _TN("op", parent, i, op=n.op, path=n.path)
        if n.kind == "scope":
            tn = _TN("scope", parent, i, scope=n.scope, path=n.path)
            tn.children = [self._tree(k, tn) for k in n.children]
            return tn
        loops = [(self.c.loops[g][0], self.F[g]) for g in n.loops]
        spatial = n.tkind == "spatial"
        split = len(loops) if n.split is None else n.split
        # TileFlow's parser: a spatial node's permutation position i < split runs along x; its loop nest lists the
        # permutation reversed (outermost first); ours keeps a spatial node's loops in permutation order
        order = [(d, f, i < split) for i, (d, f) in enumerate(loops)][::-1] if spatial else \
            [(d, f, False) for d, f in loops]
        nest = [x for x in order if x[1] > 1] or [(self.dims[0], 1, spatial)]  # constructLoopNest drops 1s
        tn = _TN("tile", parent, i, nest=nest, level=self.nlev - 1 - n.level, spatial=spatial, profile=n.profile,
                 bypass=tuple(n.bypass), path=n.path)
        child = self.c.nodes[n.children[0]]
        if spatial and child.kind == "scope":
            # SpatialScopeSwapper (checker.cpp): a spatial tile over a scope is copied under the scope, above
            # each of its children
            sc = _TN("scope", parent, n.children[0], scope=child.scope, path=child.path)
            for k in child.children:
                cp = _TN("tile", sc, i, nest=nest, level=tn.level, spatial=True, profile=n.profile, bypass=tn.bypass,
                         path=n.path)
                cp.children = [self._tree(k, cp)]
                sc.children.append(cp)
            return sc
        tn.children = [self._tree(n.children[0], tn)]
        return tn

    def _nodes(self, n=None):
        n = n or self.root
        yield n
        for c in n.children:
            yield from self._nodes(c)

    # --- active tensors (checker.cpp get_active_tensors / add_access_pattern) ------------------------------
    def _active(self):
        ops = [n for n in self._nodes() if n.kind == "op"]
        made: dict[str, Any] = {t: self.root for t in self.P.inputs}
        for n in ops:
            o = self.P.op(n.op)
            for a in o.inputs:
                t = a.tensor.name
                if t not in made:
                    raise MappingError(n.path, f"TileFlow: op {n.op}'s input {t} is produced later in the tree")
                src = made[t]
                self._pattern(t if src.kind == "op" else None, src, t, n)
            made[o.outputs[0].tensor.name] = n
        for t in self.P.outputs:
            self._pattern(t, made[t], None, self.root)

    def _path(self, n) -> list:
        out = []
        while n is not None:
            out.append(n)
            n = n.parent
        return out[::-1]

    def _pattern(self, produced, producer, consumed, consumer):
        sp, sc = self._path(producer), self._path(consumer)
        k = 0
        while k < min(len(sp), len(sc)) and sp[k] is sc[k]:
            k += 1
        common = sp[k - 1]
        sp, sc = [common] + sp[k:], [common] + sc[k:]
        if not self.sem.early_tileflow:  # released TileFlow: the chains start at the first tile
            while sp and sp[0].kind != "tile":
                sp.pop(0)
            while sc and sc[0].kind != "tile":
                sc.pop(0)
        if produced is not None:
            self._chain(sp, produced, True)
        if consumed is not None:
            self._chain(sc, consumed, False)

    def _chain(self, chain: list, t: str, producer: bool):
        for j, node in enumerate(chain):
            if not self.sem.early_tileflow and t in node.bypass:
                continue
            nxt = chain[j + 1] if j + 1 < len(chain) else None
            if not producer or t in self.rw:
                node.read.add(t)
                if nxt is not None:
                    nxt.fill.add(t)
            if producer:
                node.update.add(t)
                if nxt is not None:
                    nxt.wb.add(t)

    # --- per-node configuration (DimScaleCalculator, SpatialOffsetsCalculator, ComputeExpansion) ------------
    def _scales(self, n) -> dict:
        if n.kind == "op":
            n.span = {d: 1 for d in self.dims}
            return n.span
        kids = [self._scales(c) for c in n.children]
        if n.kind == "scope":
            n.span = {d: max(k[d] for k in kids) for d in self.dims}
            return n.span
        cur = dict(kids[0])
        n.strides = [0] * len(n.nest)
        for i in range(len(n.nest) - 1, -1, -1):
            d, f, _ = n.nest[i]
            n.strides[i] = cur[d]
            cur[d] *= f
        n.span = cur
        return cur

    def _offsets(self):
        """``SpatialOffsetsCalculator``: each tile's offset in its level's fan-out and replication factor, stack
        use included (a tile pushes its output offset and visits its children without popping theirs; a scope
        pops one per child, the last pushed)."""
        self._ins: list = []
        self._outs: list = []
        self._rep = 1
        self._off_visit(self.root)

    def _off_visit(self, n):
        if n.kind == "tile":
            self._off_tile(n)
        elif n.kind == "scope":
            self._off_scope(n)
        else:
            n.rep = self._rep

    def _off_tile(self, n):
        x, y, mx = self._ins.pop() if self._ins else (0, 0, 0)
        lx = ly = 1
        if n.spatial:
            for _, f, along_x in n.nest:
                lx, ly = (lx * f, ly) if along_x else (lx, ly * f)
            n.fanout = self.arch.fanout(self.nlev - 1 - n.level)
        n.logical = (lx, ly)
        if y + ly <= n.fanout[1]:
            n.offset = (x, y)
            self._outs.append((x, y + ly, max(mx, x + lx)))
        else:
            n.offset = (mx, 0)
            self._outs.append((mx, ly, mx + lx))
        n.rep = self._rep
        self._rep *= lx * ly
        for c in n.children:
            self._off_visit(c)
        self._rep = n.rep

    def _off_scope(self, n):
        init = self._ins.pop() if self._ins else (0, 0, 0)
        seq = n.scope in ("sequential", "sharing")  # siblings start at the same offset, else one after another
        out = (0, 0, 0) if seq else init
        for c in n.children:
            self._ins.append(init if seq else out)
            self._off_visit(c)
            top = self._outs.pop()
            out = tuple(max(a, b) for a, b in zip(out, top)) if seq else top
        self._outs.append(out)

    def _expansion(self, n, e):
        e = (e[0] * n.logical[0], e[1] * n.logical[1])
        n.expansion = e
        for c in n.children:
            self._expansion(c, e)

    # --- TileFlow's memory check (checker.cpp MemoryConstraintParser) ----------------------------------------
    def capacity_violation(self):
        """TileFlow's capacity rule: at every profiled temporal tile, the tensors it reads or updates, each of
        footprint ``Π_dims Σ_terms |coeff|·span`` (``span`` the factors of the tile's subtree, a scope taking each
        dimension's max over its children), fit the words of one instance of the tile's level. Data an
        intermediate keeps between the ops of a scope is not counted (TileFlow's rule, looser than the closed
        form's). Returns the first violation ``(path, level index, words, capacity, {tensor: words})`` or None."""
        for n in self._nodes():
            if n.kind != "tile" or n.spatial or not n.profile:
                continue
            lv = self.nlev - 1 - n.level
            cap = self.arch.levels[lv].capacity_words
            fp = {}
            for t in self.tensors:
                if t in n.read or t in n.update:
                    fp[t] = math.prod(sum(abs(cf) * n.span[d] for d, cf in term) for term in self.proj[t])
            need = sum(fp.values())
            if need > cap:
                return n.path, lv, need, cap, fp
        return None

    # --- working sets --------------------------------------------------------------------------------------
    def _space(self, x: tuple, span: dict, keep) -> dict:
        """The tensors ``keep`` touched by the operation box at ``x`` of extent ``span`` (``OperationSpace``)."""
        out = {}
        for t in self.tensors:
            if t not in keep:
                continue
            bx = []
            for term in self.proj[t]:
                lo = hi = 0
                for d, cf in term:
                    a, b = cf * x[self._di[d]], cf * (x[self._di[d]] + span[d] - 1)
                    lo, hi = lo + min(a, b), hi + max(a, b)
                bx.append((lo, hi + 1))
            out[t] = (tuple(bx),)
        return out

    # --- the recursion (DatamovementCalculator::visit*, PerfectLoopnestAnalyzer) ---------------------------
    def run(self) -> int:
        self.energy = 0.0
        self.counts: dict = {}
        self.exact: dict = {}
        self.slow: dict = {}
        self.node_cycles: dict = {}
        self._mute = 0  # > 0 while the enumeration evaluates an instance other than the first
        self._inst: dict = {}
        ret = self._visit(self.root, 1, tuple(0 for _ in self.dims), {})
        return ret.cycle

    def _visit(self, n, epochs: int, x: tuple, init: dict) -> _Ret:
        if n.kind == "op":
            ret = self._op(n, epochs, x)
        elif n.kind == "scope":
            ret = self._scope(n, epochs, x, init)
        else:
            ret = self._spatial(n, epochs, x, init) if n.spatial else self._temporal(n, epochs, x, init)
        before = ret.cycle
        if epochs and n.kind == "tile" and not self._under_spatial(n):
            self._parent_share(n, ret)
            self._finalize(n.children[0].level if n.spatial else n.level, ret, n.profile)
        if epochs and not self._mute:
            c = self.node_cycles.setdefault(n.id, [0, 0])
            c[0] += before
            c[1] += ret.cycle
        return ret

    @staticmethod
    def _under_spatial(n) -> bool:
        return n.parent is not None and n.parent.kind == "tile" and n.parent.spatial

    def _op(self, n, epochs: int, x: tuple) -> _Ret:
        if not epochs:
            return _Ret()
        ps = self._space(x, n.span, n.fill | n.wb)
        ret = _Ret(stat={t: {(1, 1): float(_size(s) * epochs)} for t, s in ps.items()})
        ret.last = {0: ps}
        ret.deltas = {0: ps}
        ret.cycle = epochs  # ArithmeticUnits: ceil(computes / instances) per instance
        if not self._mute:
            self.energy += epochs * n.rep * self.arch.mac_energy
        return ret

    def _scope(self, n, epochs: int, x: tuple, init: dict) -> _Ret:
        keep = n.fill | n.wb  # a scope passes up only the accesses of the tensors it fills or writes back
        chained = n.scope in ("sequential", "pipeline")
        out = _Ret()
        for c in n.children:
            r = self._visit(c, epochs, x, init)
            if chained:
                init = r.last
            else:
                out.last = self._state_add(out.last, r.last)
            for t in keep:
                _accumulate(out.stat.setdefault(t, {}), r.stat.get(t, {}))
            out.cycle = out.cycle + r.cycle if n.scope in ("sequential", "sharing") else max(out.cycle, r.cycle)
        if chained:
            out.last = init
        return out

    @staticmethod
    def _state_add(a, b) -> dict:
        out = dict(a.items())
        for k, s in b.items():
            out[k] = _space_add(out[k], s) if k in out else s
        return out

    def _temporal(self, n, epochs: int, x: tuple, init: dict) -> _Ret:
        """``ComputeTemporalWorkingSet``: the node's tile at ``x``; with epochs, its child calls and its delta."""
        ps = self._space(x, n.span, n.read | n.update)
        ret = _Ret(last={0: ps})
        if not epochs:
            return ret
        stat, ret.cycle = self._simulate(n, epochs, x, init)
        ret.tile = {t: self._info(n, ps, t, sum(stat.get(t, {}).values())) for t in self.tensors}
        ret.deltas = {0: _space_minus(ps, init[0]) if 0 in init else ps}
        ret.stat, _ = self._stats(n, init, ret.deltas, epochs)
        return ret

    @staticmethod
    def _info(n, ps: dict, t, acc: float) -> dict:
        """A tensor's entry of the tile a temporal node builds (``InitTile``, ``ComputeReadUpdate``): the child
        calls' accesses ``acc`` are its reads (if it reads ``t``) and updates (if it updates it)."""
        return {"shape": _size(ps.get(t, ())), "peer": 0.0, "fanout": 1, "rep": n.rep, "exp": n.expansion,
                "reads": round(acc) if t in n.read else 0, "exact_reads": acc if t in n.read else 0.0,
                "updates": round(acc) if t in n.update else 0}

    def _simulate(self, n, epochs: int, x: tuple, init: dict):
        """``SimulateTemporalExecution``: the child's first call, then one call per loop with more than one
        iteration at its first step, standing for all of that loop's steps."""
        child = n.children[0]
        keep = set(self.tensors) if self.sem.early_tileflow else n.read | n.update
        stat: dict = {}
        if self.enum:
            return self._enumerate(n, child, epochs, x, keep)
        r = self._visit(child, epochs, x, {})
        for t in keep:
            _accumulate(stat.setdefault(t, {}), r.stat.get(t, {}))
        cycle = r.cycle
        trips = [1]
        for _, f, _ in n.nest:
            trips.append(trips[-1] * f)
        for i, (d, f, _) in enumerate(n.nest):
            if f <= 1:
                continue
            last = list(x)
            for j in range(i + 1, len(n.nest)):
                dj, fj, _ = n.nest[j]
                last[self._di[dj]] += n.strides[j] * (fj - 1)
            prev = self._visit(child, 0, tuple(last), init).last
            nxt = list(x)
            nxt[self._di[d]] += n.strides[i]
            r = self._visit(child, epochs * (trips[i + 1] - trips[i]), tuple(nxt), prev)
            for t in keep:
                _accumulate(stat.setdefault(t, {}), r.stat.get(t, {}))
            cycle += r.cycle
        return stat, cycle

    def _enumerate(self, n, child, epochs: int, x: tuple, keep: set):
        """Every iteration of the node's loops in order, each from the child's previous working set."""
        stat: dict = {}
        cycle, prev = 0, {}
        for it in _odometer([f for _, f, _ in n.nest]):
            y = list(x)
            for (d, _, _), i, st in zip(n.nest, it, n.strides):
                y[self._di[d]] += i * st
            r = self._visit(child, epochs, tuple(y), prev)
            prev = r.last
            for t in keep:
                _accumulate(stat.setdefault(t, {}), r.stat.get(t, {}))
            cycle += r.cycle
        return stat, cycle

    def _spatial(self, n, epochs: int, x: tuple, init: dict) -> _Ret:
        """``ComputeSpatialWorkingSet``: the first instance's call, its delta and working set translated to the
        other instances, then multicast and link transfers among them."""
        ret = _Ret()
        first = self._l2p(n, 0)
        child_init = {0: init.get(first, {})}
        r = self._visit(n.children[0], epochs, x, child_init)
        ret.cycle, ret.tile = r.cycle, r.tile
        d0, w0 = r.deltas.get(0, {}), r.last[0]
        inst = self._instances(n)
        if self.enum:
            ret.deltas[first], ret.last[first] = d0, w0
            for sid, shift, _ in inst[1:]:  # a later instance overwrites an id it shares
                ret.deltas[sid], ret.last[sid] = self._instance(n, epochs, x, init, sid, shift)
        else:
            ret.deltas, ret.last = _Family(d0, inst), _Family(w0, inst)
        if not epochs:
            return ret
        ret.stat, links = self._stats(n, init, ret.deltas, epochs)
        fan = n.fanout[0] * n.fanout[1]
        lf = n.logical[0] * n.logical[1]
        for t, info in ret.tile.items():
            info["fanout"] = fan
            peer = links.get(t, 0) / lf
            info["peer"] = peer
            info["reads"] = int(info["reads"] + peer)  # uint64 += double
            info["exact_reads"] = info.get("exact_reads", 0.0) + peer
        return ret

    def _instance(self, n, epochs: int, x: tuple, init: dict, sid: int, shift: dict):
        """The enumeration's own call of one instance other than the first (not counted): its delta and set."""
        y = list(x)
        for d, v in shift.items():
            y[self._di[d]] += v
        self._mute += 1
        r = self._visit(n.children[0], epochs, tuple(y), {0: init.get(sid, {})})
        self._mute -= 1
        return r.deltas.get(0, {}), r.last[0]

    def _instances(self, n) -> list:
        """Per instance its physical id, its offset from the first instance per dim and per tensor dim
        (``FillSpatialDeltas``: logical ids run over the loops outer to inner, each loop's index times the child's
        extent along its dim; ``GetCurrentTranslationVectors`` adds one such step per index term over the loop's
        dim, the coefficient not applied)."""
        if id(n) in self._inst:
            return self._inst[id(n)]
        out = [(0, {})]
        for k, (d, f, _) in enumerate(n.nest):
            out = [(logical * f + i, {**shift, d: shift.get(d, 0) + i * n.strides[k]})
                   for logical, shift in out for i in range(f)]
        got = [(self._l2p(n, logical), shift,
                {t: tuple(sum(shift.get(d, 0) for d, _ in term) for term in proj) for t, proj in self.proj.items()})
               for logical, shift in out]
        self._inst[id(n)] = got
        return got

    def _l2p(self, n, logical: int) -> int:
        """``SpatialIDL2P``: the physical id of a logical instance, from the node's offset in the fan-out."""
        ly = n.logical[1]
        return (logical % ly + n.offset[1]) + (logical // ly + n.offset[0]) * n.fanout[1]

    # --- accesses asked of the parent (ComputeStats: link transfers, then multicast) -----------------------
    def _stats(self, n, last, deltas, epochs: int):
        """Per tensor the parent's accesses ``{(multicast, scatter): words}`` and the link-transfer words."""
        todo = {t: set(deltas) for t in self.tensors}
        links = self._links(n, last, deltas, epochs, todo)
        stat = {}
        fam = isinstance(deltas, _Family)
        for t in self.tensors:
            temp: dict = {}
            if fam:  # one set translated: equal sets are equal offsets, all of one size
                size = deltas.sizes.get(t, 0)
                if size:
                    offs = deltas.offs
                    for mc in Counter(offs[k][t] for k in todo[t]).values():
                        a = temp.setdefault(mc, [0, 0])
                        a[0] += size * epochs
                        a[1] += 1
                stat[t] = {(mc, sc): float(acc) for mc, (acc, sc) in temp.items()}
                continue
            groups: dict = {}
            for k in todo[t]:
                g = groups.setdefault(_key(deltas, k, t), [0, k])
                g[0] += 1
            for mc, k in groups.values():
                size = _tsize(deltas, k, t)
                if size:
                    a = temp.setdefault(mc, [0, 0])
                    a[0] += size * epochs
                    a[1] += 1
            # ComputeAccessStat, multicast enabled: one entry per multicast factor
            stat[t] = {(mc, sc): float(acc) for mc, (acc, sc) in temp.items()}
        return stat, links

    def _links(self, n, last, deltas, epochs: int, todo: dict) -> dict:
        """``ComputeLinkTransfer``: an instance whose delta equals a mesh neighbour's previous working set gets it
        over the link (row-major ids over the node's fan-out)."""
        hs, vs = n.fanout
        links: dict = {}
        fam = isinstance(deltas, _Family) and isinstance(last, _Family)
        for t in self.tensors:
            if fam:
                n_linked = _family_links(deltas, last, t, hs, vs, todo[t])
                if n_linked:
                    links[t] = links.get(t, 0) + n_linked * deltas.sizes[t] * epochs
                continue
            pairs = ((cur, prev) for cur in deltas for prev in _neighbours(cur, hs, vs) if prev in last)
            for cur, prev in pairs:
                size = _tsize(deltas, cur, t)
                if size and cur in todo[t] and cur // hs < vs and prev in _neighbours(cur, hs, vs) and \
                        size == _tsize(last, prev, t) and _same(_tensor(deltas, cur, t), _tensor(last, prev, t)):
                    links[t] = links.get(t, 0) + size * epochs
                    todo[t].discard(cur)
        return links

    # --- finalisation (ComputeParentShareAccess, ComputeFill, finalizeStat → BufferLevel::Evaluate) ---------
    def _parent_share(self, n, ret: _Ret):
        for t, info in ret.tile.items():
            share = 0.0
            if t in n.fill:
                for (mc, _), acc in sorted(ret.stat.get(t, {}).items()):
                    share += acc * mc / info["fanout"]
            info["share"] = share + info["peer"]
            info["fills"] = int(info["share"])  # uint64 from double

    def _finalize(self, level: int, ret: _Ret, profile: bool):
        lv = self.nlev - 1 - level
        lvl = self.arch.levels[lv]
        comp = ret.cycle
        tot_r = tot_w = 0.0
        for t in self.tensors:
            info = ret.tile[t]
            ratio = info["exp"][0] * info["exp"][1] / info["rep"]
            tot_r += math.ceil(info["reads"] / ratio) / comp
            tot_w += math.ceil((info["fills"] + info["updates"]) / ratio) / comp
        sd = 1.0
        for bw, u in ((lvl.read_bw, tot_r), (lvl.write_bw, tot_w), (lvl.shared_bw, tot_r + tot_w)):
            if math.isfinite(bw) and bw < u:
                sd = min(sd, bw / u)
        ret.cycle = math.ceil(comp / sd)
        if self._mute:
            return
        self.slow[lvl.name] = max(self.slow.get(lvl.name, 0.0), ret.cycle / comp)
        if profile or self.sem.early_tileflow:  # the 4200e63 rules have no profile flag
            self._account(lvl, ret.tile)

    def _account(self, lvl, tile: dict):
        for t, info in tile.items():
            n = (info["reads"], info["fills"], info["updates"])
            if any(n):
                c = self.counts.setdefault((lvl.name, t), {"reads": 0, "fills": 0, "updates": 0})
                for k, v in zip(("reads", "fills", "updates"), n):
                    c[k] += v
            if info["exact_reads"] or info["share"] or info["updates"]:
                ex = self.exact.setdefault((lvl.name, t), [0.0, 0.0, 0])
                ex[0] += info["exact_reads"]
                ex[1] += info["share"]
                ex[2] += info["updates"]
            xy = info["exp"][0] * info["exp"][1]
            util = xy / min(xy, lvl.instances)
            e = 0.0
            for v, pj in zip(n, (lvl.read_energy, lvl.fill_e, lvl.update_e)):
                vec = -(-v // lvl.block_size) if v and info["shape"] else v
                e += vec * pj
            self.energy += e / util * info["rep"]


class _Family:
    """The deltas or working sets of one spatial call's instances by id: the first instance's, translated to each
    instance, shifted only when asked (the first instance keeps an id it shares; later ones overwrite it)."""

    def __init__(self, base: dict, inst: list):
        self.base = base
        self.offs: dict = {}
        for k, (sid, _, offs) in enumerate(inst):
            if k == 0:
                self.offs.setdefault(sid, offs)
            else:
                self.offs[sid] = offs
        self.memo: dict = {}
        self.sizes = {t: _size(v) for t, v in base.items()}
        self.bounds = {t: _hull(v) for t, v in base.items()}

    def __contains__(self, sid) -> bool:
        return sid in self.offs

    def __iter__(self):
        return iter(self.offs)

    def __getitem__(self, sid) -> dict:
        return {t: self.tensor(sid, t) for t in self.base}

    def get(self, sid, default=None):
        return self[sid] if sid in self.offs else default

    def items(self):
        return ((sid, self[sid]) for sid in self.offs)

    def tensor(self, sid, t) -> tuple:
        got = self.memo.get((sid, t))
        if got is None:
            off = self.offs[sid][t]
            s = self.base.get(t, ())
            got = tuple(tuple((lo + o, hi + o) for (lo, hi), o in zip(bx, off)) for bx in s) if any(off) else s
            self.memo[(sid, t)] = got
        return got


def _tensor(state, sid, t) -> tuple:
    return state.tensor(sid, t) if isinstance(state, _Family) else state[sid].get(t, ())


def _tsize(state, sid, t) -> int:
    """Size of a tensor's set in an instance's state (a translation keeps the first instance's size)."""
    return state.sizes.get(t, 0) if isinstance(state, _Family) else _size(state[sid].get(t, ()))


def _neighbours(i: int, hs: int, vs: int) -> list:
    """Ids of the mesh neighbours of id ``i`` on an ``hs`` x ``vs`` mesh, ids row-major."""
    h, v = i % hs, i // hs
    return [v2 * hs + h2 for h2, v2 in ((h - 1, v), (h, v - 1), (h, v + 1), (h + 1, v))
            if 0 <= h2 < hs and 0 <= v2 < vs]


def _family_pairs(deltas: "_Family", last: "_Family", t) -> list:
    """The (instance, previous instance) pairs whose sets of ``t`` have the same bounds, found by offset: equal
    sets have equal bounds, so only these can be equal."""
    db, lb = deltas.bounds.get(t, ()), last.bounds.get(t, ())
    if not db or [hi - lo for lo, hi in db] != [hi - lo for lo, hi in lb]:
        return []
    want = tuple(b[0] - a[0] for a, b in zip(db, lb))
    at: dict = {}
    for prev in last:
        at.setdefault(tuple(o + w for o, w in zip(last.offs[prev][t], want)), []).append(prev)
    return [(cur, prev) for cur in deltas for prev in at.get(deltas.offs[cur][t], ())]


def _family_links(deltas: "_Family", last: "_Family", t, hs: int, vs: int, todo: set) -> int:
    """How many instances of ``todo`` get their set of ``t`` over a link: the one-pass form of testing
    :func:`_family_pairs` with :func:`_same` and the neighbour rule; the linked instances leave ``todo``. Both
    families being one set translated, a pair's sets are equal iff the two base sets are, shifted by the bounds'
    difference (tested once)."""
    size = deltas.sizes.get(t, 0)
    if not size or size != last.sizes.get(t, 0):
        return 0
    db, lb = deltas.bounds.get(t, ()), last.bounds.get(t, ())
    if not db or [hi - lo for lo, hi in db] != [hi - lo for lo, hi in lb]:
        return 0
    want = tuple(b[0] - a[0] for a, b in zip(db, lb))
    shifted = tuple(tuple((lo + w, hi + w) for (lo, hi), w in zip(bx, want)) for bx in deltas.base.get(t, ()))
    if not _same(shifted, last.base.get(t, ())):
        return 0
    at: dict = {}
    loffs = last.offs
    for prev in loffs:
        at.setdefault(loffs[prev][t], []).append(prev)
    shift = any(want)
    doffs = deltas.offs
    linked = []
    for cur in doffs:
        if cur not in todo or cur // hs >= vs:
            continue
        h, v = cur % hs, cur // hs
        key = tuple(o - w for o, w in zip(doffs[cur][t], want)) if shift else doffs[cur][t]
        for prev in at.get(key, ()):
            h2, v2 = prev % hs, prev // hs
            if abs(h - h2) + abs(v - v2) == 1 and v2 < vs:
                linked.append(cur)
                break
    todo.difference_update(linked)
    return len(linked)


def _hull(s: tuple) -> tuple:
    """Per tensor dim the (lowest, highest) bound over the boxes of a set."""
    return tuple((min(r[0] for r in rs), max(r[1] for r in rs)) for rs in zip(*s))


def _key(state, sid, t):
    """A key equal for equal sets within one state: a family's sets are one set translated, equal iff their
    offsets are (or both are empty)."""
    if isinstance(state, _Family):
        return state.offs[sid][t] if state.sizes.get(t) else ()
    return frozenset(state[sid].get(t, ()))


def _odometer(counts: list):
    """Every index vector of loops with these counts, the last loop fastest."""
    idx = [0] * len(counts)
    while True:
        yield tuple(idx)
        k = len(counts) - 1
        while k >= 0 and idx[k] == counts[k] - 1:
            idx[k] = 0
            k -= 1
        if k < 0:
            return
        idx[k] += 1


def _accumulate(mine: dict, other: dict):
    """``AccessStatMatrix::Accumulate``."""
    for k, v in other.items():
        mine[k] = mine.get(k, 0.0) + v
