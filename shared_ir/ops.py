"""Constructors of the op kinds. Each builds the loop nest of one operator from its operand tensors.

Inputs are :class:`Tensor` s (shape, dtype, role); the output is given by name (or as a Tensor to fix its role)
and its shape is derived. Dimension names follow one convention so that packages can read them:
GEMMs ``b0.. m n k``; convs ``b g k p q c r s``; elementwise-like ops ``d0 d1 ..``.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from .affine import AffineExpr, IndirectIndex
from .dtypes import DType
from .errors import ShapeError
from .op import Access, Dim, Op, OpKind, Tensor, TensorRole

A = AffineExpr.dim
C = AffineExpr.constant


def _out(out: "str | Tensor", shape: Sequence[int], dtype: DType, where: str) -> Tensor:
    if isinstance(out, Tensor):
        if tuple(out.shape) != tuple(shape):
            raise ShapeError(f"ops.{where}.out",
                             f"output {out.name!r} declared {list(out.shape)}, op produces {list(shape)}")
        return out
    return Tensor(out, tuple(shape), dtype, TensorRole.activation)


def _pair(v: "int | Sequence[int]") -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _broadcast(shapes: Sequence[Sequence[int]], where: str) -> tuple[int, ...]:
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        ext = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0} - {1}
        if len(ext) > 1:
            raise ShapeError(f"ops.{where}", f"shapes {[list(s) for s in shapes]} do not broadcast (axis {i})")
        out.append(ext.pop() if ext else 1)
    return tuple(out)


def _bcast_index(shape: Sequence[int], dims: Sequence[str]) -> tuple[AffineExpr, ...]:
    """Index of an operand broadcast to an output indexed by ``dims`` (aligned right; size-1 axes index 0)."""
    off = len(dims) - len(shape)
    return tuple(C(0) if n == 1 else A(dims[off + i]) for i, n in enumerate(shape))


# --- compute-intensive ops --------------------------------------------------------------------------------------
def matmul(name: str, a: Tensor, b: Tensor, out: "str | Tensor") -> Op:
    """C[m,n] = Σ_k A[m,k]·B[k,n]. Operands of rank > 2 are batch matmuls (see :func:`batch_matmul`)."""
    if len(a.shape) != 2 or len(b.shape) != 2:
        return batch_matmul(name, a, b, out)
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2:
        raise ShapeError(f"ops.{name}", f"matmul inner dims differ: {a.name}{list(a.shape)} @ {b.name}{list(b.shape)}")
    o = _out(out, (M, N), a.dtype, name)
    return Op(name, OpKind.matmul, (Dim("m", M), Dim("n", N), Dim("k", K, True)),
              (Access(a, (A("m"), A("k"))), Access(b, (A("k"), A("n")))), (Access(o, (A("m"), A("n"))),))


def batch_matmul(name: str, a: Tensor, b: Tensor, out: "str | Tensor") -> Op:
    """C[b..,m,n] = Σ_k A[b..,m,k]·B[b..,k,n], batch axes broadcast (a rank-2 operand is shared by all batches)."""
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise ShapeError(f"ops.{name}",
                         f"batch_matmul needs rank >= 2 operands, got {list(a.shape)} and {list(b.shape)}")
    M, K = a.shape[-2:]
    K2, N = b.shape[-2:]
    if K != K2:
        raise ShapeError(f"ops.{name}", f"matmul inner dims differ: {a.name}{list(a.shape)} @ {b.name}{list(b.shape)}")
    batch = _broadcast([a.shape[:-2], b.shape[:-2]], name)
    bd = [f"b{i}" for i in range(len(batch))]
    o = _out(out, (*batch, M, N), a.dtype, name)
    dims = tuple(Dim(d, e) for d, e in zip(bd, batch)) + (Dim("m", M), Dim("n", N), Dim("k", K, True))
    ai = _bcast_index(a.shape[:-2], bd) + (A("m"), A("k"))
    bi = _bcast_index(b.shape[:-2], bd) + (A("k"), A("n"))
    oi = tuple(A(d) for d in bd) + (A("m"), A("n"))
    return Op(name, OpKind.batch_matmul, dims, (Access(a, ai), Access(b, bi)), (Access(o, oi),))


def linear(name: str, x: Tensor, w: Tensor, out: "str | Tensor", bias: Tensor | None = None) -> Op:
    """Y[.., n] = Σ_k X[.., k]·W[n, k] (+ bias[n]), as torch.nn.Linear."""
    N, K = w.shape
    if x.shape[-1] != K:
        raise ShapeError(f"ops.{name}",
                         f"linear input {x.name}{list(x.shape)} does not match weight {w.name}{list(w.shape)}")
    lead = x.shape[:-1]
    ld = [f"b{i}" for i in range(len(lead) - 1)] + (["m"] if lead else [])
    o = _out(out, (*lead, N), x.dtype, name)
    dims = tuple(Dim(d, e) for d, e in zip(ld, lead)) + (Dim("n", N), Dim("k", K, True))
    ins = [Access(x, tuple(A(d) for d in ld) + (A("k"),)), Access(w, (A("n"), A("k")))]
    if bias is not None:
        if tuple(bias.shape) != (N,):
            raise ShapeError(f"ops.{name}.bias", f"bias {bias.name}{list(bias.shape)} should be [{N}]")
        ins.append(Access(bias, (A("n"),)))
    return Op(name, OpKind.linear, dims, tuple(ins), (Access(o, tuple(A(d) for d in ld) + (A("n"),)),))


def conv2d(name: str, x: Tensor, w: Tensor, out: "str | Tensor", bias: Tensor | None = None,
           stride: "int | Sequence[int]" = 1, padding: "int | Sequence[int]" = 0,
           dilation: "int | Sequence[int]" = 1, groups: int = 1) -> Op:
    """O[b, g·Kg+k, p, q] += I[b, g·Cg+c, p·s_h + r·d_h − pad_h, q·s_w + s·d_w − pad_w] · W[g·Kg+k, c, r, s].

    Depthwise is ``groups = C`` (Cg = 1). The group ``g`` is a loop of the nest only when groups > 1.
    """
    B, Cin, H, W = x.shape
    K, Cg, R, S = w.shape
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    if Cin % groups or K % groups or Cin // groups != Cg:
        raise ShapeError(f"ops.{name}",
                         f"conv2d channels: input {Cin}, weight {list(w.shape)}, groups {groups} disagree")
    P = (H + 2 * ph - dh * (R - 1) - 1) // sh + 1
    Q = (W + 2 * pw - dw * (S - 1) - 1) // sw + 1
    if P < 1 or Q < 1:
        raise ShapeError(f"ops.{name}", f"conv2d output would be empty ({P}x{Q}) for input {H}x{W}, kernel {R}x{S}")
    Kg = K // groups
    o = _out(out, (B, K, P, Q), x.dtype, name)
    g = groups > 1
    dims = ((Dim("b", B),) + ((Dim("g", groups),) if g else ()) +
            (Dim("k", Kg), Dim("p", P), Dim("q", Q), Dim("c", Cg, True), Dim("r", R, True), Dim("s", S, True)))
    kk = A("g") * Kg + A("k") if g else A("k")
    cc = A("g") * Cg + A("c") if g else A("c")
    hh = A("p") * sh + A("r") * dh + (-ph)
    ww = A("q") * sw + A("s") * dw + (-pw)
    ins = [Access(x, (A("b"), cc, hh, ww)), Access(w, (kk, A("c"), A("r"), A("s")))]
    if bias is not None:
        ins.append(Access(bias, (kk,)))
    attrs = {"stride": (sh, sw), "padding": (ph, pw), "dilation": (dh, dw), "groups": groups,
             "padded": bool(ph or pw)}
    return Op(name, OpKind.conv2d, dims, tuple(ins), (Access(o, (A("b"), kk, A("p"), A("q"))),), attrs)


# --- elementwise and normalisation ------------------------------------------------------------------------------
def _dn(rank: int) -> list[str]:
    return [f"d{i}" for i in range(rank)]


def unary(name: str, x: Tensor, fn: str, out: "str | Tensor", flops_per_point: int = 1) -> Op:
    """Y = fn(X) elementwise (relu, gelu, silu, tanh, sigmoid, scale, batchnorm-affine, copy, ...)."""
    d = _dn(len(x.shape))
    o = _out(out, x.shape, x.dtype, name)
    idx = tuple(A(v) for v in d)
    return Op(name, OpKind.elementwise, tuple(Dim(v, e) for v, e in zip(d, x.shape)), (Access(x, idx),),
              (Access(o, idx),), {"fn": fn}, flops_per_point)


def binary(name: str, a: Tensor, b: Tensor, fn: str, out: "str | Tensor", flops_per_point: int = 1) -> Op:
    """Y = fn(A, B) with numpy broadcasting (add, mul, sub, div, ...)."""
    shape = _broadcast([a.shape, b.shape], name)
    d = _dn(len(shape))
    o = _out(out, shape, a.dtype, name)
    ins = (Access(a, _bcast_index(a.shape, d)),) + ((Access(b, _bcast_index(b.shape, d)),) if b.name != a.name else ())
    return Op(name, OpKind.elementwise, tuple(Dim(v, e) for v, e in zip(d, shape)), ins,
              (Access(o, tuple(A(v) for v in d)),), {"fn": fn}, flops_per_point)


def affine_channel(name: str, x: Tensor, scale: Tensor, shift: Tensor, out: "str | Tensor", axis: int = 1) -> Op:
    """Y = X·scale[c] + shift[c] along ``axis`` (inference BatchNorm)."""
    d = _dn(len(x.shape))
    o = _out(out, x.shape, x.dtype, name)
    idx = tuple(A(v) for v in d)
    return Op(name, OpKind.elementwise, tuple(Dim(v, e) for v, e in zip(d, x.shape)),
              (Access(x, idx), Access(scale, (A(d[axis]),)), Access(shift, (A(d[axis]),))),
              (Access(o, idx),), {"fn": "batchnorm", "axis": axis}, 2)


def softmax(name: str, x: Tensor, out: "str | Tensor", axis: int = -1) -> Op:
    """Y = softmax(X) along ``axis`` (a row-wise reduction and an elementwise pass: ≈5 FLOPs per point)."""
    axis %= len(x.shape)
    d = _dn(len(x.shape))
    o = _out(out, x.shape, x.dtype, name)
    idx = tuple(A(v) for v in d)
    return Op(name, OpKind.softmax, tuple(Dim(v, e) for v, e in zip(d, x.shape)), (Access(x, idx),),
              (Access(o, idx),), {"axis": axis}, 5)


def layernorm(name: str, x: Tensor, out: "str | Tensor", weight: Tensor | None = None, bias: Tensor | None = None,
              normalized_ndim: int = 1) -> Op:
    """Y = (X − mean)/std · w + b over the last ``normalized_ndim`` axes (≈8 FLOPs per point)."""
    d = _dn(len(x.shape))
    o = _out(out, x.shape, x.dtype, name)
    idx = tuple(A(v) for v in d)
    ins = [Access(x, idx)]
    for t in (weight, bias):
        if t is not None:
            ins.append(Access(t, tuple(A(v) for v in d[len(d) - len(t.shape):])))
    return Op(name, OpKind.layernorm, tuple(Dim(v, e) for v, e in zip(d, x.shape)), tuple(ins), (Access(o, idx),),
              {"normalized_ndim": normalized_ndim}, 8)


def reduce(name: str, x: Tensor, axes: Sequence[int], out: "str | Tensor", fn: str = "sum",
           keepdim: bool = False) -> Op:
    """Y = fn over ``axes`` of X (sum, mean, max, min)."""
    r = len(x.shape)
    axes = sorted({a % r for a in axes})
    d = _dn(r)
    oshape = [1 if i in axes else n for i, n in enumerate(x.shape)] if keepdim else \
        [n for i, n in enumerate(x.shape) if i not in axes]
    o = _out(out, tuple(oshape) or (1,), x.dtype, name)
    if keepdim:
        oi = tuple(C(0) if i in axes else A(v) for i, v in enumerate(d))
    else:
        oi = tuple(A(v) for i, v in enumerate(d) if i not in axes) or (C(0),)
    dims = tuple(Dim(v, e, i in axes) for i, (v, e) in enumerate(zip(d, x.shape)))
    return Op(name, OpKind.reduce, dims, (Access(x, tuple(A(v) for v in d)),), (Access(o, oi),),
              {"fn": fn, "axes": tuple(axes), "keepdim": keepdim})


def pool2d(name: str, x: Tensor, out: "str | Tensor", kernel: "int | Sequence[int]",
           stride: "int | Sequence[int] | None" = None,
           padding: "int | Sequence[int]" = 0, fn: str = "max", dilation: "int | Sequence[int]" = 1) -> Op:
    """O[b,c,p,q] = fn over (r,s) of I[b, c, p·s_h + r·d_h − pad_h, q·s_w + s·d_w − pad_w] (max or avg)."""
    B, Cn, H, W = x.shape
    (R, S) = _pair(kernel)
    (sh, sw) = _pair(stride if stride is not None else kernel)
    (ph, pw), (dh, dw) = _pair(padding), _pair(dilation)
    P = (H + 2 * ph - dh * (R - 1) - 1) // sh + 1
    Q = (W + 2 * pw - dw * (S - 1) - 1) // sw + 1
    if P < 1 or Q < 1:
        raise ShapeError(f"ops.{name}", f"pool output would be empty for input {H}x{W}, kernel {R}x{S}")
    o = _out(out, (B, Cn, P, Q), x.dtype, name)
    dims = (Dim("b", B), Dim("c", Cn), Dim("p", P), Dim("q", Q), Dim("r", R, True), Dim("s", S, True))
    xi = (A("b"), A("c"), A("p") * sh + A("r") * dh + (-ph), A("q") * sw + A("s") * dw + (-pw))
    return Op(name, OpKind.pool, dims, (Access(x, xi),), (Access(o, (A("b"), A("c"), A("p"), A("q"))),),
              {"fn": fn, "kernel": (R, S), "stride": (sh, sw), "padding": (ph, pw), "dilation": (dh, dw),
               "padded": bool(ph or pw)})


def embedding(name: str, ids: Tensor, weight: Tensor, out: "str | Tensor") -> Op:
    """O[.., e] = W[ids[..], e]: a gather whose row index is data dependent."""
    V, E = weight.shape
    d = _dn(len(ids.shape))
    o = _out(out, (*ids.shape, E), weight.dtype, name)
    dims = tuple(Dim(v, n) for v, n in zip(d, ids.shape)) + (Dim("e", E),)
    idx = tuple(A(v) for v in d)
    return Op(name, OpKind.embedding, dims,
              (Access(ids, idx), Access(weight, (IndirectIndex(tuple(d)), A("e")))), (Access(o, idx + (A("e"),)),))


# --- data movement ----------------------------------------------------------------------------------------------
def view(name: str, x: Tensor, shape: Sequence[int], out: "str | Tensor") -> Op:
    """Reshape / flatten: a copy over the flat element index (free when the layout allows a view)."""
    shape = tuple(int(s) for s in shape)
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        shape = tuple(x.numel // known if s == -1 else s for s in shape)
    if math.prod(shape) != x.numel:
        raise ShapeError(f"ops.{name}", f"cannot view {x.name}{list(x.shape)} as {list(shape)}")
    o = _out(out, shape, x.dtype, name)
    return Op(name, OpKind.view, (Dim("i", x.numel),), (Access(x, (A("i"),), flat=True),),
              (Access(o, (A("i"),), flat=True),), {"fn": "reshape", "shape": shape}, 0)


def permute(name: str, x: Tensor, perm: Sequence[int], out: "str | Tensor") -> Op:
    """Y = X.permute(perm): loops over X's axes, writes Y with permuted indices."""
    r = len(x.shape)
    perm = tuple(p % r for p in perm)
    if sorted(perm) != list(range(r)):
        raise ShapeError(f"ops.{name}", f"invalid permutation {list(perm)} for rank {r}")
    d = _dn(r)
    o = _out(out, tuple(x.shape[p] for p in perm), x.dtype, name)
    return Op(name, OpKind.view, tuple(Dim(v, e) for v, e in zip(d, x.shape)), (Access(x, tuple(A(v) for v in d)),),
              (Access(o, tuple(A(d[p]) for p in perm)),), {"fn": "permute", "perm": perm}, 0)


