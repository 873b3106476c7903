"""The analytical data-movement model of a fused chain (Chimera's inter-block model) over shared_ir loop nests.

A chain's ops are unified into one loop nest: dims of different ops that index the same axis of an intermediate
tensor become one *chain dim* (for a GEMM chain: ``b0, m, k, l, n``). A *block order* is a permutation of the chain
dims' block loops; *tiles* give each dim's block size. The fused kernel executes

    for <prefix: the leading loops of the order shared by every compute op>:
        op1's remaining block loops, in the order's relative order   (produces the intermediate's tile)
        op2's remaining block loops, ...

so the intermediate only ever holds its prefix tile (dims outside the prefix at full extent) and never goes to
the outer memory. Per memory level:

* DV (data volume, bytes moved into the level): for each tensor that enters or leaves the chain, walk its op's
  nest from the innermost loop outward; loops inside the innermost loop that indexes the tensor give reuse; from
  there outward its tile is moved once per iteration: ``DV_X = Σ_blocks footprint(X) × Π trips(non-indexing loops
  at or outside that loop)``. Loops with one trip are not loops. Footprints come from the IR (exact distinct
  elements, halos included).
* MU (memory use): ``max over ops of Σ tile footprints (bounding boxes)``, the intermediate's live tile counted in
  both its producer and its consumer.
* cost_d = DV_d / bandwidth of the level that feeds it; predicted time = max(compute, max_d cost_d).

The tile search is exact over the *dominant* tile sizes of each dim (for each trip count the smallest tile that
reaches it: DV depends only on trip counts and MU grows with the tile, so no other size can win), depth-first with
two prunings: memory use (monotone in every tile; an infeasible size rules out all larger ones) and a lower bound
of DV (unassigned tiles at their largest; DV never grows with a tile).
"""
from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Iterable, Mapping, Sequence

from shared_ir import AffineExpr, Graph
from shared_ir.op import Access, Op

from .errors import InfeasiblePlanError, UnsupportedChainError


# --- the unified nest --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TensorUse:
    """One access of a tensor entering or leaving the chain, with indices over chain dims."""

    op: int
    """Index of the compute/glue op in :attr:`ChainNest.ops`."""
    access: Access
    """The access, indices renamed to chain dims."""
    is_output: bool

    @property
    def name(self) -> str:
        return self.access.tensor.name

    @cached_property
    def dims(self) -> frozenset[str]:
        return self.access.dims

    @cached_property
    def sorted_dims(self) -> tuple[str, ...]:
        return tuple(sorted(self.access.dims))

    @cached_property
    def elem_bytes(self) -> int:
        return self.access.tensor.dtype.nbytes

    @cached_property
    def simple(self) -> bool:
        """Every index is one dim with coefficient 1 (or a constant): the fast exact path."""
        return all(isinstance(e, AffineExpr)
                   and (not e.terms or (len(e.terms) == 1 and e.terms[0][1] == 1 and e.const == 0))
                   for e in self.access.indices)


@dataclass(frozen=True)
class Intermediate:
    """A tensor produced and consumed inside the chain (it lives in the inner memory)."""

    name: str
    producer: int
    consumer: int
    produce: Access
    consume: Access


def _rename(acc: Access, m: Mapping[str, str]) -> Access:
    idx = tuple(AffineExpr.of({m[d]: c for d, c in e.terms}, e.const) if isinstance(e, AffineExpr) else e
                for e in acc.indices)
    return Access(acc.tensor, idx, acc.flat)


