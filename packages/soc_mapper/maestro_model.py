"""MAESTRO's analytical cost model for one layer under one dataflow, in Python.

A port of the cost analysis of ``maestro-project/maestro`` (commit ``MAESTRO_COMMIT``, the C++ tool): the
dataflow (``SpatialMap`` / ``TemporalMap`` / ``Cluster`` directives) is split into cluster levels
(``DFA_cluster-analysis.hpp``: input-centric rewrite of Y'/X', inherited and unrolled directives, the outer stride
folded into the Y/X maps); each level enumerates its iteration cases (``DFA_iteration-analysis.hpp``: init /
steady / edge per directive, with occurrence counts), and for each case the reuse analysis
(``CA_reuse-analysis.hpp``) gives the elements that enter (ingress) and leave (egress) the level's sub-clusters
and the partial sums of the critical path. ``CA_cost-analysis-engine.hpp`` then charges each case
max(ingress / NoC bandwidth, compute, egress / NoC bandwidth) (init cases: ingress + compute), where compute is
the worst sub-cluster's runtime (recursively) or, at the PEs, the partial sums; the top level is also bounded by
the off-chip refill of its (double-buffered) tile. Buffer accesses (L2 = upstream of the top level, L1 =
downstream) are summed over the cases the same way; energy = accesses × MAESTRO's per-access energies (in MAC
energies: L1 1.68, L2 18.61) + MACs.

Everything is integer arithmetic as in the C++ (C division truncates toward zero), so the port reproduces the
tool's cycles and access counts exactly on the dataflows of :func:`dataflow`; the quirks are kept on purpose (e.g.
a temporal edge step uses the full mapped size, the top level's output size ignores the stride): the point is
MAESTRO's numbers, not a cleaner model. ``soc_mapper/data/maestro_reference.json`` holds the tool's own outputs
and ``tests/test_soc_mapper/test_maestro_reference.py`` checks this port against them.

Why a port and not the binary: the mapper evaluates thousands of (layer, accelerator) pairs inside Python and
the project cannot ship or build fetched C++; results are cached per (problem, dataflow, hardware).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

MAESTRO_COMMIT = "4eb08d17c87caf1ee3f3a351b10eb9b8ef70dd87"
"""The ``maestro-project/maestro`` commit this port follows and the reference data came from."""
L1_ENERGY = 1.68
"""MAESTRO's L1 (PE-local buffer) access energy, in MAC energies (``BASE_constants.hpp``)."""
L2_ENERGY = 18.61
"""MAESTRO's L2 (global buffer) access energy, in MAC energies."""
TENSORS = ("input", "filter", "output")
STYLES = ("nvdla", "shidiannao", "eyeriss", "tpu")
"""Dataflow styles with a MAESTRO mapping (:func:`dataflow`)."""
LOWERED_STYLES = ("tpu",)
"""Styles that run every layer as a GEMM (convs lowered by im2col), as a systolic GEMM engine does."""
_INIT, _STEADY, _EDGE = 0, 1, 2


def _cdiv(a: int, b: int) -> int:
    """C++ integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


@dataclass(frozen=True)
class Problem:
    """A layer as MAESTRO sees it: ``CONV`` or ``DSCONV`` with input-side Y/X extents (no padding)."""

    kind: str
    """``CONV`` or ``DSCONV`` (depthwise)."""
    dims: tuple[tuple[str, int], ...]
    """(name, size) in MAESTRO's names: N (batch, only when > 1), K, C, R, S, Y, X."""
    stride: tuple[int, int] = (1, 1)
    """(Y, X) strides."""
    repeat: int = 1
    """Independent copies run one after another (groups of a grouped conv, batches of a batched matmul)."""

    def size(self, name: str) -> int:
        return dict(self.dims)[name]


def problem_of(l, style: str | None = None) -> Problem:
    """The MAESTRO problem of a :class:`soc_mapper.workload.Layer` under ``style``: convs keep their shape (Y =
    (P−1)·stride + R, the padded input rows that give P outputs); depthwise convs become DSCONV; other grouped
    convs run G copies; linear/matmul are 1×1 convs (K = N, C = K, Y = B·M); batched matmuls run B copies of one
    (their second operand changes with the batch, so nothing is reused across it). Under a style of
    :data:`LOWERED_STYLES` a conv is lowered to its im2col GEMM first (M = B·P·Q, N = K, K = C·R·S, G copies).
    Dilation is ignored (MAESTRO has none)."""
    d = l.dims
    if l.op_kind == "conv2d" and style not in LOWERED_STYLES:
        sy, sx = getattr(l, "stride", (1, 1))
        y, x = (d["P"] - 1) * sy + d["R"], (d["Q"] - 1) * sx + d["S"]
        n = (("N", d["B"]),) if d["B"] > 1 else ()
        rsyx = (("R", d["R"]), ("S", d["S"]), ("Y", y), ("X", x))
        if d["G"] > 1 and d["K"] == 1 and d["C"] == 1:
            return Problem("DSCONV", n + (("K", 1), ("C", d["G"])) + rsyx, (sy, sx))
        return Problem("CONV", n + (("K", d["K"]), ("C", d["C"])) + rsyx, (sy, sx), d["G"])
    return _gemm_problem(*_gemm_of(l))