def concat(name: str, xs: Sequence[Tensor], axis: int, out: "str | Tensor") -> Op:
    """Y = cat(xs, axis): loops over Y; input i is read at ``d_axis − offset_i`` (out of range elsewhere)."""
    r = len(xs[0].shape)
    axis %= r
    for t in xs:
        if len(t.shape) != r or any(t.shape[i] != xs[0].shape[i] for i in range(r) if i != axis):
            raise ShapeError(f"ops.{name}", f"concat shapes {[list(t.shape) for t in xs]} differ off axis {axis}")
    shape = list(xs[0].shape)
    shape[axis] = sum(t.shape[axis] for t in xs)
    d = _dn(r)
    o = _out(out, tuple(shape), xs[0].dtype, name)
    ins, off = [], 0
    for t in xs:
        ins.append(Access(t, tuple(A(v) + (-off if i == axis else 0) for i, v in enumerate(d))))
        off += t.shape[axis]
    return Op(name, OpKind.concat, tuple(Dim(v, e) for v, e in zip(d, shape)), tuple(ins),
              (Access(o, tuple(A(v) for v in d)),), {"axis": axis, "padded": True}, 0)


# --- data-movement builders shared by the frontends -------------------------------------------------------------
def strided_view(name: str, x: Tensor, out: Tensor, in_index: Sequence[AffineExpr], fn: str,
                 attrs: dict[str, Any] | None = None) -> Op:
    """A copy op looping over ``out`` (dims d0..dn) reading ``x`` at ``in_index`` (one affine expr per axis of x,
    over the output dims). Covers slicing with steps, integer selection, inserting size-1 axes and broadcasting."""
    d = [f"d{i}" for i in range(len(out.shape))]
    dims = tuple(Dim(v, e) for v, e in zip(d, out.shape))
    if len(in_index) != len(x.shape):
        raise ShapeError(f"ops.{name}", f"{len(in_index)} indices for input {x.name}{list(x.shape)}")
    return Op(name, OpKind.view, dims, (Access(x, tuple(in_index)),), (Access(out, tuple(A(v) for v in d)),),
              {"fn": fn, **(attrs or {})}, 0)