class ChainNest:
    """The chain's ops as one nest over chain dims, built from shared_ir ops by unifying dims through the
    intermediates. ``names`` optionally maps ``(op index, local dim)`` to a chain dim name."""

    intermediate_copies: int = 1
    """Buffers of the intermediate's tile the kernel template keeps (2 for softmax: scores and probabilities)."""

    def __init__(self, ops: Sequence[Op], names: Mapping[tuple[int, str], str] | None = None, label: str = "chain"):
        self.label = label
        self.ops = tuple(ops)
        if not any(o.kind.compute_intensive for o in self.ops):
            raise UnsupportedChainError(label, "no compute-intensive op")
        parent: dict[tuple[int, str], tuple[int, str]] = {}

        def find(x):
            while parent.setdefault(x, x) != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        def union(a, b):
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)

        for i, o in enumerate(self.ops):
            for d in o.dims:
                find((i, d.name))
        producer = {t: i for i, o in enumerate(self.ops) for t in o.output_names}
        self.intermediates: list[Intermediate] = []
        raw_inter = []
        for j, o in enumerate(self.ops):
            for a in o.inputs:
                i = producer.get(a.tensor.name)
                if i is None or i == j:
                    continue
                p = self.ops[i].access(a.tensor.name)
                for ep, ec in zip(p.indices, a.indices):
                    if not (isinstance(ep, AffineExpr) and len(ep.terms) == 1):
                        continue
                    red = set(o.reduction_dims)
                    cand = [d for d, _ in ec.terms if d not in red] or [d for d, _ in ec.terms]
                    # a halo index (p + r - 1) ties the producer's p to the consumer's spatial dim, not its window
                    big = max(cand, key=lambda d: o.extents[d]) if cand else None
                    if big is not None:
                        union((i, ep.terms[0][0]), (j, big))
                raw_inter.append((a.tensor.name, i, j, p, a))
        # chain dim names: given, else the first op's local name (suffixed on collision)
        cls_name: dict[tuple[int, str], str] = {}
        members: dict[tuple[int, str], list[tuple[int, str]]] = {}
        for k in list(parent):
            members.setdefault(find(k), []).append(k)
        used: set[str] = set()
        for i, o in enumerate(self.ops):
            for d in o.dims:
                r = find((i, d.name))
                if r in cls_name:
                    continue
                nm = next((names[k] for k in sorted(members[r]) if k in names), None) if names else None
                nm = nm or d.name
                if nm in used:
                    nm = f"{d.name}{i}"
                    while nm in used:
                        nm += "_"
                cls_name[r] = nm
                used.add(nm)
        self.dim_map: list[dict[str, str]] = [{d.name: cls_name[find((i, d.name))] for d in o.dims}
                                              for i, o in enumerate(self.ops)]
        self.extents: dict[str, int] = {}
        self.reductions: set[str] = set()
        for i, o in enumerate(self.ops):
            for d in o.dims:
                c = self.dim_map[i][d.name]
                prev = self.extents.get(c)
                if prev is not None and prev != d.extent and not self._halo_dim(i, d.name):
                    # unified dims must agree; halo consumers (conv) may differ in window only
                    raise UnsupportedChainError(label, f"dim {c} has extents {prev} and {d.extent} in different ops")
                self.extents[c] = max(prev or 0, d.extent)
                if d.reduction:
                    self.reductions.add(c)
        self.op_dims: list[frozenset[str]] = [frozenset(m.values()) for m in self.dim_map]
        inter_names = {t for t, *_ in raw_inter}
        self.intermediates = [Intermediate(t, i, j, _rename(p, self.dim_map[i]), _rename(a, self.dim_map[j]))
                              for t, i, j, p, a in raw_inter]
        self.uses: list[TensorUse] = []
        for i, o in enumerate(self.ops):
            for a in o.inputs:
                if a.tensor.name not in inter_names:
                    self.uses.append(TensorUse(i, _rename(a, self.dim_map[i]), False))
            for a in o.outputs:
                if a.tensor.name not in inter_names:
                    self.uses.append(TensorUse(i, _rename(a, self.dim_map[i]), True))
        self.compute = tuple(i for i, o in enumerate(self.ops) if o.kind.compute_intensive)
        shared = frozenset.intersection(*(self.op_dims[i] for i in self.compute))
        self.shared = shared
        # batch dims: index every external tensor and are reductions nowhere: independent, outermost, tile 1
        self.batch = tuple(d for d in self.extents if d not in self.reductions and
                           all(d in u.dims for u in self.uses) and d in shared)
        # window dims: small reduction dims that appear in a compound index (conv r, s): not tiled, innermost
        accs = [u.access for u in self.uses] + [it.consume for it in self.intermediates]
        self.window = tuple(d for d in self.extents if d in self.reductions and self.extents[d] <= 11 and
                            any(len(e.terms) > 1 and d in e.dims for a in accs for e in a.indices
                                if isinstance(e, AffineExpr)))
        self.loops = tuple(d for d in self.extents if d not in self.batch and d not in self.window
                           and self.extents[d] > 1)
        self.flops = sum(o.flops for o in self.ops)
        self.compute_flops = sum(self.ops[i].flops for i in self.compute)
        # the tile search evaluates DV and MU ~10^6 times for a conv chain on a many-core preset (a minute per
        # shape before these): what depends only on the order, or on a tensor's dims, is computed once
        self._inter_dims = [(tuple(sorted(it.produce.dims)), tuple(sorted(it.consume.dims)))
                            for it in self.intermediates]
        self._nest_memo: dict = {}
        self._prefix_memo: dict = {}
        self._box_memo: dict = {}
        self._simple_memo: dict = {}
        self._sweep_memo: dict = {}

    def _halo_dim(self, i: int, d: str) -> bool:
        return any(len(e.terms) > 1 and d in e.dims for a in self.ops[i].accesses for e in a.indices
                   if isinstance(e, AffineExpr))

    @staticmethod
    def from_graph(g: Graph, names: Mapping[tuple[int, str], str] | None = None) -> "ChainNest":
        chains = g.chains()
        ops = chains[0].ops if chains else g.topological_ops()
        return ChainNest(ops, names, g.name)

    # --- the formulas -----------------------------------------------------------------------------------------
    def trips(self, tiles: Mapping[str, int]) -> dict[str, int]:
        return {d: -(-e // max(1, min(e, tiles.get(d, e)))) for d, e in self.extents.items()}

    def full_tiles(self, tiles: Mapping[str, int]) -> dict[str, int]:
        """Tiles with batch dims at 1, window dims at full extent, missing dims at full extent."""
        get = tiles.get
        t = {d: min(e, int(get(d, e))) for d, e in self.extents.items()}
        for d in self.batch:
            t[d] = min(t[d], int(tiles.get(d, 1)))
        for d in self.window:
            t[d] = self.extents[d]
        return t

    def prefix(self, order: Sequence[str], tiles: Mapping[str, int]) -> tuple[str, ...]:
        """The leading loops of the order (after batch dims) shared by every compute op: the fusion point."""
        key = tuple(order)  # depends on the order only (every dim is a loop, whatever its tile)
        v = self._prefix_memo.get(key)
        if v is None:
            v = self._prefix_memo[key] = self._prefix(key)
        return v

    def _prefix(self, order: tuple[str, ...]) -> tuple[str, ...]:
        out = list(self.batch)
        for d in order:
            if d in self.batch:
                continue
            if d not in self.shared:
                break
            out.append(d)
        return tuple(out)

    def op_nest(self, i: int, order: Sequence[str]) -> list[str]:
        """Op ``i``'s block loops, outermost first: batch dims, dims the order leaves out, the order, window dims."""
        key = (i, tuple(order))
        v = self._nest_memo.get(key)
        if v is None:
            v = self._nest_memo[key] = self._op_nest(i, key[1])
        return v

    def _op_nest(self, i: int, order: tuple[str, ...]) -> list[str]:
        ones = [d for d in self.extents if d not in self.batch and d not in self.window and d not in order]
        full = list(self.batch) + ones + [d for d in order if d not in self.batch] + list(self.window)
        return [d for d in full if d in self.op_dims[i]]

    def _sweep_elems(self, u: TensorUse, tiles: Mapping[str, int]) -> int:
        """Σ over the blocks of u's dims of the elements a block touches (exact: halos and padding included)."""
        if u.simple:  # the whole tensor, whatever the tiles
            v = self._simple_memo.get(id(u))
            if v is None:
                v = self._simple_memo[id(u)] = self._sweep_elems_raw(u, tiles)
            return v
        # memoised by the tiles of u's own dims: the tile search asks for the same boxes many times (halo
        # accesses are counted exactly, block by block, which is the search's main cost for conv chains)
        key = (id(u), tuple(tiles[d] for d in u.sorted_dims))
        v = self._sweep_memo.get(key)
        if v is None:
            v = self._sweep_memo[key] = self._sweep_elems_raw(u, tiles)
        return v

    def _box(self, acc: Access, dims: tuple[str, ...], tiles: Mapping[str, int]) -> int:
        """Bounding-box elements of ``acc`` (over its sorted ``dims``) at ``tiles``, memoised by those dims' tiles."""
        key = (id(acc), *map(tiles.__getitem__, dims))
        v = self._box_memo.get(key)
        if v is None:
            v = self._box_memo[key] = acc.footprint_box({d: tiles[d] for d in dims})
        return v

    def _sweep_elems_raw(self, u: TensorUse, tiles: Mapping[str, int]) -> int:
        acc = u.access
        if u.simple:
            n = 1
            for e in acc.indices:
                if e.terms:
                    n *= self.extents[e.terms[0][0]]
            return n
        total = 1
        for e, ext in zip(acc.indices, acc.extents):
            if not isinstance(e, AffineExpr) or not e.terms:
                continue
            dims = e.dims
            t = {d: tiles[d] for d in dims}
            origins = [range(0, self.extents[d], t[d]) for d in dims]
            s = 0
            for lo in itertools.product(*origins):
                lod = dict(zip(dims, lo))
                tt = {d: min(t[d], self.extents[d] - lod[d]) for d in dims}
                s += e.distinct(tt, ext, lod)
            total *= s
        return total

    def dv_tensor(self, u: TensorUse, order: Sequence[str], tiles: Mapping[str, int],
                  trips: Mapping[str, int] | None = None) -> int:
        """Bytes of tensor ``u`` moved between the level and the one outside it."""
        trips = trips or self.trips(tiles)
        nest = self.op_nest(u.op, order)
        dims = u.dims
        # the innermost loop that indexes u and runs more than once: u's tile is moved once per iteration of it
        # and of every loop outside it that does not index u (one-trip loops multiply by 1)
        inner = len(nest) - 1
        while inner >= 0 and not (nest[inner] in dims and trips[nest[inner]] > 1):
            inner -= 1
        mult = 1
        for d in nest[:inner + 1]:
            if d not in dims:
                mult *= trips[d]
        return self._sweep_elems(u, tiles) * mult * u.elem_bytes

    def dv(self, order: Sequence[str], tiles: Mapping[str, int]) -> dict[str, int]:
        t = self.full_tiles(tiles)
        trips = self.trips(t)
        out: dict[str, int] = {}
        for u in self.uses:
            out[u.name] = out.get(u.name, 0) + self.dv_tensor(u, order, t, trips)
        return out

    def live_tiles(self, order: Sequence[str], tiles: Mapping[str, int]) -> dict[str, int]:
        """Tile sizes the intermediates are held at: prefix dims tiled, every other dim at full extent."""
        return self._live(order, self.full_tiles(tiles))

    def _live(self, order: Sequence[str], t: Mapping[str, int]) -> dict[str, int]:
        """:meth:`live_tiles` of tiles that are already full (:meth:`full_tiles`)."""
        pre = self.prefix(order, t)
        return {d: (t[d] if d in pre else e) for d, e in self.extents.items()}

    def mu_ops(self, order: Sequence[str], tiles: Mapping[str, int]) -> list[int]:
        """Bytes each op needs resident at once (its tensors' tile boxes plus live intermediates)."""
        t = self.full_tiles(tiles)
        live = self._live(order, t)
        mu = [0] * len(self.ops)
        for u in self.uses:
            mu[u.op] += self._box(u.access, u.sorted_dims, t) * u.elem_bytes
        for it, (pd, cd) in zip(self.intermediates, self._inter_dims):
            eb = it.produce.tensor.dtype.nbytes
            box = max(self._box(it.produce, pd, live), self._box(it.consume, cd, live))
            box = min(box, it.produce.tensor.numel) * self.intermediate_copies
            mu[it.producer] += box * eb
            mu[it.consumer] += box * eb
        return mu

    def mu(self, order: Sequence[str], tiles: Mapping[str, int]) -> int:
        return max(self.mu_ops(order, tiles))

    def parallel_units(self, order: Sequence[str], tiles: Mapping[str, int]) -> int:
        """Independent outer blocks: batch dims and the leading prefix loops that no op reduces over."""
        n = 1
        for d in self.prefix(order, tiles):
            if d in self.reductions:
                break
            e = self.extents[d]
            # the tile as full_tiles has it (batch dims default to 1; window dims are reductions: not reached)
            n *= -(-e // max(1, min(e, int(tiles.get(d, 1 if d in self.batch else e)))))
        return n

    def orders(self) -> Iterable[tuple[str, ...]]:
        """Every permutation of the block loops (dims with one block are fixed)."""
        return itertools.permutations(self.loops)


# --- hardware levels ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Level:
    """A cache level as the model sees it (per core where the cache is private)."""

    name: str
    capacity_bytes: int
    """Capacity available to one core's tiles (a shared cache divided by the cores using it)."""
    fill_bandwidth_bytes_per_s: float
    """Total bandwidth of the level outside it (what fills this one), all cores together."""


@dataclass(frozen=True)
class LevelPlan:
    """Order and tiles at one memory level, with the model's numbers."""

    level: str
    order: tuple[str, ...]
    tiles: dict[str, int]
    dv_bytes: int
    mu_bytes: int
    capacity_bytes: int
    time_s: float
    dv_by_tensor: dict[str, int] = field(default_factory=dict)
    parallel_units: int = 1

    @property
    def prefix(self) -> tuple[str, ...]:
        return self.order


@dataclass(frozen=True)
class MicroKernel:
    """A register-blocked outer-product micro kernel: ``mr`` rows × ``nr`` columns of accumulators."""

    mr: int
    nr: int
    vector_lanes: int
    isa: str

    @property
    def registers(self) -> int:
        return self.mr * self.nr // self.vector_lanes + self.nr // self.vector_lanes + 1

    @property
    def name(self) -> str:
        return f"{self.isa}_{self.mr}x{self.nr}"


@dataclass(frozen=True)
class Plan:
    """A fused-kernel plan: a micro kernel and an order/tiles per memory level."""

    label: str
    levels: tuple[LevelPlan, ...]
    micro: MicroKernel
    fusion_level: str
    """The level whose order and tiles the generated kernel realises."""
    flops: int
    compute_s: float
    predicted_s: float
    parallel_efficiency: float
    peak_flops: float
    register_dv_bytes: int = 0
    register_time_s: float = 0.0
    rank: int = 0
    overhead_s: float = 0.0
    """Time the realised kernel spends beyond the bottleneck (additive): the intermediate spilling out of the
    inner caches, accumulator reloads per reduction segment, halo recomputation, online-softmax block overhead."""
    overheads: dict = field(default_factory=dict)
    """The parts of :attr:`overhead_s`, in seconds, by name."""
    signature: tuple = ()
    """What the code generator realises (fitted order and tiles): plans with equal signatures compile alike."""

    def level(self, name: str) -> LevelPlan:
        for lp in self.levels:
            if lp.level == name:
                return lp
        raise KeyError(f"plan has no level {name!r}; levels: {[lp.level for lp in self.levels]}")

    @property
    def fused(self) -> LevelPlan:
        return self.level(self.fusion_level)

    @property
    def bottleneck(self) -> str:
        times = {"compute": self.compute_s / max(1e-9, self.parallel_efficiency), "registers": self.register_time_s}
        times.update({lp.level: lp.time_s for lp in self.levels})
        return max(times, key=times.get)

    @property
    def base_s(self) -> float:
        """The bottleneck time without the realised kernel's overheads."""
        return self.predicted_s - self.overhead_s

    def to_dict(self) -> dict:
        return {"label": self.label, "micro_kernel": self.micro.name, "fusion_level": self.fusion_level,
                "predicted_ms": self.predicted_s * 1e3, "compute_ms": self.compute_s * 1e3,
                "parallel_efficiency": self.parallel_efficiency, "bottleneck": self.bottleneck,
                "overhead_ms": self.overhead_s * 1e3, "overheads_ms": {k: v * 1e3 for k, v in self.overheads.items()},
                "levels": [{"level": lp.level, "order": list(lp.order), "tiles": dict(lp.tiles),
                            "dv_bytes": lp.dv_bytes, "mu_bytes": lp.mu_bytes, "capacity_bytes": lp.capacity_bytes,
                            "time_ms": lp.time_s * 1e3} for lp in self.levels]}


def explain(plan: Plan, file=None) -> str:
    """A readable account of the plan: per level the order, tiles, data volume, memory use and time, then the
    predicted total. Printed (to ``file`` or stdout) and returned."""
    lines = [f"plan for {plan.label}: micro kernel {plan.micro.name} ({plan.micro.registers} vector registers), "
             f"fused at {plan.fusion_level}",
             f"  compute: {plan.flops / 1e9:.3f} GFLOP at {plan.peak_flops / 1e9:.0f} GFLOP/s peak = "
             f"{plan.compute_s * 1e3:.3f} ms (parallel efficiency {plan.parallel_efficiency:.2f})",
             f"  registers: DV {plan.register_dv_bytes / 2**20:.2f} MiB from L1 -> {plan.register_time_s * 1e3:.3f} ms"]
    for lp in plan.levels:
        tiles = ", ".join(f"{d}={lp.tiles[d]}" for d in lp.order)
        per = ", ".join(f"{t}={v / 2**20:.2f}" for t, v in lp.dv_by_tensor.items())
        lines.append(f"  {lp.level}: order {','.join(lp.order)}  tiles [{tiles}]  DV {lp.dv_bytes / 2**20:.2f} MiB "
                     f"({per})  MU {lp.mu_bytes / 1024:.1f}/{lp.capacity_bytes / 1024:.0f} KiB -> "
                     f"{lp.time_s * 1e3:.3f} ms")
    if plan.overheads:
        parts = ", ".join(f"{k} {v * 1e3:.3f}" for k, v in plan.overheads.items() if v > 0) or "none"
        lines.append(f"  realised kernel overheads (ms, added to the bottleneck): {parts}")
    lines.append(f"  predicted: {plan.predicted_s * 1e3:.3f} ms = bottleneck {plan.base_s * 1e3:.3f} ms "
                 f"({plan.bottleneck}) + overheads {plan.overhead_s * 1e3:.3f} ms")
    text = "\n".join(lines)
    print(text, file=file)
    return text


# --- search ------------------------------------------------------------------------------------------------------
def dominant_tiles(extent: int, gran: int = 1, cap: int | None = None) -> list[int]:
    """For each achievable trip count the smallest tile (a multiple of ``gran``, at most ``cap``) reaching it,
    ascending. Any other tile size has the same DV as one of these and at least its memory use."""
    cap = extent if cap is None else max(1, min(cap, extent))
    ext_pad = -(-extent // gran) * gran
    out = set()
    for t in range(1, -(-ext_pad // gran) + 1):
        T = -(-(-(-extent // t)) // gran) * gran
        if T <= cap or T >= extent and cap >= extent:
            out.add(min(T, ext_pad))
    if not out:
        out.add(min(cap, ext_pad) if cap >= gran else gran)
    return sorted(out)


@dataclass(frozen=True)
class _Cand:
    score: float
    order: tuple[str, ...]
    tiles: tuple[tuple[str, int], ...]


def search_level(nest: ChainNest, capacity: int, bandwidth: float, *, top: int = 1,
                 granularity: Mapping[str, int] | None = None, cap_tiles: Mapping[str, int] | None = None,
                 order_ok: Callable[[tuple[str, ...]], bool] | None = None, cores: int = 1,
                 level: str = "level", compute_s: float = 0.0) -> list[LevelPlan]:
    """The ``top`` best (order, tiles) at one level: minimal DV subject to MU ≤ capacity, exact over dominant tile
    sizes, depth-first with memory-use and lower-bound pruning. Parallel efficiency over ``cores`` breaks ties
    (a plan that leaves cores idle costs proportionally more)."""
    gran = dict(granularity or {})
    caps = dict(cap_tiles or {})
    cands = {d: dominant_tiles(nest.extents[d], gran.get(d, 1), caps.get(d)) for d in nest.loops}
    best: list[tuple[tuple[float, float], int, _Cand]] = []  # max-heap of (time, dv) via negation
    counter = itertools.count()
    base = {d: 1 for d in nest.batch}

    def eff_of(order, tiles) -> float:
        units = nest.parallel_units(order, tiles)
        return units / (math.ceil(units / cores) * cores)

    def bound() -> tuple[float, float]:
        if len(best) >= top:
            t, d = best[0][0]
            return (-t, -d)
        return (math.inf, math.inf)

    for order in nest.orders():
        if order_ok is not None and not order_ok(order):
            continue
        seq = list(order)  # assign tiles outer to inner
        # the parallel units are the trips of the prefix's leading data-parallel dims: once those are assigned
        # (the first ``k_units`` of the order), the parallel efficiency of every tiling below is known, and the
        # bound can count the idle cores (on a 64-core preset most leaves lost to them before this)
        unit_dims = set(itertools.takewhile(lambda d: d not in nest.reductions, nest.prefix(order, base)))
        k_units = max((i + 1 for i, d in enumerate(seq) if d in unit_dims), default=0)

        def dfs(k: int, tiles: dict[str, int], dv: int | None = None, eff: float | None = None):
            if k == len(seq):
                dv = sum(nest.dv(order, tiles).values()) if dv is None else dv
                if eff is None:
                    eff = eff_of(order, tiles) if cores > 1 else 1.0
                # the level's share of the predicted time: compute (slowed by idle cores) or the level's traffic
                s = (max(compute_s / eff, dv / bandwidth), dv)
                if s < bound():
                    c = _Cand(s[0], order, tuple(sorted(tiles.items())))
                    heapq.heappush(best, ((-s[0], -s[1]), next(counter), c))
                    if len(best) > top:
                        heapq.heappop(best)
                return
            d = seq[k]
            rest = seq[k + 1:]
            for T in reversed(cands[d]):  # largest first: best DV first, then prune by bound
                t = dict(tiles)
                t[d] = T
                lo = dict(t)
                for r in rest:
                    lo[r] = cands[r][0]
                if nest.mu(order, lo) > capacity:
                    continue  # too big; smaller T may fit
                hi = dict(t)
                for r in rest:
                    hi[r] = cands[r][-1]
                dv_lb = sum(nest.dv(order, hi).values())
                if (max(compute_s, dv_lb / bandwidth), dv_lb) >= bound():
                    break  # DV only grows as T shrinks; idle cores only add time
                e = eff
                if e is None and cores > 1 and k + 1 >= k_units:
                    e = eff_of(order, t)  # this T completes the parallel dims
                if e is not None and (max(compute_s / e, dv_lb / bandwidth), dv_lb) >= bound():
                    if eff is not None:
                        break  # efficiency fixed above this dim: the bound only grows as T shrinks
                    continue  # this dim sets the efficiency, which a smaller T may raise
                dfs(k + 1, t, dv_lb, e)  # at the last dim ``hi`` is the leaf's tiles: its DV is the leaf's

        dfs(0, dict(base))
    if not best:
        raise InfeasiblePlanError(f"{nest.label}: no tiles fit {level} ({capacity} bytes) even at the smallest sizes")
    out = []
    for negs, _, c in sorted(best, key=lambda x: (-x[0][0], -x[0][1])):
        tiles = nest.full_tiles(dict(c.tiles))
        dvs = nest.dv(c.order, tiles)
        dv = sum(dvs.values())
        out.append(LevelPlan(level, c.order, {d: tiles[d] for d in nest.loops + nest.batch}, dv,
                             nest.mu(c.order, tiles), capacity, dv / bandwidth, dvs,
                             nest.parallel_units(c.order, tiles)))
    return out
