"""Frontends: build a :class:`shared_ir.Graph` from a PyTorch module (torch.fx) or an ONNX model.

``from_torch`` and ``from_onnx`` import torch / onnx only when called, so ``import shared_ir.frontends`` stays light.
This module also holds the data-movement op builders both frontends share (strided slices, broadcasts, nearest
upsampling): each is a ``view``-kind loop nest over the output with affine input indices, so footprints stay exact.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

from ..affine import AffineExpr
from ..errors import ShapeError
from ..op import Access, Dim, Op, OpKind, Tensor

A = AffineExpr.dim
C = AffineExpr.constant


def from_torch(module: Any, example_inputs: Any, name: str | None = None, **kw: Any):
    """Trace ``module`` with torch.fx + shape propagation into a Graph (see :mod:`.torch_fx`)."""
    from .torch_fx import from_torch as _f

    return _f(module, example_inputs, name=name, **kw)


def from_onnx(path_or_model: Any, name: str | None = None, **kw: Any):
    """Translate an ONNX file or ``onnx.ModelProto`` into a Graph (see :mod:`.onnx_frontend`)."""
    from .onnx_frontend import from_onnx as _f

    return _f(path_or_model, name=name, **kw)


# --- shared data-movement builders -----------------------------------------------------------------------------
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
            raise ShapeError(f"ops.{name}", f"nearest upsampling needs integer factors, got {list(x.shape)} -> {list(out.shape)}")
        f = b // a
        factors.append(f)
        if f > 1:
            dims.append(Dim(f"f{i}", f))
            oidx.append(A(d[i]) * f + A(f"f{i}"))
        else:
            oidx.append(A(d[i]))
    return Op(name, OpKind.view, tuple(dims), (Access(x, tuple(A(v) for v in d)),), (Access(out, tuple(oidx)),),
              {"fn": "upsample_nearest", "scale": tuple(factors)}, 0)


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def user_frame(stack_trace: str | None) -> str | None:
    """``file:line in fn`` of the first frame of a traceback string outside torch's own sources."""
    if not stack_trace:
        return None
    for m in _FRAME.finditer(stack_trace):
        f = m.group(1)
        if "/torch/" not in f and "/torch\\" not in f:
            return f"{f}:{m.group(2)} in {m.group(3)}"
    return None


__all__ = ["from_torch", "from_onnx", "strided_view", "slice_op", "select_op", "expand_op", "upsample_nearest_op"]
