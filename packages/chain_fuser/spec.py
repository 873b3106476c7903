"""Chain specifications: the shapes of the chains chain_fuser has kernels for, and their shared_ir loop nests.

A spec is the compact form of a chain (``GemmChain(batch, M, N, K, L)`` as in the reference,
``ConvChain(N, C, H, W, K1, R1, S1, K2, R2, S2)``); :meth:`to_graph` builds the shared_ir graph whose loop nests the
analytical model reads, and :func:`spec_from_chain` recognises a shared_ir :class:`~shared_ir.Chain` as a spec (or
says why it cannot).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from shared_ir import Graph, Tensor, ops
from shared_ir.op import Op, OpKind

from .errors import ChainDTypeError, ChainShapeError, UnsupportedChainError

FLOAT_DTYPES = ("float32",)
GLUE_FNS = ("none", "relu", "softmax", "gelu", "scale")


def _pos(path: str, v: object) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ChainShapeError(path, f"must be an integer >= 1, got {v!r}", v)
    return v


@dataclass(frozen=True)
class GemmChain:
    """E[b,m,n] = Σ_l glue(Σ_k A[b,m,k]·B[b,k,l])[b,m,l] · D[b,l,n] (reference notation; batch outermost).

    With ``glue="softmax"`` this is attention: A = Q·scale, B = Kᵀ, D = V, softmax over l.
    """

    batch: int
    """Independent batch (heads × sequences); 1 for a plain GEMM chain."""
    M: int
    """Rows of A and E."""
    N: int
    """Columns of D and E."""
    K: int
    """Reduction of the first GEMM."""
    L: int
    """Columns of the intermediate C (reduction of the second GEMM)."""
    glue: str = "none"
    """Op between the GEMMs: none, relu, gelu, scale or softmax (along l)."""
    scale: float = 1.0
    """Multiplier applied to C before the glue (attention's 1/√d)."""
    dtype: str = "float32"
    """Element type (only float32 has kernels)."""
    name: str = "gemm_chain"
    bt: bool = False
    """B is given transposed, as (batch, L, K) (attention's key matrix, a Linear's weight): packed from that
    layout, no copy."""
    dt: bool = False
    """D is given transposed, as (batch, N, L) (the second Linear's weight)."""
    bias1: bool = False
    """A bias of length L is added to C before the glue (first Linear's bias)."""
    bias2: bool = False
    """A bias of length N is added to E (second Linear's bias)."""
    causal: bool = False
    """Attention only: row m attends to columns l ≤ m (``scaled_dot_product_attention(is_causal=True)``'s top-left
    aligned mask); the masked scores are left out of the softmax."""

    def __post_init__(self):
        for f in ("batch", "M", "N", "K", "L"):
            _pos(f"GemmChain.{f}", getattr(self, f))
        if self.causal and self.glue != "softmax":
            raise UnsupportedChainError(self.name, f"a causal mask needs softmax glue, not {self.glue!r}")
        if self.glue not in GLUE_FNS:
            raise UnsupportedChainError(self.name,
                                        f"glue {self.glue!r} between the GEMMs is not one of {list(GLUE_FNS)}")
        if str(self.dtype) not in FLOAT_DTYPES:
            raise ChainDTypeError(f"{self.name}.dtype", self.dtype, FLOAT_DTYPES)

    @property
    def kind(self) -> str:
        return "attention" if self.glue == "softmax" else "gemm"

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.M * self.L * (self.K + self.N)

    @property
    def key(self) -> str:
        return (f"gemm_b{self.batch}_m{self.M}_n{self.N}_k{self.K}_l{self.L}_{self.glue}_s{self.scale:g}_{self.dtype}"
                + ("_bt" if self.bt else "") + ("_dt" if self.dt else "") + ("_b1" if self.bias1 else "")
                + ("_b2" if self.bias2 else "") + ("_causal" if self.causal else ""))

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Operand shapes (A, B, D) and the output E."""
        b, M, N, K, L = self.batch, self.M, self.N, self.K, self.L
        out = {"A": (b, M, K), "B": (b, L, K) if self.bt else (b, K, L), "D": (b, N, L) if self.dt else (b, L, N)}
        if self.bias1:
            out["b1"] = (L,)
        if self.bias2:
            out["b2"] = (N,)
        out["E"] = (b, M, N)
        return out

    def to_graph(self) -> Graph:
        sh = self.shapes()
        A = Tensor("A", sh["A"], self.dtype, "input")
        B = Tensor("B", (self.batch, self.K, self.L), self.dtype, "input")  # the model sees B as (K, L) either way
        D = Tensor("D", (self.batch, self.L, self.N), self.dtype, "input")
        o1 = ops.batch_matmul("gemm1", A, B, "C")
        C = o1.outputs[0].tensor
        mid: list[Op] = []
        if self.glue != "none":
            g = (ops.softmax("softmax", C, "P", axis=-1) if self.glue == "softmax"
                 else ops.unary(self.glue, C, self.glue, "P"))
            mid.append(g)
            C = g.outputs[0].tensor
        o2 = ops.batch_matmul("gemm2", C, D, Tensor("E", sh["E"], self.dtype, "output"))
        return Graph([o1, *mid, o2], name=self.name)


@dataclass(frozen=True)
class ConvChain:
    """O2 = conv2(glue(conv1(I))) with ``same`` padding and stride 1 (reference [N,C,H,W,K1,R1,S1,K2,R2,S2])."""

    N: int
    C: int
    H: int
    W: int
    K1: int
    R1: int
    S1: int
    K2: int
    R2: int
    S2: int
    glue: str = "none"
    """none or relu between the convs."""
    bias1: bool = False
    """conv1 has a bias (added before the glue)."""
    bias2: bool = False
    """conv2 has a bias."""
    dtype: str = "float32"
    name: str = "conv_chain"

    def __post_init__(self):
        for f in ("N", "C", "H", "W", "K1", "R1", "S1", "K2", "R2", "S2"):
            _pos(f"ConvChain.{f}", getattr(self, f))
        for f in ("R1", "S1", "R2", "S2"):
            if getattr(self, f) % 2 == 0:
                raise UnsupportedChainError(self.name, f"{f}={getattr(self, f)}: only odd kernels with 'same' padding")
        if self.glue not in ("none", "relu"):
            raise UnsupportedChainError(self.name, f"glue {self.glue!r} between convs: only none or relu")
        if str(self.dtype) not in FLOAT_DTYPES:
            raise ChainDTypeError(f"{self.name}.dtype", self.dtype, FLOAT_DTYPES)

    kind = "conv"

    @property
    def flops(self) -> int:
        hw = self.N * self.H * self.W
        return 2 * hw * (self.K1 * self.C * self.R1 * self.S1 + self.K2 * self.K1 * self.R2 * self.S2)

    @property
    def key(self) -> str:
        return (f"conv_n{self.N}_c{self.C}_h{self.H}_w{self.W}_k{self.K1}_{self.R1}x{self.S1}_k{self.K2}_"
                f"{self.R2}x{self.S2}_{self.glue}_b{int(self.bias1)}{int(self.bias2)}_{self.dtype}")

    def shapes(self) -> dict[str, tuple[int, ...]]:
        out = {"I": (self.N, self.C, self.H, self.W), "W1": (self.K1, self.C, self.R1, self.S1),
               "W2": (self.K2, self.K1, self.R2, self.S2)}
        if self.bias1:
            out["b1"] = (self.K1,)
        if self.bias2:
            out["b2"] = (self.K2,)
        out["O"] = (self.N, self.K2, self.H, self.W)
        return out

    def to_graph(self) -> Graph:
        sh = self.shapes()
        x = Tensor("I", sh["I"], self.dtype, "input")
        w1 = Tensor("W1", sh["W1"], self.dtype, "weight")
        w2 = Tensor("W2", sh["W2"], self.dtype, "weight")
        b1 = Tensor("b1", sh["b1"], self.dtype, "weight") if self.bias1 else None
        b2 = Tensor("b2", sh["b2"], self.dtype, "weight") if self.bias2 else None
        c1 = ops.conv2d("conv1", x, w1, "T", bias=b1, padding=(self.R1 // 2, self.S1 // 2))
        t = c1.outputs[0].tensor
        mid: list[Op] = []
        if self.glue == "relu":
            r = ops.unary("relu", t, "relu", "U")
            mid.append(r)
            t = r.outputs[0].tensor
        c2 = ops.conv2d("conv2", t, w2, Tensor("O", sh["O"], self.dtype, "output"), bias=b2,
                        padding=(self.R2 // 2, self.S2 // 2))
        return Graph([c1, *mid, c2], name=self.name)


ChainSpec = GemmChain | ConvChain


def input_names(spec: ChainSpec) -> list[str]:
    """The chain's operands in call order: ``spec.shapes()`` without its output (``E`` / ``O``)."""
    return [n for n in spec.shapes() if n not in ("E", "O")]


def _glue_fn(op: Op) -> str:
    if op.kind == OpKind.softmax:
        return "softmax"
    fn = op.attr("fn")
    if fn == "gelu" and op.attr("approximate", "none") != "none":
        raise UnsupportedChainError(op.name, f"gelu(approximate={op.attr('approximate')!r}) has no fused template "
                                             "(the exact erf form has)")
    if fn in ("relu", "gelu"):
        return fn
    raise UnsupportedChainError(op.name, f"elementwise op {fn!r} between the compute ops has no fused template "
                                         f"(supported: a scalar multiply/divide, then relu, gelu or softmax)")


def _is_causal_mask(op: Op) -> bool:
    """The constant lower-triangular mask that ``shared_ir.ops.attention`` adds for ``is_causal``."""
    return (op.kind == OpKind.elementwise and op.attr("fn") == "masked_fill" and op.name.endswith(".causal")
            and len(op.inputs) == 2 and op.inputs[1].tensor.name.endswith(".causal_mask"))


def _folded_norms(ops: tuple[Op, ...], first: Op) -> list[Op]:
    """Inference batch norms right after the first compute op: a per-channel scale and shift that fold exactly into
    its weights and bias (W' = W·γ/σ, b' = (b − μ)·γ/σ + β), as inference compilers do, so conv→BN→ReLU→conv is a
    conv chain with a bias."""
    out, cur = [], first.output_names[0]
    for o in ops[ops.index(first) + 1:]:
        if not (o.kind == OpKind.elementwise and o.attr("fn") == "batchnorm" and o.inputs[0].tensor.name == cur):
            break
        out.append(o)
        cur = o.output_names[0]
    return out


def _glue(glue_ops: list[Op], names: str) -> tuple[str, float]:
    """(activation, scale) of the ops between the compute ops: scalar multiplies/divides, then one activation."""
    scale, act = 1.0, "none"
    for o in glue_ops:
        fn = o.attr("fn")
        if o.kind == OpKind.elementwise and fn in ("mul_scalar", "div_scalar") and len(o.inputs) == 1:
            if act != "none":
                raise UnsupportedChainError(names, f"{o.name}: a scalar {fn} after {act} has no fused template")
            v = float(o.attr("scalar"))
            scale = scale * v if fn == "mul_scalar" else scale / v
            continue
        if act != "none":
            raise UnsupportedChainError(names, f"{o.name}: only one activation between the compute ops is fused")
        act = _glue_fn(o)
    if act == "none" and scale != 1.0:
        act = "scale"
    return act, scale


def spec_from_chain(chain, name: str = "chain", fold_norms: bool = False) -> ChainSpec:
    """Recognise a shared_ir Chain of two compute ops (scalar multiplies and one activation between them) as a
    spec. Raises :class:`UnsupportedChainError` naming the op and the reason when no template fits.

    ``fold_norms``: inference batch norms right after the first conv count as folded into its weights and bias
    (the spec's shape for tuning and timing; ``compile`` does not fold, so it leaves such chains eager)."""
    names = "→".join(chain.names)
    comp = chain.compute_ops
    if len(comp) != 2:
        raise UnsupportedChainError(names, f"{len(comp)} compute ops; templates cover chains of exactly 2")
    causal = [o for o in chain.ops if _is_causal_mask(o)]
    folded = _folded_norms(chain.ops, comp[0]) if fold_norms else []
    glue_ops = [o for o in chain.ops if not o.kind.compute_intensive and o not in causal and o not in folded]
    for o in chain.ops:
        if o in causal:
            continue
        for a in o.accesses:
            if a.tensor.dtype.value not in FLOAT_DTYPES:
                raise ChainDTypeError(f"{o.name}.{a.tensor.name}", a.tensor.dtype.value)
    glue, scale = _glue(glue_ops, names)
    o1, o2 = comp
    if folded and o1.kind != OpKind.conv2d:
        raise UnsupportedChainError(names, f"{folded[0].name}: a batch norm is folded only after a conv")
    mm = (OpKind.matmul, OpKind.batch_matmul)
    if o1.kind in mm and o2.kind in mm:
        A, B = (a.tensor for a in o1.inputs[:2])
        D = o2.inputs[1].tensor
        mid = o2.inputs[0].tensor.name
        want = glue_ops[-1].output_names[0] if glue_ops else o1.output_names[0]
        if mid != want:
            raise UnsupportedChainError(names, "the intermediate must be the left operand of the second GEMM")
        if glue == "softmax" and glue_ops[-1].attr("axis") != len(glue_ops[-1].dims) - 1:
            raise UnsupportedChainError(names, "softmax must run along the last axis (l)")
        ext1, ext2 = o1.extents, o2.extents
        b1 = [d.name for d in o1.dims if d.name.startswith("b")]
        batch = 1
        for d in b1:
            batch *= ext1[d]
        for t in (A, B, D):
            if len(t.shape) > 2 and t.shape[:-2] and t.numel // (t.shape[-1] * t.shape[-2]) not in (1, batch):
                raise ChainShapeError(f"{names}.{t.name}", f"batch axes {list(t.shape[:-2])} do not match {batch}")
        if glue in ("relu", "gelu", "softmax") and scale <= 0:
            raise UnsupportedChainError(names, f"scale {scale} <= 0 before {glue} is not fused")
        return GemmChain(batch, ext1["m"], ext2["n"], ext1["k"], ext1["n"], glue=glue, scale=scale, name=name,
                         causal=bool(causal))
    if o1.kind == OpKind.linear and o2.kind == OpKind.linear:
        X, W1 = o1.inputs[0].tensor, o1.inputs[1].tensor
        W2 = o2.inputs[1].tensor
        want = glue_ops[-1].output_names[0] if glue_ops else o1.output_names[0]
        if o2.inputs[0].tensor.name != want:
            raise UnsupportedChainError(names, "the intermediate must be the input of the second Linear")
        if glue == "softmax":
            raise UnsupportedChainError(names, "softmax between two Linears has no template")
        M = X.numel // X.shape[-1]
        L, K = W1.shape
        N = W2.shape[0]
        return GemmChain(1, M, N, K, L, glue=glue, scale=scale, bt=True, dt=True, bias1=len(o1.inputs) > 2,
                         bias2=len(o2.inputs) > 2, name=name)
    if o1.kind == OpKind.conv2d and o2.kind == OpKind.conv2d:
        if glue not in ("none", "relu") or scale != 1.0:
            raise UnsupportedChainError(names, f"{glue} (scale {scale}) between convs has no template (none or relu)")
        for o in (o1, o2):
            if o.attr("stride") != (1, 1) or o.attr("dilation") != (1, 1) or o.attr("groups") != 1:
                raise UnsupportedChainError(names, f"{o.name}: only stride 1, dilation 1, groups 1 convs")
            R, S = o.extents["r"], o.extents["s"]
            if o.attr("padding") != (R // 2, S // 2):
                raise UnsupportedChainError(names, f"{o.name}: only 'same' padding")
        Ni, Ci, Hi, Wi = o1.inputs[0].tensor.shape
        K1, _, R1, S1 = o1.inputs[1].tensor.shape
        K2, _, R2, S2 = o2.inputs[1].tensor.shape
        return ConvChain(Ni, Ci, Hi, Wi, K1, R1, S1, K2, R2, S2, glue=glue,
                         bias1=len(o1.inputs) > 2 or bool(folded), bias2=len(o2.inputs) > 2, name=name)
    raise UnsupportedChainError(names, f"no template for {o1.kind.value}→{o2.kind.value} "
                                       "(GEMM→GEMM, batch GEMM→batch GEMM, Linear→Linear and conv→conv are covered)")




def graph_specs(g, kind: type | None = None, fold_norms: bool = True) -> tuple[list[ChainSpec], list[dict]]:
    """The distinct two-op chains of any imported graph (every pair of consecutive compute ops of its chains) that
    a template covers, as specs named after their first op (of ``kind``, GemmChain or ConvChain, when given), and
    the others as ``{"chain", "reason"}`` records."""
    from .errors import ChainFuserError

    specs: dict[tuple, ChainSpec] = {}
    skipped: list[dict] = []
    for ch in (p for c in g.chains() for p in c.pairs()):
        try:
            spec = spec_from_chain(ch, name=ch.names[0], fold_norms=fold_norms)
        except ChainFuserError as e:
            skipped.append({"chain": "→".join(ch.names), "reason": str(e)})
            continue
        if kind is not None and not isinstance(spec, kind):
            skipped.append({"chain": "→".join(ch.names), "reason": f"a {type(spec).__name__}, not a {kind.__name__}"})
            continue
        key = dataclasses.astuple(dataclasses.replace(spec, name=""))
        specs.setdefault(key, spec)  # the same shape elsewhere in the model is the same kernel
    return list(specs.values()), skipped


def chain_dim_names(spec: ChainSpec) -> dict[tuple[int, str], str]:
    """Reference names of the chain dims: GEMM chains ``b, m, k, l, n``; conv chains ``b, k1, c, p, q, r1, s1, k2,
    r2, s2`` (op 0 is the first compute op, the last op the second)."""
    last = 2 if spec.glue != "none" else 1
    if isinstance(spec, GemmChain):
        return {(0, "b0"): "b", (0, "m"): "m", (0, "k"): "k", (0, "n"): "l", (last, "n"): "n"}
    return {(0, "b"): "b", (0, "k"): "k1", (0, "c"): "c", (0, "r"): "r1", (0, "s"): "s1", (0, "p"): "p",
            (0, "q"): "q", (last, "k"): "k2", (last, "r"): "r2", (last, "s"): "s2"}


def chain_nest(spec: ChainSpec):
    """The spec's unified loop nest (see :class:`chain_fuser.model.ChainNest`)."""
    from .model import ChainNest

    g = spec.to_graph()
    nest = ChainNest(g.topological_ops(), chain_dim_names(spec), spec.name)
    if getattr(spec, "glue", "none") == "softmax":
        nest.intermediate_copies = 2  # the kernel holds the scores and the probabilities of a row block
    return nest


__all__ = ["GemmChain", "ConvChain", "ChainSpec", "input_names", "spec_from_chain", "graph_specs", "FLOAT_DTYPES",
           "chain_dim_names", "chain_nest"]
