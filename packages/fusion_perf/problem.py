"""Problems: a small DAG of :mod:`shared_ir` ops sharing one namespace of dimension names.

Two ops of a fused chain name the same loop the same way (GEMM1 ``C[m,l] = A[m,k]·B[k,l]`` and GEMM2
``E[m,n] = C[m,l]·D[l,n]`` share ``m`` and ``l``); a shared dimension has one extent. Index expressions are the
shared IR's affine expressions, so conv halos (``p + r``) and strides are supported; data-dependent (gather)
indices are not.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from shared_ir import Access, AffineExpr, Dim, Op, OpKind, Tensor, TensorRole
from shared_ir.affine import IndirectIndex

from .errors import ProblemError

A = AffineExpr.dim


@dataclass(frozen=True)
class TensorAccess:
    """One tensor as an op indexes it: per tensor dimension, ``{problem dim: coefficient}`` (plus a constant)."""

    name: str
    terms: tuple[tuple[tuple[str, int], ...], ...]
    """For each tensor dimension, the (dim, coefficient) pairs of its affine index."""

    @property
    def dims(self) -> frozenset[str]:
        return frozenset(d for t in self.terms for d, _ in t)

    def coeff(self, k: int, d: str) -> int:
        for dd, c in self.terms[k]:
            if dd == d:
                return c
        return 0

    @property
    def separable(self) -> bool:
        """Each problem dim appears in at most one tensor dim."""
        seen: set[str] = set()
        for t in self.terms:
            ds = {d for d, _ in t}
            if ds & seen:
                return False
            seen |= ds
        return True


def _access(a: Access, where: str) -> TensorAccess:
    if a.flat:
        raise ProblemError(where, "flat (reshape) accesses are not supported by fusion_perf")
    terms = []
    for i, e in enumerate(a.indices):
        if isinstance(e, IndirectIndex):
            raise ProblemError(f"{where}[{i}]", "data-dependent (gather) indices are not supported by fusion_perf")
        terms.append(tuple(e.terms))
    return TensorAccess(a.tensor.name, tuple(terms))


@dataclass
class Problem:
    """A set of ops (shared_ir :class:`Op`) over shared dimension names.

    ``inputs``/``outputs`` are the problem's io tensors (default: tensors no op produces / no op consumes);
    every other tensor is an intermediate that a fused mapping may keep on chip.
    """

    ops: list[Op]
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    name: str = "problem"
    source: str = "problem"
    """Where the problem came from (file name), used in error messages."""
    dims: dict[str, int] = field(init=False)
    producer: dict[str, str] = field(init=False)
    consumers: dict[str, list[str]] = field(init=False)
    access: dict[tuple[str, str], TensorAccess] = field(init=False)
    tensors: dict[str, Tensor] = field(init=False)

    def __post_init__(self):
        src = self.source
        if not self.ops:
            raise ProblemError(f"{src}: ops", "a problem needs at least one op")
        names = [o.name for o in self.ops]
        if len(set(names)) != len(names):
            raise ProblemError(f"{src}: ops", f"duplicate op names {names}")
        self.dims, self.producer, self.consumers, self.access, self.tensors = {}, {}, {}, {}, {}
        for o in self.ops:
            for d in o.dims:
                if self.dims.setdefault(d.name, d.extent) != d.extent:
                    raise ProblemError(f"{src}: ops.{o.name}.dims.{d.name}",
                                       f"extent {d.extent} disagrees with {self.dims[d.name]} in another op "
                                       "(shared dimension names must have one extent)")
            if len(o.outputs) != 1:
                raise ProblemError(f"{src}: ops.{o.name}.outputs", "each op must write exactly one tensor")
            for a in o.accesses:
                self.access[(o.name, a.tensor.name)] = _access(a, f"{src}: ops.{o.name}.{a.tensor.name}")
                self.tensors.setdefault(a.tensor.name, a.tensor)
            out = o.outputs[0].tensor.name
            if out in self.producer:
                raise ProblemError(f"{src}: ops.{o.name}.out", f"tensor {out!r} is produced by both "
                                   f"{self.producer[out]!r} and {o.name!r}")
            self.producer[out] = o.name
            for a in o.inputs:
                if a.tensor.name == out:
                    raise ProblemError(f"{src}: ops.{o.name}.ins", f"op reads its own output {out!r} (a cycle)")
                self.consumers.setdefault(a.tensor.name, []).append(o.name)
        self._check_acyclic()
        # the same tensor must be indexed the same way by every op that touches it, except an intermediate, whose
        # consumer may read a window of it (a conv chain's halo: O1[k, p + r, q + s]); the model keeps each op's
        # own index map for its slots and sizes the intermediate's shared home by the widest one
        seen: dict[str, TensorAccess] = {}
        for (op, t), acc in self.access.items():
            if t in seen and seen[t].terms != acc.terms:
                inter = t in self.producer and t in self.consumers
                if not inter or len(seen[t].terms) != len(acc.terms):
                    raise ProblemError(f"{src}: ops.{op}.{t}", f"tensor {t!r} is indexed differently by two ops")
            seen.setdefault(t, acc)
        if not self.inputs:
            self.inputs = tuple(t for t in self.tensors if t not in self.producer)
        if not self.outputs:
            self.outputs = tuple(t for t in self.producer if t not in self.consumers)
        for t in self.inputs + self.outputs:
            if t not in self.tensors:
                raise ProblemError(f"{src}: io", f"unknown tensor {t!r}; tensors are {sorted(self.tensors)}")
        for t in self.inputs:
            if t in self.producer:
                raise ProblemError(f"{src}: io.ins", f"{t!r} is listed as an input but op {self.producer[t]!r} "
                                   "produces it")
        for t in self.tensors:
            if t not in self.producer and t not in self.inputs:
                raise ProblemError(f"{src}: io.ins", f"tensor {t!r} is read but neither produced nor an input")

    def _check_acyclic(self):
        import networkx as nx

        g = nx.DiGraph()
        g.add_nodes_from(o.name for o in self.ops)
        for t, p in self.producer.items():
            for c in self.consumers.get(t, []):
                g.add_edge(p, c, tensor=t)
        try:
            cyc = nx.find_cycle(g)
        except nx.NetworkXNoCycle:
            return
        path = " -> ".join(f"{a}[{g.edges[a, b]['tensor']}]" for a, b in cyc) + f" -> {cyc[0][0]}"
        raise ProblemError(f"{self.source}: ops", f"the problem has a cycle: {path}")

    # --- queries ---------------------------------------------------------------------------------------------
    def op(self, name: str) -> Op:
        for o in self.ops:
            if o.name == name:
                return o
        raise KeyError(name)

    @property
    def op_names(self) -> list[str]:
        return [o.name for o in self.ops]

    def op_dims(self, name: str) -> tuple[str, ...]:
        return tuple(d.name for d in self.op(name).dims)

    def intermediates(self) -> tuple[str, ...]:
        return tuple(t for t in self.producer if t in self.consumers and t not in self.outputs)

    def tensor_access(self, t: str) -> TensorAccess:
        for (o, tt), a in self.access.items():
            if tt == t:
                return a
        raise KeyError(t)

    @property
    def macs(self) -> int:
        return sum(o.points for o in self.ops if o.kind.is_mac)

    @property
    def points(self) -> int:
        return sum(o.points for o in self.ops)

    def signature(self) -> tuple:
        return (tuple(o.to_dict().__repr__() for o in self.ops), self.inputs, self.outputs)


# --- builders -----------------------------------------------------------------------------------------------
def _t(name: str, shape: Sequence[int], role: TensorRole = TensorRole.activation) -> Tensor:
    return Tensor(name, tuple(shape), "float16", role)


def _einsum(name: str, kind: OpKind, dims: Mapping[str, int], reduction: Iterable[str],
            ins: Sequence[tuple[Tensor, Sequence[AffineExpr]]], out: tuple[Tensor, Sequence[AffineExpr]],
            flops_per_point: int = 1, attrs: Mapping | None = None) -> Op:
    red = set(reduction)
    return Op(name, kind, tuple(Dim(d, e, d in red) for d, e in dims.items()),
              tuple(Access(t, tuple(ix)) for t, ix in ins), (Access(out[0], tuple(out[1])),),
              dict(attrs or {}), flops_per_point)


def gemm_chain(M: int, K: int, L: int, N: int, batch: int = 1, name: str = "gemm_chain") -> Problem:
    """C[b,m,l] = Σ_k A[b,m,k]·B[b,k,l]; E[b,m,n] = Σ_l C[b,m,l]·D[b,l,n] (the Chimera/TileFlow 2-GEMM chain).
    ``batch == 1`` drops the batch dim."""
    bd = {"b": batch} if batch > 1 else {}
    bi = [A("b")] if batch > 1 else []
    bs = [batch] if batch > 1 else []
    a, b, d = (_t("A", bs + [M, K], TensorRole.input), _t("B", bs + [K, L], TensorRole.input),
               _t("D", bs + [L, N], TensorRole.input))
    c, e = _t("C", bs + [M, L]), _t("E", bs + [M, N], TensorRole.output)
    g1 = _einsum("GEMM1", OpKind.batch_matmul if bd else OpKind.matmul, {**bd, "m": M, "l": L, "k": K}, "k",
                 [(a, bi + [A("m"), A("k")]), (b, bi + [A("k"), A("l")])], (c, bi + [A("m"), A("l")]))
    g2 = _einsum("GEMM2", OpKind.batch_matmul if bd else OpKind.matmul, {**bd, "m": M, "n": N, "l": L}, "l",
                 [(c, bi + [A("m"), A("l")]), (d, bi + [A("l"), A("n")])], (e, bi + [A("m"), A("n")]))
    return Problem([g1, g2], ("A", "B", "D"), ("E",), name)


def attention(batch: int, M: int, K: int, L: int, N: int, softmax: bool = True, name: str = "attention") -> Problem:
    """Attention of one layer with ``batch`` = batch × heads: S = Q·Kᵀ (C[b,m,l] = Σ_k Q[b,m,k]·K[b,k,l]),
    P = softmax(S) along l (an elementwise-like op of ≈5 FLOPs per point), O[b,m,n] = Σ_l P[b,m,l]·V[b,l,n].
    Shapes follow chain_fuser's (batch, M, N, K, L)."""
    bd = {"b": batch}
    q, k, v = (_t("Q", [batch, M, K], TensorRole.input), _t("K", [batch, K, L], TensorRole.input),
               _t("V", [batch, L, N], TensorRole.input))
    s, o = _t("S", [batch, M, L]), _t("O", [batch, M, N], TensorRole.output)
    ops = [_einsum("QK", OpKind.batch_matmul, {**bd, "m": M, "l": L, "k": K}, "k",
                   [(q, [A("b"), A("m"), A("k")]), (k, [A("b"), A("k"), A("l")])], (s, [A("b"), A("m"), A("l")]))]
    src = s
    if softmax:
        p = _t("P", [batch, M, L])
        ops.append(_einsum("Softmax", OpKind.softmax, {**bd, "m": M, "l": L}, (),
                           [(s, [A("b"), A("m"), A("l")])], (p, [A("b"), A("m"), A("l")]), 5, {"axis": 2}))
        src = p
    ops.append(_einsum("PV", OpKind.batch_matmul, {**bd, "m": M, "n": N, "l": L}, "l",
                       [(src, [A("b"), A("m"), A("l")]), (v, [A("b"), A("l"), A("n")])], (o, [A("b"), A("m"), A("n")])))
    return Problem(ops, ("Q", "K", "V"), ("O",), name)