def slice_op(name: str, x: Tensor, out: Tensor, axis: int, start: int, step: int = 1) -> Op:
    """``out = x[..., start::step (len = out.shape[axis]), ...]`` along one axis (split / chunk / narrow)."""
    axis %= len(x.shape)
    idx = [A(f"d{i}") * (step if i == axis else 1) + (start if i == axis else 0) for i in range(len(x.shape))]
    return strided_view(name, x, out, idx, "slice", {"axis": axis, "start": start, "step": step})


def select_op(name: str, x: Tensor, out: Tensor, axis: int, index: int) -> Op:
    """``out = x.select(axis, index)``: the axis disappears."""
    axis %= len(x.shape)
    idx, j = [], 0
    for i in range(len(x.shape)):
        if i == axis:
            idx.append(C(index))
        else:
            idx.append(A(f"d{j}"))
            j += 1
    return strided_view(name, x, out, idx, "select", {"axis": axis, "index": index})


def expand_op(name: str, x: Tensor, out: Tensor) -> Op:
    """Broadcast copy (``expand`` / ``Expand``): size-1 axes of ``x`` are read at index 0, aligned right."""
    off = len(out.shape) - len(x.shape)
    idx = [C(0) if n == 1 and out.shape[off + i] != 1 else A(f"d{off + i}") for i, n in enumerate(x.shape)]
    return strided_view(name, x, out, idx, "expand")


