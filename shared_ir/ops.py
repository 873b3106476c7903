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