def conv_chain(C: int, H: int, W: int, K1: int, R1: int, K2: int, stride: int = 1, name: str = "conv_chain",
               R2: int = 1) -> Problem:
    """conv R1×R1 (``stride``) then conv R2×R2 (stride 1), sharing the output-pixel dims p, q and the channel k1.

    * ``R2 == 1`` (valid first conv): O1[k1,p,q] = Σ_{c,r,s} I[c, stride·p + r, stride·q + s]·W1[k1,c,r,s];
      O2[k2,p,q] = Σ_{k1} O1[k1,p,q]·W2[k2,k1].
    * ``R2 > 1`` (ResNet/YOLO style, both convs "same"-padded, the input given pre-padded): O1[k1,p,q] as above with
      ``H``/``W`` the *unpadded* input size, and O2[k2,p,q] = Σ_{k1,r2,s2} O1[k1, p + r2 - R2//2, q + s2 - R2//2]
      ·W2[k2,k1,r2,s2]. The intermediate carries a halo of ``R2 - 1`` rows/cols around every p/q tile: a fused
      mapping with the p/q loops shared keeps the halo in the LCA buffer between consecutive tiles (the line-buffer
      dataflow of the reference's conv chains) and re-delivers it when another loop separates the tiles. Counts are
      shift invariant, so the padding offset (and the skew that makes the producer run ``R2//2`` rows ahead, which
      is what a real schedule does) changes no count; the zero border of O1 counts as held, as in a padded buffer."""
    if R2 < 1:
        raise ProblemError(f"{name}.R2", f"kernel size must be >= 1, got {R2}")
    pad1 = (R1 - 1) // 2 if R2 > 1 else 0  # "same" padding of the first conv in a 3x3 -> 3x3 chain
    P = (H + 2 * pad1 - R1) // stride + 1
    Q = (W + 2 * pad1 - R1) // stride + 1
    Hin, Win = (P - 1) * stride + R1, (Q - 1) * stride + R1
    if P < 1 or Q < 1:
        raise ProblemError(f"{name}", f"empty output {P}x{Q} for input {H}x{W} and kernel {R1}")
    i = _t("I", [C, Hin, Win], TensorRole.input)
    w1 = _t("W1", [K1, C, R1, R1], TensorRole.weight)
    o2 = _t("O2", [K2, P, Q], TensorRole.output)
    if R2 == 1:
        o1 = _t("O1", [K1, P, Q])
        w2 = _t("W2", [K2, K1], TensorRole.weight)
    else:
        h = R2 // 2
        o1 = _t("O1", [K1, P + R2 - 1, Q + R2 - 1])  # padded intermediate buffer
        w2 = _t("W2", [K2, K1, R2, R2], TensorRole.weight)
    c1 = _einsum("CONV1", OpKind.conv2d, {"k1": K1, "p": P, "q": Q, "c": C, "r": R1, "s": R1}, "crs",
                 [(i, [A("c"), A("p") * stride + A("r"), A("q") * stride + A("s")]),
                  (w1, [A("k1"), A("c"), A("r"), A("s")])],
                 (o1, [A("k1"), A("p"), A("q")] if R2 == 1 else [A("k1"), A("p") + h, A("q") + h]))
    if R2 == 1:
        c2 = _einsum("CONV2", OpKind.conv2d, {"k2": K2, "p": P, "q": Q, "k1": K1}, ["k1"],
                     [(o1, [A("k1"), A("p"), A("q")]), (w2, [A("k2"), A("k1")])], (o2, [A("k2"), A("p"), A("q")]))
    else:
        c2 = _einsum("CONV2", OpKind.conv2d, {"k2": K2, "p": P, "q": Q, "k1": K1, "r2": R2, "s2": R2},
                     ["k1", "r2", "s2"],
                     [(o1, [A("k1"), A("p") + A("r2"), A("q") + A("s2")]), (w2, [A("k2"), A("k1"), A("r2"), A("s2")])],
                     (o2, [A("k2"), A("p"), A("q")]))
    return Problem([c1, c2], ("I", "W1", "W2"), ("O2",), name)


__all__ = ["Problem", "TensorAccess", "gemm_chain", "attention", "conv_chain"]