def upsample_nearest_op(name: str, x: Tensor, out: Tensor) -> Op:
    """Nearest-neighbour upsampling by integer factors on the trailing spatial axes: a ``view``-kind copy.

    The nest loops over the input axes ``d*`` and one replica loop ``f<i>`` per scaled axis, writing
    ``out[.., d_i·f + f_i, ..]`` (affine, unlike the output-indexed ``in[h // f]``); its points equal the output
    elements, so the op costs what the copy costs."""
    if len(out.shape) != len(x.shape):
        raise ShapeError(f"ops.{name}", f"upsample rank changes {list(x.shape)} -> {list(out.shape)}")
    d = [f"d{i}" for i in range(len(x.shape))]
    dims, oidx, factors = [Dim(v, e) for v, e in zip(d, x.shape)], [], []
    for i, (a, b) in enumerate(zip(x.shape, out.shape)):
        if b % a:
            raise ShapeError(f"ops.{name}",
                             f"nearest upsampling needs integer factors, got {list(x.shape)} -> {list(out.shape)}")
        f = b // a
        factors.append(f)
        if f > 1:
            dims.append(Dim(f"f{i}", f))
            oidx.append(A(d[i]) * f + A(f"f{i}"))
        else:
            oidx.append(A(d[i]))
    return Op(name, OpKind.view, tuple(dims), (Access(x, tuple(A(v) for v in d)),), (Access(out, tuple(oidx)),),
              {"fn": "upsample_nearest", "scale": tuple(factors)}, 0)