def _gemm_of(l) -> tuple[int, int, int, int]:
    """(copies, M, N, K) of a layer as GEMMs: im2col for convs (per group), B·M rows for linear/matmul."""
    d = l.dims
    if l.op_kind == "conv2d":
        return d["G"], d["B"] * d["P"] * d["Q"], d["K"], d["C"] * d["R"] * d["S"]
    if l.op_kind == "batch_matmul":
        return d["B"], d["M"], d["N"], d["K"]
    return 1, d["B"] * d["M"], d["N"], d["K"]


def _gemm_problem(copies: int, m: int, n: int, k: int) -> Problem:
    """A GEMM as MAESTRO's 1×1 conv: N outputs are the filters (K), the reduction the channels (C), rows Y."""
    return Problem("CONV", (("K", n), ("C", k), ("R", 1), ("S", 1), ("Y", m), ("X", 1)), (1, 1), copies)


def _tensors(kind: str, batch: bool) -> dict[str, tuple[str, ...]]:
    n = ("N",) if batch else ()
    if kind == "DSCONV":
        return {"input": n + ("C", "Y", "X"), "filter": ("C", "R", "S"), "output": n + ("C", "Y", "X")}
    return {"input": n + ("C", "Y", "X"), "filter": ("K", "C", "R", "S"), "output": n + ("K", "Y", "X")}


# --- the dataflow styles (directive tuples: ("T"|"S", size, offset, dim) or ("C", sub-clusters)) ---------------
def dataflow(style: str, p: Problem, rows: int, cols: int, num_pes: int) -> tuple[tuple, ...]:
    """The MAESTRO mapping of ``style`` for ``p`` on a ``rows`` × ``cols`` array of ``num_pes`` PEs.

    - ``nvdla``: MAESTRO's KC-P weight stationary (``kcp_ws``): K across clusters of 64 PEs, C across the PEs of
      a cluster (depthwise: the channels across clusters, one PE each);
    - ``shidiannao``: YX-P output stationary (``yxp_os``): output rows across ``rows`` clusters, a strip of
      ``cols`` output columns across the PEs of each;
    - ``eyeriss``: row stationary (``rs``): a PE set of R PE rows × min(P, cols) output rows (filter row × output
      row per PE), sets replicated over K (depthwise: over the channels);
    - ``tpu``: a weight-stationary systolic array on the GEMM of :func:`problem_of` (M rows Y, N filters K,
      reduction C): each of ``cols`` columns holds one output (K) and ``rows`` reduction elements (C, one per PE:
      partial sums flow down the column), a ``rows``-deep slice of C is loaded per weight tile, and the input
      rows stream through one per step, broadcast along the array's rows. It is MAESTRO's ``kcp_ws`` written for
      the array's geometry (clusters of ``rows`` PEs, not NVDLA's 64).
    Strides enter through the Y/X tiles, which MAESTRO rescales by the layer's stride itself.
    """
    if style not in STYLES:
        raise ValueError(f"no MAESTRO mapping for dataflow {style!r}; have {STYLES}")
    dims = dict(p.dims)
    n = (("T", 1, 1, "N"),) if "N" in dims else ()
    fn = {"nvdla": _nvdla, "shidiannao": _shidiannao, "eyeriss": _eyeriss, "tpu": _tpu}[style]
    return n + fn(p, dims, rows, cols, num_pes)


def _rs(dims: dict) -> tuple[tuple, ...]:
    return ("T", dims["R"], dims["R"], "R"), ("T", dims["S"], dims["S"], "S")


def _kcp(p: Problem, dims: dict, cs: int) -> tuple[tuple, ...]:
    """KC-P weight stationary with clusters of ``cs`` PEs: K across clusters, a ``cs`` slice of C within."""
    r, s = dims["R"], dims["S"]
    outer = (("S", 1, 1, "C"),) if p.kind == "DSCONV" else (("S", 1, 1, "K"), ("T", cs, cs, "C"))
    yx = (("T", r, 1, "Y"), ("T", s, 1, "X"))
    return outer + _rs(dims) + yx + (("C", cs), ("S", 1, 1, "C")) + yx + _rs(dims)


def _nvdla(p: Problem, dims: dict, rows: int, cols: int, num_pes: int) -> tuple[tuple, ...]:
    return _kcp(p, dims, min(64, num_pes))


def _tpu(p: Problem, dims: dict, rows: int, cols: int, num_pes: int) -> tuple[tuple, ...]:
    return _kcp(p, dims, max(1, min(rows, num_pes)))


def _shidiannao(p: Problem, dims: dict, rows: int, cols: int, num_pes: int) -> tuple[tuple, ...]:
    cols = max(1, min(cols, num_pes))
    r, s = dims["R"], dims["S"]
    sx = p.stride[1]
    kc = (("T", 1, 1, "C"),) if p.kind == "DSCONV" else (("T", 1, 1, "K"), ("T", 1, 1, "C"))
    top = (("S", r, 1, "Y"), ("T", (cols - 1) * sx + s, cols * sx, "X"))
    return kc + top + _rs(dims) + (("C", cols), ("S", s, 1, "X")) + _rs(dims)


def _eyeriss(p: Problem, dims: dict, rows: int, cols: int, num_pes: int) -> tuple[tuple, ...]:
    r, s = dims["R"], dims["S"]
    sy = p.stride[0]
    out_rows = (dims["Y"] - r) // sy + 1
    pc = max(1, min(out_rows, cols, num_pes // r))
    kc = (("S", 1, 1, "C"),) if p.kind == "DSCONV" else (("S", 1, 1, "K"), ("T", 1, 1, "C"))
    top = (("T", (pc - 1) * sy + r, pc * sy, "Y"), ("T", s, 1, "X"))
    mid = (("S", r, 1, "Y"), ("T", s, 1, "X"))
    inner = (("S", 1, 1, "Y"), ("S", 1, 1, "R"), ("T", s, s, "S"))
    return kc + top + _rs(dims) + (("C", pc),) + mid + _rs(dims) + (("C", r),) + inner


def mapping_text(p: Problem, flow: tuple[tuple, ...], name: str = "L") -> str:
    """A MAESTRO mapping file (``.m``) of one layer: what the reference generator feeds the tool."""
    lines = [f"Network {name} {{", f"Layer {name} {{", f"Type: {p.kind}",
             f"Stride {{ X: {p.stride[1]}, Y: {p.stride[0]} }}",
             "Dimensions { " + ", ".join(f"{k}: {v}" for k, v in p.dims) + " }", "Dataflow {"]
    for d in flow:
        if d[0] == "C":
            lines.append(f"Cluster({d[1]}, P);")
        else:
            lines.append(f"{'SpatialMap' if d[0] == 'S' else 'TemporalMap'}({d[1]},{d[2]}) {d[3]};")
    return "\n".join(lines + ["}", "}", "}", ""])


# --- cluster analysis (DFA_cluster-analysis.hpp, DFA_cluster-unit.hpp) ------------------------------------------
class _D:
    """One map directive (mutable: the cluster analysis rewrites sizes, offsets and names as MAESTRO does)."""

    __slots__ = ("sp", "size", "ofs", "var")

    def __init__(self, sp: bool, size: int, ofs: int, var: str):
        self.sp, self.size, self.ofs, self.var = sp, size, ofs, var


class _Dims:
    """A dimension table: sizes, outer strides and the (reference, sliding) overlap pairs (Y/R, X/S)."""

    __slots__ = ("size", "outer", "overlap")

    def __init__(self, size: dict, outer: dict, overlap: tuple):
        self.size, self.outer, self.overlap = size, outer, overlap

    def overlapped(self, v: str) -> bool:
        return any(v in pair for pair in self.overlap)

    def sliding(self, v: str) -> bool:
        return any(v == s for _, s in self.overlap)

    def counterpart(self, v: str) -> str:
        ret = ""
        for ref, s in self.overlap:
            ret = ref if v == s else s if v == ref else ret
        return ret

    def is_ref(self, v: str) -> bool:
        return self.overlapped(v) and not self.sliding(v)


def _find(flow: list, var: str):
    return next((d for d in flow if d.var == var), None)


def _top_dims(p: Problem) -> _Dims:
    """``ConstructConvDimensionTable``: the given dims (Y/X carry the stride) plus Y' = Y−R+1, X' = X−S+1."""
    size = dict(p.dims)
    outer = {k: (p.stride[0] if k == "Y" else p.stride[1] if k == "X" else 1) for k in size}
    size["Y'"], outer["Y'"] = size["Y"] - size["R"] + 1, p.stride[0]
    size["X'"], outer["X'"] = size["X"] - size["S"] + 1, p.stride[1]
    return _Dims(size, outer, (("X", "S"), ("Y", "R")))


def _input_centric(flow: list) -> None:
    by = {d.var: d for d in flow}
    for out, inp, k in (("X'", "X", "S"), ("Y'", "Y", "R")):
        if inp not in by and out in by:
            if k not in by:
                raise ValueError(f"a cluster mapping {out} needs a {k} directive")
            by[out].var, by[out].size = inp, by[out].size + by[k].size - 1


def _inherit(prev: list | None, flow: list) -> None:
    for up in prev or ():
        if _find(flow, up.var) is None:
            flow.insert(0, _D(False, up.size, up.ofs, up.var))


def _unroll(in_vars: list, dims: _Dims, flow: list) -> None:
    for v in in_vars:
        if _find(flow, v) is None and v in dims.size:
            flow.append(_D(False, dims.size[v], dims.size[v], v))


def _outer_stride(top: bool, flow: list, dims: _Dims, full: _Dims) -> None:
    for d in flow:
        st = dims.outer[d.var]
        if not (dims.is_ref(d.var) and st != 1):
            continue
        sds = full.size[dims.counterpart(d.var)]
        if d.size >= sds:
            oms = (d.size + st - sds) // st
            d.size = oms * min(st, sds) + max(sds - st, 0)
            d.ofs = oms * sds if (not top and sds < st) else oms * st


def _lower_dims(in_vars: list, prev: _Dims, flow: list) -> _Dims:
    size = {v: min(_find(flow, v).size, prev.size[v]) for v in in_vars}
    return _Dims(size, {v: prev.outer[v] for v in in_vars}, prev.overlap)


class _Cluster:
    """One cluster level: its dataflow, static dimensions, sub-cluster count and reuse tables."""

    __slots__ = ("level", "n", "flow", "dims", "n_edge", "mapped", "unique", "mapped_e", "unique_e")

    def __init__(self, level: int, n: int, flow: list, dims: _Dims):
        self.level, self.n, self.flow, self.dims = level, n, flow, dims
        self.n_edge = _edge_clusters(self)
        self.mapped, self.unique, self.mapped_e, self.unique_e = _mapping_sizes(flow, dims)


def _edge_clusters(c: _Cluster) -> int:
    """``ClusterUnit::AnalyzeSpatialEdgeCase``: sub-clusters active in the last spatial step (first spatial map)."""
    sp = next(d for d in c.flow if d.sp)
    dim, size, ofs, n = c.dims.size[sp.var], sp.size, sp.ofs, c.n
    if dim <= size:
        return 1
    if dim > ofs * (n - 1) + size:
        steady = _cdiv(_cdiv(dim - size, ofs) + 1, n) - 1
        rem = dim - (steady + 1) * ofs * n
        return 1 if rem < size else _cdiv(rem - size, ofs) + 1
    e = _cdiv(dim - size, ofs) + 1
    return e + 1 if ofs * (e - 1) + size < dim else e


def _mapping_sizes(flow: list, dims: _Dims) -> tuple[dict, dict, dict, dict]:
    """``ReuseAnalysis::Analyze{Input,Output}MappingSizes``: mapped / unique elements per dim, steady and edge."""
    mapped, unique, mapped_e, unique_e = {}, {}, {}, {}
    for d in flow:
        v, size, ofs, dim = d.var, d.size, d.ofs, dims.size[d.var]
        steady = max(_cdiv(dim - size, ofs), 0)
        has_edge = steady * ofs + size < dim or size > dim
        mapped[v], unique[v] = size, min(size, ofs)
        if not d.sp and dim <= size:
            unique[v] = 0
        edge = dim - (steady + 1) * ofs
        edge = dim if edge < 0 else edge
        mapped_e[v] = edge if has_edge else size
        unique_e[v] = max(ofs - (size - edge), 0)
    for d in flow:
        if dims.is_ref(d.var):
            sl, out = dims.counterpart(d.var), ("Y'" if d.var == "Y" else "X'")
            mapped[out] = mapped[d.var] - mapped.get(sl, 0) + 1
            unique[out] = min(d.ofs, d.size)
            mapped_e[out] = mapped_e[d.var] - mapped_e.get(sl, 0) + 1
            unique_e[out] = min(d.ofs, mapped_e[out])
    return mapped, unique, mapped_e, unique_e


def _clusters(p: Problem, spec: tuple[tuple, ...], num_pes: int, tensors: dict) -> list[_Cluster]:
    """``ClusterAnalysis::AnalyzeClusters``: the levels, top (index 0) to the PEs."""
    sizes = [d[1] for d in spec if d[0] == "C"]
    upper = math.prod(sizes)
    spec = tuple(spec) + (("C", sizes[-1] if sizes else num_pes),)
    units = upper * (num_pes // upper)
    if units < 1:
        raise ValueError(f"the mapping needs {upper} PEs per top-level cluster, the array has {num_pes}")
    in_vars = sorted({v for t in ("input", "filter") for v in tensors[t]})
    full = dims = _top_dims(p)
    out, flow, prev, last, level = [], [], None, units, len(sizes)
    for d in spec:
        if d[0] != "C":
            flow.append(_D(d[0] == "S", d[1], d[2], d[3]))
            continue
        _input_centric(flow)
        _inherit(prev, flow)
        _unroll(in_vars, dims, flow)
        top = level == len(sizes)
        _outer_stride(top, flow, dims, full)
        out.append(_Cluster(level, units // upper if top else last, flow, dims))
        last, dims, prev, flow, level = d[1], _lower_dims(in_vars, dims, flow), flow, [], level - 1
    return out


# --- iteration cases (DFA_iteration-analysis.hpp) -------------------------------------------------------------------
class _St:
    """The state of one directive in an iteration case."""

    __slots__ = ("pos", "n", "unrolled", "edge", "ee")

    def __init__(self, pos: int, n: int, unrolled: bool, init_edge: bool = False, ee: bool = False):
        self.pos, self.n, self.unrolled, self.ee = pos, n, unrolled, ee
        self.edge = pos == _EDGE or init_edge  # IterationState::IsEdge


def _temporal_states(dim: int, size: int, ofs: int) -> list[_St]:
    init_edge = dim < size
    out = [_St(_INIT, 1, dim <= size, init_edge)]
    steady = _cdiv(dim - size, ofs)
    if size < dim and steady > 0:
        out.append(_St(_STEADY, steady, False))
    if not init_edge and steady * ofs + size < dim:
        out.append(_St(_EDGE, 1, False))
    return out


def _spatial_states(dim: int, size: int, ofs: int, n: int) -> list[_St]:
    cov = size + ofs * (n - 1)
    unroll, init_edge = dim <= cov, dim < cov
    out = [_St(_INIT, 1, unroll, init_edge, init_edge)]
    steady = _cdiv(_cdiv(dim - size, ofs) + 1, n) - 1
    has_edge = not unroll and ((steady + 1) * ofs * n + cov > dim) and (steady * ofs * n + cov != dim)
    if cov < dim and steady > 0:
        out.append(_St(_STEADY, steady, False))
    rem = dim - (steady + 1) * ofs * n
    active = 1 if rem < size else _cdiv(rem - size, ofs) + 1
    if not init_edge and has_edge:
        out.append(_St(_EDGE, 1, False, False, (active - 1) * ofs + size < rem))
    return out


def _cases(c: _Cluster, dims: dict) -> list[tuple[int, dict]]:
    """``IterationAnalysis``: (occurrences, {dim: state}) of every case, in MAESTRO's order."""
    per = [(d.var, _spatial_states(dims[d.var], d.size, d.ofs, c.n) if d.sp
            else _temporal_states(dims[d.var], d.size, d.ofs)) for d in c.flow]
    freq, acc = [], 1
    for _, states in reversed(per):
        freq.append(acc)
        acc *= len(states)
    freq.reverse()
    counters = [0] * len(per)
    out = []
    for case in range(acc):
        occ, st = 1, {}
        for i, (v, states) in enumerate(per):
            s = states[counters[i]]
            st[v] = s
            occ *= s.n
            if case % freq[i] == 0:
                counters[i] = (counters[i] + 1) % len(states)
        out.append((occ, st))
    return out


# --- reuse analysis (CA_reuse-analysis.hpp) -------------------------------------------------------------------------
def _pe_mapped(c: _Cluster, tv: tuple, st: dict, first: bool = True, ee: bool = False) -> int:
    """``GetPEMappedVolume``: the tensor's elements mapped on one sub-cluster."""
    ret = 1
    for d in c.flow:
        v = d.var
        if v not in tv:
            continue
        s = st[v]
        if not d.sp:
            ret *= c.mapped_e[v] if s.edge else c.mapped[v]
        elif not s.edge:
            ret *= c.mapped[v]
        elif c.n_edge == 1:
            ret *= c.mapped_e[v] if (first or ee) else 1
        else:
            ret *= c.mapped_e[v] if ee else c.mapped[v]
    return ret


def _changing(c: _Cluster, st: dict) -> int:
    """``GetInnermostUpdatedDimDirectiveID``: the innermost directive not at its init position (−1: none)."""
    idx = -1
    for i, d in enumerate(c.flow):
        if st[d.var].pos != _INIT:
            idx = i
    return idx


def _inited(c: _Cluster, tv: tuple, st: dict, changing: int) -> bool:
    """``IsTensorInited``: a coupled, not unrolled directive inside the changing one is at its init position."""
    return any(i > changing and d.var in tv and st[d.var].pos == _INIT and not st[d.var].unrolled
               for i, d in enumerate(c.flow))


def _pe_ingress(c: _Cluster, tv: tuple, st: dict, first: bool = True, ee: bool = False) -> int:
    """``GetPEIngressVolume``: new elements one sub-cluster receives in this case (0 if the tensor is unchanged)."""
    ch = _changing(c, st)
    if ch == -1:
        return _pe_mapped(c, tv, st, first, ee)
    inited = _inited(c, tv, st, ch)
    ret, changes = 1, False
    for i, d in enumerate(c.flow):
        v = d.var
        if v not in tv:
            continue
        s, is_ch = st[v], i == ch
        changes = changes or is_ch
        if not d.sp:
            if s.pos == _INIT:
                ret *= c.mapped_e[v] if s.edge else c.mapped[v]
            elif is_ch and not inited:
                ret *= max(c.unique[v], 1)
            else:
                ret *= c.mapped[v]
            continue
        mapped = c.mapped_e[v] if ee else c.mapped[v]
        uniq = c.unique_e[v] if ee else c.unique[v]
        if first:
            ret *= mapped
        elif s.pos == _INIT:
            ret *= mapped if i <= ch else uniq
        else:
            ret *= uniq if (not inited and is_ch) else mapped
    return ret if changes else 0


def _sp_state(c: _Cluster, tv: tuple, st: dict):
    """(spatially mapped?, the last coupled spatial dim's state, any of them at an edge?)."""
    mapped, state, edge = False, None, False
    for v in tv:
        d = _find(c.flow, v)
        if d.sp:
            mapped, state = True, st[v]
            edge = edge or state.edge
    return mapped, state, edge


def _spread(c: _Cluster, fn, state, edge: bool) -> int:
    """Sum a per-sub-cluster volume ``fn(first, ee)`` over the active sub-clusters, MAESTRO's way."""
    if not edge:
        return fn(True, False) + (c.n - 1) * fn(False, False)
    hee = state.ee
    ret = fn(True, True) if (c.n_edge == 1 and hee) else fn(True, False)
    if c.n_edge > 1:
        nee = 1 if hee else 0
        ret += max(c.n_edge - nee - 1, 0) * fn(False, False) + nee * fn(False, True)
    return ret


def _ingress(c: _Cluster, tv: tuple, st: dict) -> int:
    """``GetSpatialIngressTraffic``: elements of an input tensor sent to the sub-clusters in one case."""
    mapped, state, edge = _sp_state(c, tv, st)
    if not mapped:
        return _pe_ingress(c, tv, st)
    return _spread(c, lambda f, e: _pe_ingress(c, tv, st, f, e), state, edge)


def _psum_factor(c: _Cluster, tv: tuple, st: dict, first: bool, ee: bool) -> int:
    """The reduction directives' share of ``GetPEEgressVolume(get_num_partial_sums=true)``."""
    ret = 1
    for d in c.flow:
        v = d.var
        if v in tv:
            continue
        s = st[v]
        if not d.sp:
            ret *= c.mapped_e[v] if s.edge else c.mapped[v]
        elif s.pos == _INIT and s.edge and ee:
            ret *= c.mapped_e[v]
        elif s.pos in (_INIT, _STEADY):
            ret *= c.mapped[v] if first else (c.unique[v] or 1)
        elif c.n_edge == 1:
            ret *= c.mapped_e[v] if (first or ee) else 1
        else:
            ret *= c.unique_e[v] if ee else c.mapped[v] if first else (c.unique[v] or 1)
    return ret


def _out_factor(c: _Cluster, d: _D, s: _St, first: bool, ee: bool, reuse_edge: bool) -> int:
    """One output dimension's share of ``GetPEEgressVolume``."""
    v = d.var
    a = "Y'" if v == "Y" else "X'" if v == "X" else v
    m, u, me, ue = c.mapped.get(a, 0), c.unique.get(a, 0), c.mapped_e.get(a, 0), c.unique_e.get(a, 0)
    if not d.sp:
        return me if (s.pos == _EDGE or (s.pos == _INIT and s.edge)) else m
    if s.pos == _INIT and s.edge and ee:
        return me if c.n_edge == 1 else (ue if reuse_edge else me)
    if s.pos in (_INIT, _STEADY):
        return m if first else (u or 1)
    if c.n_edge == 1:
        return c.mapped_e.get(v, 0) if (first or ee) else 1  # MAESTRO reads the input-side name here
    return ue if ee else m if first else (u or 1)


def _pe_egress(c: _Cluster, tv: tuple, st: dict, psums: bool = False, first: bool = True, ee: bool = False,
               reuse_edge: bool = True) -> int:
    """``GetPEEgressVolume``: outputs (or, with ``psums``, partial sums) of one sub-cluster in one case."""
    ret = _psum_factor(c, tv, st, first, ee) if psums else 1
    for v in tv:
        ret *= _out_factor(c, _find(c.flow, v), st[v], first, ee, reuse_edge)
    return ret


def _egress(c: _Cluster, tv: tuple, st: dict) -> int:
    """``GetSpatialEgressTraffic``: outputs leaving the sub-clusters in one case."""
    mapped, state, edge = _sp_state(c, tv, st)
    if not mapped:
        return _pe_egress(c, tv, st)
    return _spread(c, lambda f, e: _pe_egress(c, tv, st, False, f, e), state, edge)


def _critical_psums(c: _Cluster, tv: tuple, st: dict) -> int:
    """``GetNumCriticalPathPartialSums``: partial sums of the first (busiest) sub-cluster."""
    mapped, state, edge = _sp_state(c, tv, st)
    ee = mapped and edge and c.n_edge == 1 and state.ee
    return _pe_egress(c, tv, st, True, True, ee)


def _psum_mapping(c: _Cluster, tv: tuple, st: dict) -> int:
    """``GetOutputTensorSpatialMappingSize(for_partial_sum=true)``: the MACs of one case over all sub-clusters."""
    mapped, state, edge = _sp_state(c, tv, st)
    for d in c.flow:
        if d.sp:
            mapped, state, edge = True, st[d.var], edge or st[d.var].edge
    if not mapped or not edge:
        return c.n * _pe_egress(c, tv, st, True)
    hee = state.ee
    ret = _pe_egress(c, tv, st, True, True, c.n_edge == 1 and hee)
    if c.n_edge > 1:
        nee = 1 if hee else 0
        ret += max(c.n_edge - nee - 1, 0) * _pe_egress(c, tv, st, True)
        ret += nee * _pe_egress(c, tv, st, True, False, True, False)
    return ret


# --- cost analysis (CA_cost-analysis-engine.hpp) --------------------------------------------------------------------
class _Counts:
    """Buffer size requirements and access counts of one cluster level, per tensor."""

    def __init__(self):
        z = dict.fromkeys(TENSORS, 0)
        self.up_size, self.down_size = dict(z), dict(z)
        self.up_rd, self.up_wr, self.down_rd, self.down_wr = dict(z), dict(z), dict(z), dict(z)
        self.runtime = self.macs = 0


class _Ctx:
    """One analysis: clusters, tensors, bandwidths and the memo of sub-cluster runtimes."""

    def __init__(self, clusters: list, tensors: dict, noc_bw: int, offchip_bw: int, pinned: bool):
        self.clusters, self.tensors, self.noc, self.offchip = clusters, tensors, noc_bw, offchip_bw
        self.pinned, self.memo = pinned, {}


def _noc_delay(data: int, bw: int) -> int:
    """``NetworkOnChipModel::GetOutStandingDelay`` with one hop of latency 1 (the HW file's defaults)."""
    return -(-data // bw)


def _buffer_req(ctx: _Ctx, res: _Counts, c: _Cluster, dims: dict, st: dict) -> None:
    """``UpdateBufferSizeReq`` (run on the first valid case): tile sizes; L2 fills and output reads."""
    for t in ("input", "filter"):
        tv = ctx.tensors[t]
        res.up_size[t] += 2 * _ingress(c, tv, st)
        res.up_wr[t] = math.prod(dims[v] for v in tv)
        res.down_size[t] += 2 * math.prod(c.mapped[v] for v in tv if v in c.mapped)
    tv = ctx.tensors["output"]
    res.up_size["output"] = 2 * _egress(c, tv, st)
    res.up_rd["output"] = math.prod(dims[v] - dims[c.dims.counterpart(v)] + 1 if c.dims.overlapped(v)
                                    else dims[v] for v in tv)
    res.down_size["output"] = 2 * math.prod(c.mapped[v] for v in tv if v in c.mapped)


def _sub_dims(c: _Cluster, st: dict, ee: bool) -> dict:
    """``ConstructSubClusterDimension``: the tile one sub-cluster works on in this case."""
    out = {}
    for d in c.flow:
        v, s = d.var, st[d.var]
        if not d.sp:
            out[v] = c.mapped_e[v] if s.edge else c.mapped[v]
        elif s.pos == _STEADY or (s.pos == _INIT and not s.edge):
            out[v] = c.mapped[v]
        else:
            out[v] = c.mapped_e[v] if (c.n_edge == 1 or ee) else c.mapped[v]
    for d in c.flow:
        if d.var in ("Y", "X"):
            k = "R" if d.var == "Y" else "S"
            out.setdefault(d.var + "'", out[d.var] - out[k] + 1)
    return out


def _compute_delay(ctx: _Ctx, idx: int, c: _Cluster, st: dict, psums: int) -> int:
    """The case's compute: the slowest sub-cluster (recursively), or the partial sums at the PEs."""
    if idx == len(ctx.clusters) - 1:
        return psums  # one SIMD lane
    s = st[next(d for d in c.flow if d.sp).var]
    subs = []
    if s.edge and s.ee:
        subs.append(_sub_dims(c, st, True))
        if c.n_edge - 1 > 0:
            subs.append(_sub_dims(c, st, False))
    else:
        subs.append(_sub_dims(c, st, False))
    return max(_level(ctx, idx + 1, d).runtime for d in subs)


def _case_traffic(ctx: _Ctx, res: _Counts, c: _Cluster, occ: int, st: dict) -> tuple[int, int, int, int]:
    """Charge one case's accesses; (ingress, egress, MACs over the sub-clusters, critical-path partial sums)."""
    tv = ctx.tensors["output"]
    egress, macs, psums = _egress(c, tv, st), _psum_mapping(c, tv, st), _critical_psums(c, tv, st)
    res.up_wr["output"] += occ * egress
    res.down_wr["output"] += occ * macs
    res.down_rd["output"] += occ * macs
    if psums <= 0:
        return 0, egress, macs, psums
    ingress = 0
    for t in ("input", "filter"):
        x = _ingress(c, ctx.tensors[t], st)
        ingress += x
        res.up_rd[t] += occ * x
        res.down_wr[t] = res.up_rd[t]  # MAESTRO writes L1 with the L2 read count
        res.down_rd[t] += occ * macs
    return ingress, egress, macs, psums


def _offchip(ctx: _Ctx, res: _Counts, delay: int) -> int:
    """The top level waits for half its double-buffered tile from off chip (pinned weights: inputs only)."""
    w = 0 if ctx.pinned else res.up_size["filter"]
    into = (res.up_size["input"] + w) // ctx.offchip // 2
    return max(into, delay, res.up_size["output"] // ctx.offchip // 2)


def _level(ctx: _Ctx, idx: int, dims: dict) -> _Counts:
    """``AnalyzeClusterLevel_V2`` of cluster ``idx`` on the tile ``dims`` (memoised: tiles repeat)."""
    key = (idx, tuple(sorted(dims.items())))
    if key in ctx.memo:
        return ctx.memo[key]
    c, res, first = ctx.clusters[idx], _Counts(), True
    for occ, st in _cases(c, dims):
        if first:
            _buffer_req(ctx, res, c, dims, st)
        ingress, egress, macs, psums = _case_traffic(ctx, res, c, occ, st)
        if psums <= 0:
            continue  # MAESTRO skips such cases after charging their outputs
        first = False
        comp = _compute_delay(ctx, idx, c, st, psums)
        i_d, e_d = _noc_delay(ingress, ctx.noc), _noc_delay(egress, ctx.noc)
        if all(s.pos == _INIT for s in st.values()):
            delay = comp + i_d
        else:
            delay = max(e_d, comp, i_d)
        if idx == 0:
            delay = _offchip(ctx, res, delay)
        res.runtime += occ * delay
        res.macs += occ * macs
    ctx.memo[key] = res
    return res


@dataclass(frozen=True)
class MaestroCost:
    """MAESTRO's figures for one layer: cycles, MACs and buffer accesses per tensor (input, filter, output)."""

    cycles: int
    macs: int
    l2_read: tuple[int, int, int]
    l2_write: tuple[int, int, int]
    l1_read: tuple[int, int, int]
    l1_write: tuple[int, int, int]

    @property
    def l1_accesses(self) -> int:
        return sum(self.l1_read) + sum(self.l1_write)

    @property
    def l2_accesses(self) -> int:
        return sum(self.l2_read) + sum(self.l2_write)

    def energy(self, mac: float = 1.0, l1: float = L1_ENERGY, l2: float = L2_ENERGY) -> float:
        """MACs × ``mac`` + L1 accesses × ``l1`` + L2 accesses × ``l2`` (defaults: MAESTRO's, in MAC energies)."""
        return self.macs * mac + self.l1_accesses * l1 + self.l2_accesses * l2


def analyze(p: Problem, flow: tuple[tuple, ...], num_pes: int, noc_bw: int, offchip_bw: int,
            pinned: bool = False) -> MaestroCost:
    """MAESTRO's cost of ``p`` under the mapping ``flow`` (NoC and off-chip bandwidth in elements per cycle);
    ``pinned``: the weights are already in L2 (no off-chip refill of the filter tile)."""
    tensors = _tensors(p.kind, any(k == "N" for k, _ in p.dims))
    clusters = _clusters(p, flow, num_pes, tensors)
    ctx = _Ctx(clusters, tensors, max(1, int(noc_bw)), max(1, int(offchip_bw)), pinned)
    r = _level(ctx, 0, dict(clusters[0].dims.size))
    t = TENSORS
    k = p.repeat
    return MaestroCost(k * r.runtime, k * r.macs, tuple(k * r.up_rd[x] for x in t), tuple(k * r.up_wr[x] for x in t),
                       tuple(k * r.down_rd[x] for x in t), tuple(k * r.down_wr[x] for x in t))


@lru_cache(maxsize=65536)
def style_cost(p: Problem, style: str, rows: int, cols: int, num_pes: int, noc_bw: int, offchip_bw: int,
               pinned: bool = False) -> MaestroCost:
    """:func:`analyze` with the mapping of ``style`` (cached: copies of a model repeat the same shapes)."""
    return analyze(p, dataflow(style, p, rows, cols, num_pes), num_pes, noc_bw, offchip_bw, pinned)


def hw_of(a) -> dict:
    """MAESTRO's hardware parameters of a :class:`soc_mapper.soc.Accelerator`: PEs and array shape; the NoC
    (L2 → PEs) and off-chip (→ L2) bandwidths, both the global buffer's read bandwidth in int8 elements per cycle
    (the presets describe no DRAM and no NoC of their own: the buffer's bandwidth, equal to their intra-accelerator
    bandwidth, is the only one inside an accelerator; see :mod:`soc_mapper.cost`); L1 (one PE's buffer) and L2
    sizes in bytes (MAESTRO only warns when a tile exceeds them)."""
    bw = max(1, round(a.buffer_bandwidth_bytes_per_s / a.frequency_hz))
    return {"num_pes": a.num_pes, "rows": a.pe_rows, "cols": a.pe_cols, "noc_bw": bw, "offchip_bw": bw,
            "l1_size": a.l1_bytes, "l2_size": a.buffer_bytes}