def resize_nearest_op(name: str, x: Tensor, out: Tensor) -> Op:
    """Nearest-neighbour resize by an integer factor per axis (torch's ``nearest``; ONNX's ``Resize`` nearest with
    asymmetric coordinates): upsampling is :func:`upsample_nearest_op`; downsampling by f reads every f-th element
    (source index o·f), a ``view``-kind strided copy ``downsample_nearest``. Mixed or fractional ratios raise."""
    ins, outs = tuple(x.shape), tuple(out.shape)
    if len(ins) == len(outs) and all(o % i == 0 for i, o in zip(ins, outs)):
        return upsample_nearest_op(name, x, out)
    if len(ins) == len(outs) and all(i % o == 0 for i, o in zip(ins, outs)):
        return strided_view(name, x, out, [A(f"d{k}") * (i // o) for k, (i, o) in enumerate(zip(ins, outs))],
                            "downsample_nearest")
    raise ShapeError(f"ops.{name}", f"nearest resize {list(ins)} -> {list(outs)} is not by an integer factor per axis")


def lstm_cell_tail(p: str, gi: Tensor, gf: Tensor, gg: Tensor, go: Tensor, c: Tensor,
                   add: "Callable[[Op], Tensor]") -> tuple[Tensor, Tensor]:
    """The elementwise half of an LSTM cell, shared by both frontends' unrolling: from the gate pre-activations
    (input, forget, cell, output) and the previous cell state to the new (c, h). ``add`` registers an op and returns
    its output tensor."""
    si = add(unary(f"{p}.si", gi, "sigmoid", f"{p}.si", 4))
    sf = add(unary(f"{p}.sf", gf, "sigmoid", f"{p}.sf", 4))
    tg = add(unary(f"{p}.tg", gg, "tanh", f"{p}.tg", 4))
    so = add(unary(f"{p}.so", go, "sigmoid", f"{p}.so", 4))
    fc = add(binary(f"{p}.fc", sf, c, "mul", f"{p}.fc"))
    ig = add(binary(f"{p}.ig", si, tg, "mul", f"{p}.ig"))
    c = add(binary(f"{p}.c", fc, ig, "add", f"{p}.c"))
    tc = add(unary(f"{p}.tc", c, "tanh", f"{p}.tc", 4))
    return c, add(binary(f"{p}.h", so, tc, "mul", f"{p}.h"))


# --- kinds of the torch.export frontend: N-d and transposed convs, interpolation, attention, norms, opaque --------
_SP_OUT = {1: ("p",), 2: ("p", "q"), 3: ("z", "p", "q")}
_SP_KER = {1: ("r",), 2: ("r", "s"), 3: ("t", "r", "s")}


def _ntuple(v: "int | Sequence[int]", n: int, field: str, where: str) -> tuple[int, ...]:
    t = (int(v),) * n if isinstance(v, int) else tuple(int(x) for x in v)
    t = t * n if len(t) == 1 else t
    if len(t) != n:
        raise ShapeError(f"ops.{where}.{field}", f"{len(t)} values for {n} spatial axes", t)
    return t


def _conv_params(name: str, x: Tensor, w: Tensor, stride, padding, dilation, what: str):
    n = len(w.shape) - 2
    if n not in (1, 2, 3) or len(x.shape) != n + 2:
        raise ShapeError(f"ops.{name}", f"{what}: input {list(x.shape)} and weight {list(w.shape)} are not a batched "
                                        "1-, 2- or 3-d convolution")
    return n, _ntuple(stride, n, "stride", name), _ntuple(padding, n, "padding", name), \
        _ntuple(dilation, n, "dilation", name)


def conv(name: str, x: Tensor, w: Tensor, out: "str | Tensor", bias: Tensor | None = None,
         stride: "int | Sequence[int]" = 1, padding: "int | Sequence[int]" = 0,
         dilation: "int | Sequence[int]" = 1, groups: int = 1) -> Op:
    """Convolution over 1, 2 or 3 spatial axes (kinds ``conv1d``, :func:`conv2d`, ``conv3d``), as conv2d:
    O[b, g·Kg+k, p..] += I[b, g·Cg+c, p·s + r·d − pad, ..] · W[g·Kg+k, c, r..]. Spatial dims: output ``p`` /
    ``p q`` / ``z p q``, kernel ``r`` / ``r s`` / ``t r s``."""
    n, st, pd, dl = _conv_params(name, x, w, stride, padding, dilation, "conv")
    if n == 2:
        return conv2d(name, x, w, out, bias, st, pd, dl, groups)
    (B, Cin, *sp), (K, Cg, *ks) = x.shape, w.shape
    if Cin % groups or K % groups or Cin // groups != Cg:
        raise ShapeError(f"ops.{name}", f"conv channels: input {Cin}, weight {list(w.shape)}, groups {groups} disagree")
    osz = [(sp[i] + 2 * pd[i] - dl[i] * (ks[i] - 1) - 1) // st[i] + 1 for i in range(n)]
    if min(osz) < 1:
        raise ShapeError(f"ops.{name}", f"conv output would be empty ({osz}) for input {sp}, kernel {ks}")
    Kg, g, od, kd = K // groups, groups > 1, _SP_OUT[n], _SP_KER[n]
    o = _out(out, (B, K, *osz), x.dtype, name)
    dims = ((Dim("b", B),) + ((Dim("g", groups),) if g else ()) + (Dim("k", Kg),)
            + tuple(Dim(v, e) for v, e in zip(od, osz)) + (Dim("c", Cg, True),)
            + tuple(Dim(v, e, True) for v, e in zip(kd, ks)))
    kk = A("g") * Kg + A("k") if g else A("k")
    cc = A("g") * Cg + A("c") if g else A("c")
    xi = tuple(A(od[i]) * st[i] + A(kd[i]) * dl[i] + (-pd[i]) for i in range(n))
    ins = [Access(x, (A("b"), cc) + xi), Access(w, (kk, A("c")) + tuple(A(v) for v in kd))]
    if bias is not None:
        ins.append(Access(bias, (kk,)))
    attrs = {"stride": st, "padding": pd, "dilation": dl, "groups": groups, "padded": any(pd)}
    return Op(name, OpKind.conv1d if n == 1 else OpKind.conv3d, dims, tuple(ins),
              (Access(o, (A("b"), kk) + tuple(A(v) for v in od)),), attrs)


def conv_transpose(name: str, x: Tensor, w: Tensor, out: "str | Tensor", bias: Tensor | None = None,
                   stride: "int | Sequence[int]" = 1, padding: "int | Sequence[int]" = 0,
                   dilation: "int | Sequence[int]" = 1, groups: int = 1,
                   output_padding: "int | Sequence[int]" = 0) -> Op:
    """Transposed convolution over 1-3 spatial axes: each input point scatters a kernel window,
    O[b, g·Kg+k, p·s + r·d − pad, ..] += I[b, g·Cg+c, p, ..] · W[g·Cg+c, k, r, ..].

    The nest loops over the *input* positions (``p`` / ``p q`` / ``z p q``) and the kernel (``r..``): the output
    index is affine in both, so the kernel dims index the output and are not reduction dims (``c`` is). MACs are
    B·Cin·Kg·Π input·Π kernel, torch's flop-counter formula; points whose write falls in the cropped padding are
    computed and dropped, so they are outside the output footprint."""
    n, st, pd, dl = _conv_params(name, x, w, stride, padding, dilation, "conv_transpose")
    op_ = _ntuple(output_padding, n, "output_padding", name)
    (B, Cin, *sp), (Cw, Kg, *ks) = x.shape, w.shape
    if Cin != Cw or Cin % groups:
        raise ShapeError(f"ops.{name}",
                         f"conv_transpose channels: input {Cin}, weight {list(w.shape)}, groups {groups} disagree")
    osz = [(sp[i] - 1) * st[i] - 2 * pd[i] + dl[i] * (ks[i] - 1) + op_[i] + 1 for i in range(n)]
    if min(osz) < 1:
        raise ShapeError(f"ops.{name}", f"conv_transpose output would be empty ({osz}) for input {sp}")
    Cg, g, od, kd = Cin // groups, groups > 1, _SP_OUT[n], _SP_KER[n]
    o = _out(out, (B, Kg * groups, *osz), x.dtype, name)
    dims = ((Dim("b", B),) + ((Dim("g", groups),) if g else ()) + (Dim("k", Kg),)
            + tuple(Dim(v, e) for v, e in zip(od, sp)) + (Dim("c", Cg, True),)
            + tuple(Dim(v, e) for v, e in zip(kd, ks)))
    kk = A("g") * Kg + A("k") if g else A("k")
    cc = A("g") * Cg + A("c") if g else A("c")
    ins = [Access(x, (A("b"), cc) + tuple(A(v) for v in od)), Access(w, (cc, A("k")) + tuple(A(v) for v in kd))]
    if bias is not None:
        ins.append(Access(bias, (kk,)))
    oi = tuple(A(od[i]) * st[i] + A(kd[i]) * dl[i] + (-pd[i]) for i in range(n))
    attrs = {"stride": st, "padding": pd, "dilation": dl, "groups": groups, "output_padding": op_,
             "padded": any(pd)}
    return Op(name, OpKind.conv_transpose, dims, tuple(ins), (Access(o, (A("b"), kk) + oi),), attrs)


def _interp_axis(a: int, n: int, m: int, where: str) -> tuple[list[Dim], AffineExpr, AffineExpr]:
    """Dims, input index and output index of one axis of a linear interpolation from ``n`` to ``m`` points
    (align_corners=False): see :func:`interpolate`."""
    i, h, j, t = f"i{a}", f"h{a}", f"j{a}", f"t{a}"
    if m == n:
        return [Dim(i, n)], A(i), A(i)
    if m > n and m % n == 0 and (m // n) % 2 == 0:
        f = m // n
        dims = [Dim(i, n), Dim(h, 2)] + ([Dim(j, f // 2)] if f > 2 else []) + [Dim(t, 2, True)]
        oi = A(i) * f + A(h) * (f // 2) + (A(j) if f > 2 else 0)
        return dims, A(i) + A(h) + A(t) + (-1), oi
    if m < n and n % m == 0:
        f = n // m
        if f % 2:
            return [Dim(i, m)], A(i) * f + (f - 1) // 2, A(i)
        return [Dim(i, m), Dim(t, 2, True)], A(i) * f + A(t) + (f // 2 - 1), A(i)
    raise ShapeError(f"ops.{where}", f"linear interpolation {n} -> {m} along axis {a} has no exact loop nest "
                                     "(covered: same size, an even integer upsampling factor, an integer "
                                     "downsampling factor)", (n, m))


def interpolate(name: str, x: Tensor, out: "str | Tensor", size: Sequence[int], mode: str = "bilinear",
                align_corners: bool = False) -> Op:
    """Linear / bilinear / trilinear interpolation of the trailing 1 / 2 / 3 axes to ``size``: per output point,
    two taps per axis gathered with fixed weights (kind ``interpolate``, 2 FLOPs per tap).

    Affine, with the footprint equal to the inputs of non-zero weight, for align_corners=False (torch's default)
    when each axis keeps its size, is upsampled by an even integer factor f — output row f·i + (f/2)·h + j
    (h < 2, j < f/2) reads rows i + h + t − 1 (t < 2; rows −1 and H are the clamped border, weight 0) — or is
    downsampled by an integer factor f — output row o reads f·o + f/2 − 1 + t (f even) or f·o + (f−1)/2 (f odd).
    Other ratios, and align_corners=True on a resized axis, raise ShapeError."""
    nsp = {"linear": 1, "bilinear": 2, "trilinear": 3}.get(mode)
    if nsp is None or len(x.shape) < nsp or len(size) != nsp:
        raise ShapeError(f"ops.{name}", f"interpolate mode {mode!r} of {list(x.shape)} to {list(size)}", mode)
    lead = len(x.shape) - nsp
    if align_corners and tuple(size) != tuple(x.shape[lead:]):
        raise ShapeError(f"ops.{name}", "align_corners=True resamples on a grid with no exact loop nest", size)
    d = _dn(lead)
    dims, xi, oi = [Dim(v, e) for v, e in zip(d, x.shape)], [A(v) for v in d], [A(v) for v in d]
    for a in range(nsp):
        ds, i_in, i_out = _interp_axis(lead + a, x.shape[lead + a], int(size[a]), name)
        dims += ds
        xi.append(i_in)
        oi.append(i_out)
    o = _out(out, (*x.shape[:lead], *size), x.dtype, name)
    attrs = {"mode": mode, "align_corners": bool(align_corners), "size": tuple(int(s) for s in size),
             "padded": True}
    return Op(name, OpKind.interpolate, tuple(dims), (Access(x, tuple(xi)),), (Access(o, tuple(oi)),), attrs, 2)


def elementwise(name: str, xs: Sequence[Tensor], fn: str, out: "str | Tensor", flops_per_point: int = 1) -> Op:
    """Y = fn(X0, X1, ..) with numpy broadcasting over any number of operands (``where``: condition, a, b)."""
    shape = _broadcast([t.shape for t in xs], name)
    d = _dn(len(shape))
    o = _out(out, shape, xs[0].dtype, name)
    seen: dict[str, Access] = {}
    for t in xs:
        seen.setdefault(t.name, Access(t, _bcast_index(t.shape, d)))
    return Op(name, OpKind.elementwise, tuple(Dim(v, e) for v, e in zip(d, shape)), tuple(seen.values()),
              (Access(o, tuple(A(v) for v in d)),), {"fn": fn}, flops_per_point)


def rmsnorm(name: str, x: Tensor, out: "str | Tensor", weight: Tensor | None = None, normalized_ndim: int = 1) -> Op:
    """Y = X / √(mean(X²) + eps) · w over the last ``normalized_ndim`` axes: a ``layernorm``-kind nest (one
    reduction and one elementwise pass) with ``fn: rms_norm`` and ≈4 FLOPs per point (no mean subtraction)."""
    op = layernorm(name, x, out, weight, None, normalized_ndim)
    return Op(name, op.kind, op.dims, op.inputs, op.outputs, {**op.attr_dict, "fn": "rms_norm"}, 4)


def groupnorm(name: str, x: Tensor, out: "str | Tensor", groups: int, weight: Tensor | None = None,
              bias: Tensor | None = None) -> Op:
    """GroupNorm: statistics over each of ``groups`` channel groups and the spatial axes, affine per channel."""
    if len(x.shape) < 2 or x.shape[1] % groups:
        raise ShapeError(f"ops.{name}", f"group_norm: {groups} groups do not divide the channels of {list(x.shape)}")
    d = _dn(len(x.shape))
    o = _out(out, x.shape, x.dtype, name)
    idx = tuple(A(v) for v in d)
    ins = [Access(x, idx)] + [Access(t, (A("d1"),)) for t in (weight, bias) if t is not None]
    return Op(name, OpKind.layernorm, tuple(Dim(v, e) for v, e in zip(d, x.shape)), tuple(ins), (Access(o, idx),),
              {"fn": "group_norm", "groups": int(groups)}, 8)


def _heads(name: str, q: Tensor, k: Tensor, v: Tensor):
    """Batch dims of attention and the per-operand index of them; grouped-query heads on axis −3."""
    bq, bk, bv = q.shape[:-2], k.shape[:-2], v.shape[:-2]
    if k.shape[-1] != q.shape[-1] or k.shape[-2] != v.shape[-2] or bk != bv:
        raise ShapeError(f"ops.{name}", f"attention shapes q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)}")
    if not bq or not bk or len(bk) != len(bq) or bq[-1] == bk[-1]:
        batch = _broadcast([bq, bk], name)
        bd = [f"b{i}" for i in range(len(batch))]
        dims = [Dim(x, e) for x, e in zip(bd, batch)]
        return dims, _bcast_index(bq, bd), _bcast_index(bk, bd), tuple(A(x) for x in bd), batch
    Hq, Hk = bq[-1], bk[-1]
    if Hq % Hk:
        raise ShapeError(f"ops.{name}", f"{Hq} query heads are not a multiple of {Hk} key/value heads")
    G, lead = Hq // Hk, _broadcast([bq[:-1], bk[:-1]], name)
    ld = [f"b{i}" for i in range(len(lead))]
    hk, g = f"b{len(lead)}", f"b{len(lead) + 1}"
    dims = [Dim(x, e) for x, e in zip(ld, lead)] + [Dim(hk, Hk), Dim(g, G)]
    qh = A(hk) * G + A(g)
    return (dims, _bcast_index(bq[:-1], ld) + (qh,), _bcast_index(bk[:-1], ld) + (A(hk),),
            tuple(A(x) for x in ld) + (qh,), (*lead, Hq))


def attention(name: str, q: Tensor, k: Tensor, v: Tensor, out: "str | Tensor", mask: Tensor | None = None,
              scale: float | None = None, causal_mask: Tensor | None = None) -> list[Op]:
    """Scaled dot-product attention as its math backend computes it, as the ops chain finders look for:
    ``<name>.scores`` = Q·Kᵀ (batch_matmul reading K[.., n, k]), ``.scaled`` (mul_scalar), ``.causal`` /
    ``.masked`` (add; masked_fill for a boolean mask, True = attend), ``.probs`` (softmax), then ·V (``name``).
    Grouped-query attention (fewer key/value heads on axis −3): query head b·G + g reads key/value head b, in
    place, as torch's ``enable_gqa``."""
    dims, qi, ki, si, batch = _heads(name, q, k, v)
    L, S, E, Ev = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    s = Tensor(f"{name}.scores", (*batch, L, S), q.dtype)
    qk = Op(s.name, OpKind.batch_matmul, tuple(dims) + (Dim("m", L), Dim("n", S), Dim("k", E, True)),
            (Access(q, qi + (A("m"), A("k"))), Access(k, ki + (A("n"), A("k")))), (Access(s, si + (A("m"), A("n"))),))
    sc = unary(f"{name}.scaled", s, "mul_scalar", f"{name}.scaled")
    sc = Op(sc.name, sc.kind, sc.dims, sc.inputs, sc.outputs,
            {"fn": "mul_scalar", "scalar": float(scale) if scale is not None else 1.0 / math.sqrt(E)}, 1)
    ops = [qk, sc]
    for m, suffix in ((causal_mask, "causal"), (mask, "masked")):
        if m is not None:
            fn = "masked_fill" if m.dtype == DType.bool else "add"
            ops.append(binary(f"{name}.{suffix}", ops[-1].outputs[0].tensor, m, fn, f"{name}.{suffix}"))
    p = softmax(f"{name}.probs", ops[-1].outputs[0].tensor, f"{name}.probs", -1)
    o = _out(out, (*batch, L, Ev), q.dtype, name)
    pt = p.outputs[0].tensor
    pv = Op(name, OpKind.batch_matmul, tuple(dims) + (Dim("m", L), Dim("n", Ev), Dim("k", S, True)),
            (Access(pt, si + (A("m"), A("k"))), Access(v, ki + (A("k"), A("n")))), (Access(o, si + (A("m"), A("n"))),))
    return ops + [p, pv]


def opaque(name: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor], target: str, location: str = "") -> Op:
    """An operator no frontend translates, kept so the rest of a graph imports: it reads and writes whole tensors
    (one flat loop per tensor; inputs' loops are reductions) and counts no FLOPs. ``target`` names the operator."""
    ins: dict[str, Tensor] = {t.name: t for t in inputs}
    dims = [Dim(f"i{j}", t.numel, True) for j, t in enumerate(ins.values())]
    dims += [Dim(f"o{j}", t.numel) for j, t in enumerate(outputs)]
    return Op(name, OpKind.opaque, tuple(dims),
              tuple(Access(t, (A(f"i{j}"),), flat=True) for j, t in enumerate(ins.values())),
              tuple(Access(t, (A(f"o{j}"),), flat=True) for j, t in enumerate(outputs)),
              {"target": target, **({"location": location} if location else {})}, 0)
