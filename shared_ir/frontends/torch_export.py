"""PyTorch frontend on ``torch.export``: capture, lower to core ATen, translate a finite list of ATen operators.

Pipeline: ``torch.export.export`` (non-strict tracing: the graph capture PyTorch maintains for Hugging Face-style
models that torch.fx symbolic tracing cannot follow) → ``ExportedProgram.run_decompositions`` with PyTorch's default
table, to the core ATen operator set, except the composites in :data:`KEPT_WHOLE`, whose structure is what the
packages model (a Linear's weight, attention's GEMM–softmax–GEMM chain, a norm or a resize as one op rather than
index arithmetic; decomposing SDPA also breaks views in some exported HF graphs) → one translator per ATen operator,
building ops with :mod:`shared_ir.ops`.

Coverage is exactly the keys of :data:`ATEN_OPS` (``aten.<name>.<overload>``):

- GEMMs, convs, attention: ``linear``, ``addmm``, ``mm``, ``bmm``, ``baddbmm``, ``matmul``; ``convolution`` (1-, 2-
  and 3-d, stride, dilation, groups, padding, transposed with output padding); ``scaled_dot_product_attention``
  (q·kᵀ, scale, masks, softmax, ·v; grouped-query heads read in place; is_causal adds a constant mask).
- Norms and softmax: ``native_layer_norm``, ``layer_norm``, ``rms_norm``, ``group_norm``, ``native_group_norm``,
  ``_native_batch_norm_legit_no_training``, ``_softmax``, ``_log_softmax``, ``softmax``.
- Elementwise: the unary functions of :data:`UNARY` (relu, gelu, silu, tanh, exp, rsqrt, ...), ``clamp``,
  ``hardtanh``, ``leaky_relu``, ``elu``, ``pow`` (three overloads), ``_to_copy`` (a cast when the dtype changes),
  the binary functions of :data:`BINARY` (add, sub, mul, div, comparisons, logical / bitwise, maximum, ...) on
  tensors or a scalar, ``rsub``, ``where``, ``masked_fill``, ``tril`` / ``triu``, ``cumsum`` (a scan that reads each
  element once: an elementwise nest with ``axis``).
- Reductions: ``sum``, ``mean``, ``amax``, ``amin``, ``max.dim``, ``min.dim``, ``argmax``, ``argmin``, ``any``,
  ``all``, ``prod``, ``var``.
- Data movement: ``view``, ``_unsafe_view``, ``reshape``, ``squeeze``, ``unsqueeze``, ``flatten``, ``permute``,
  ``transpose``, ``t``, ``expand``, ``slice``, ``select``, ``cat``, ``split``, ``split_with_sizes``, ``unbind``,
  ``constant_pad_nd``, ``repeat``, ``flip``; gathers ``embedding``, ``index.Tensor``, ``index_select``, ``gather``.
- Pooling and resampling: ``max_pool2d_with_indices``, ``avg_pool2d``, ``_adaptive_avg_pool2d``,
  ``upsample_nearest{1,2,3}d`` (integer factors), ``upsample_linear1d`` / ``upsample_bilinear2d`` /
  ``upsample_trilinear3d`` (see :func:`shared_ir.ops.interpolate` for the exact ratios).
- No op: aliases (``clone``, ``alias``, ``detach``, ``lift_fresh_copy``, ``dropout`` in eval), asserts, and every
  node whose result holds no tensor (sizes, symbolic-int arithmetic): evaluated, then read by the ops that use it.
- Tensor creation (``arange``, ``full``, ``zeros``, ``ones``, ``empty``, ``scalar_tensor``, ``*_like``, ``new_*``):
  a constant ``weight`` tensor ``const.<node>``, as in the torch.fx frontend.

Conventions: op and activation names are the exported node names (``linear_3``, ``convolution``); parameters,
buffers and lifted constants keep their qualified name (``encoder.layer.0.attention.self.query.weight``; a tied
parameter is one tensor). User inputs are ``input`` tensors (those no op reads are dropped), what the module returns
``output`` tensors (flattened: a Hugging Face ``ModelOutput`` gives its tensor fields).

Symbolic dims: pass ``dynamic_shapes`` (``torch.export.Dim``) and the program is exported once with symbolic batch /
sequence sizes; the IR is instantiated at the example inputs' sizes, or at ``sizes={"<Dim name>": n}``.

Unsupported operators are collected with the innermost user source line of each (``node.meta["stack_trace"]``), the
module path and the node, and raised together as :class:`shared_ir.UnsupportedOpError`; with ``strict=False`` each
becomes an ``opaque`` op reading and writing its whole tensors (:func:`shared_ir.ops.opaque`) and the rest imports.
When ``torch.export`` itself fails, the torch.fx frontend is tried (``fx_fallback``).
"""
from __future__ import annotations

import math
import operator
import os
import re
import warnings
from typing import Any, Callable, Mapping

from .. import ops as O
from ..affine import AffineExpr, IndirectIndex
from ..dtypes import DType
from ..errors import IRError, UnsupportedOpError, ValidationError
from ..graph import Graph
from ..op import Access, Dim, Op, OpKind, Tensor, TensorRole
from ..ops import expand_op, resize_nearest_op, select_op, slice_op, strided_view
from .torch_fx import (
    UNARY_FLOPS,
    _adaptive,
    _dtype,
    _flatten,
    _Lazy,
    _OperandsBase,
    _plain_scalar,
    _pool,
    _retag,
    _Unsupported,
)

A = AffineExpr.dim
KEPT_WHOLE = ("aten.linear.default", "aten.matmul.default", "aten.scaled_dot_product_attention.default",
              "aten.rms_norm.default", "aten.group_norm.default") + tuple(
    f"aten.upsample_{k}.{ov}" for k in ("nearest1d", "nearest2d", "nearest3d", "linear1d", "bilinear2d",
                                        "trilinear3d") for ov in ("vec", "default"))
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def export_program(module: Any, example_inputs: Any, dynamic_shapes: Any = None):
    """``torch.export.export`` (non-strict) then ``run_decompositions`` to core ATen, keeping :data:`KEPT_WHOLE`."""
    import torch

    args, kwargs = _split_inputs(example_inputs)
    ep = torch.export.export(module, args, kwargs, dynamic_shapes=dynamic_shapes, strict=False)
    table = torch.export.default_decompositions()
    for name in KEPT_WHOLE:
        _, op, overload = name.split(".")
        table.pop(getattr(getattr(torch.ops.aten, op), overload), None)
    return ep.run_decompositions(table)


def from_torch_export(module: Any, example_inputs: Any, name: str | None = None, dynamic_shapes: Any = None,
                      strict: bool = True, *, sizes: Mapping[str, int] | None = None,
                      fx_fallback: bool = True) -> Graph:
    """Export ``module`` on ``example_inputs`` (a tensor, a tuple of positional tensors, or a dict of keyword
    tensors) and translate the core-ATen program into a :class:`Graph` (see the module docstring)."""
    was_training = module.training
    module.eval()
    try:
        try:
            ep = export_program(module, example_inputs, dynamic_shapes)
        except Exception as e:  # noqa: BLE001 - data-dependent control flow, unregistered output types, ...
            return _fallback(module, example_inputs, name, e, fx_fallback and not dynamic_shapes and not sizes)
        return graph_from_program(ep, module, example_inputs, name, dynamic_shapes, strict, sizes=sizes)
    finally:
        module.train(was_training)


def graph_from_program(ep: Any, module: Any, example_inputs: Any, name: str | None = None,
                       dynamic_shapes: Any = None, strict: bool = True, *,
                       sizes: Mapping[str, int] | None = None) -> Graph:
    """The :class:`Graph` of an already exported (and decomposed, :func:`export_program`) program: for callers
    that also rewrite ``ep.module()``, whose node names are the graph's op names."""
    subs = _symbol_values(ep, module, example_inputs, dynamic_shapes, sizes)
    return _Translator(ep, subs, strict, _first_names(module)).run(name or type(module).__name__)


def _fallback(module, example_inputs, name, err: Exception, use_fx: bool) -> Graph:
    import traceback

    here = os.path.dirname(os.path.abspath(__file__))
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "/torch/" not in f.filename
              and not f.filename.startswith("<string") and not os.path.abspath(f.filename).startswith(here)]
    where = f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else type(module).__name__
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    item = (f"torch.export ({type(err).__name__}: {first})", where)
    args, kwargs = _split_inputs(example_inputs)
    if not use_fx or kwargs:
        raise UnsupportedOpError([item]) from err
    from .torch_fx import from_torch

    try:
        return from_torch(module, args, name=name)
    except UnsupportedOpError as fx_err:
        raise UnsupportedOpError([item] + fx_err.items) from err


def _first_names(module: Any) -> dict[str, str]:
    """Qualified name → the first name of the same parameter / buffer (tied weights are one tensor, named as by
    the torch.fx frontend)."""
    first: dict[int, str] = {}
    out: dict[str, str] = {}
    for qn, p in list(module.named_parameters(remove_duplicate=False)) + list(
            module.named_buffers(remove_duplicate=False)):
        out[qn] = first.setdefault(id(p), qn)
    return out


def _split_inputs(example_inputs: Any) -> tuple[tuple, dict]:
    import torch

    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,), {}
    if isinstance(example_inputs, Mapping):
        return (), dict(example_inputs)
    return tuple(example_inputs), {}


# --- symbolic sizes -------------------------------------------------------------------------------------------------
def _user_placeholders(ep) -> list:
    user = set(ep.graph_signature.user_inputs)
    return [n for n in ep.graph.nodes if n.op == "placeholder" and n.name in user]


def _dim_specs(module, args: tuple, kwargs: dict, dynamic_shapes: Any) -> list:
    """One ``{axis: Dim}`` (or None) per user input, in the order export flattens them."""
    import inspect

    if dynamic_shapes is None:
        return [None] * (len(args) + len(kwargs))
    if isinstance(dynamic_shapes, Mapping):
        params = list(inspect.signature(module.forward).parameters)
        return [dynamic_shapes.get(p) for p in params[:len(args)]] + [dynamic_shapes.get(k) for k in kwargs]
    return list(dynamic_shapes) + [None] * len(kwargs)


def _symbol_values(ep, module, example_inputs, dynamic_shapes, sizes) -> dict:
    """sympy symbol → integer for every symbolic input size: the example's size, or ``sizes[<Dim name>]``."""
    import sympy
    import torch

    args, kwargs = _split_inputs(example_inputs)
    leaves = list(args) + list(kwargs.values())
    specs = _dim_specs(module, args, kwargs, dynamic_shapes)
    subs, named = {}, {}
    for ph, x, spec in zip(_user_placeholders(ep), leaves, specs):
        val = ph.meta.get("val")
        if not isinstance(val, torch.Tensor) or not isinstance(x, torch.Tensor):
            continue
        axes = dict(enumerate(spec)) if isinstance(spec, (list, tuple)) else dict(spec or {})
        for ax, s in enumerate(val.shape):
            if isinstance(s, torch.SymInt) and s.node.expr.is_Symbol:
                subs[s.node.expr] = sympy.Integer(int(x.shape[ax]))
                d = axes.get(ax)
                if d is not None and hasattr(d, "__name__"):
                    named[d.__name__] = s.node.expr
    for k, v in (sizes or {}).items():
        if k not in named:
            raise ValidationError(f"sizes.{k}", f"not a dynamic dim of the export; dims are {sorted(named)}", k)
        rng = ep.range_constraints.get(named[k])
        lo, hi = (int(rng.lower), rng.upper) if rng is not None else (0, math.inf)
        if not (isinstance(v, int) and lo <= v <= hi):
            raise ValidationError(f"sizes.{k}", f"must be an integer in [{lo}, {hi}], got {v!r}", v)
        subs[named[k]] = sympy.Integer(v)
    return subs


def _user_frame(stack_trace: str | None) -> str | None:
    """``file:line in fn`` of the innermost frame outside torch's sources: the line that called the operator."""
    hits = [m for m in _FRAME.finditer(stack_trace or "") if "/torch/" not in m.group(1)
            and "\\torch\\" not in m.group(1)]
    return f"{hits[-1].group(1)}:{hits[-1].group(2)} in {hits[-1].group(3)}" if hits else None


# --- the translator -------------------------------------------------------------------------------------------------
class _Translator(_OperandsBase):
    def __init__(self, ep, subs: dict, strict: bool, first_names: Mapping[str, str]):
        import torch

        self.torch, self.ep, self.subs, self.strict = torch, ep, subs, strict
        sig = ep.graph_signature
        self.fqn = {k: first_names.get(v, v) for k, v in {**sig.inputs_to_parameters, **sig.inputs_to_buffers,
                                                          **sig.inputs_to_lifted_tensor_constants}.items()}
        self.user_inputs = set(sig.user_inputs)
        self.ops: list[Op] = []
        self.env: dict[Any, Any] = {}
        self.inputs: list[str] = []
        self.weights: dict[str, Tensor] = {}
        self.unsupported: list[tuple[str, str]] = []

    # --- values -----------------------------------------------------------------------------------------------------
    def conc(self, v: Any) -> Any:
        """A concrete python value for a (possibly symbolic) int / float / bool."""
        t = self.torch
        if isinstance(v, (t.SymInt, t.SymFloat, t.SymBool)):
            e = v.node.expr.xreplace(self.subs)
            if getattr(e, "free_symbols", None):
                raise _Unsupported(f"size {v} depends on data")
            return int(e) if isinstance(v, t.SymInt) else (float(e) if isinstance(v, t.SymFloat) else bool(e))
        if isinstance(v, (list, tuple)):
            return type(v)(self.conc(x) for x in v)
        return v

    def shape(self, fake: Any) -> tuple[int, ...]:
        shape = tuple(self.conc(s) for s in fake.shape)
        if any(s < 1 for s in shape):
            raise _Unsupported(f"zero-size tensor {list(shape)}")
        return shape

    def new(self, node: Any, suffix: str | None = None, shape: Any = None, dtype: Any = None) -> Tensor:
        """The tensor a node produces (its first tensor result), shaped by its fake value unless given."""
        val = node.meta.get("val")
        if isinstance(val, (list, tuple)):
            val = next((v for v in val if isinstance(v, self.torch.Tensor)), None)
        if not isinstance(val, self.torch.Tensor) and (shape is None or dtype is None):
            raise _Unsupported("result is not a tensor")
        return Tensor(node.name if suffix is None else f"{node.name}.{suffix}",
                      tuple(shape) if shape is not None else self.shape(val),
                      dtype if dtype is not None else _dtype(val.dtype))

    def _leaf(self, a: Any) -> Any:
        return self.conc(a)

    # --- main loop --------------------------------------------------------------------------------------------------
    def run(self, name: str) -> Graph:
        out_node = None
        for node in self.ep.graph.nodes:
            if node.op == "output":
                out_node = node
                continue
            try:
                self.env[node] = self.translate(node)
            except _Unsupported as e:
                self.env[node] = self.failed(node, str(e))
            except (IRError, ValueError, TypeError, IndexError, KeyError, AttributeError) as e:
                self.env[node] = self.failed(node, f"{type(e).__name__}: {e}")
        if self.unsupported and self.strict:
            raise UnsupportedOpError(self.unsupported)
        if self.unsupported:
            warnings.warn(f"{len(self.unsupported)} operator(s) imported as opaque ops: "
                          + "; ".join(f"{t} at {loc}" for t, loc in self.unsupported), stacklevel=3)
        kinds = {s.arg.name: s.kind.name for s in self.ep.graph_signature.output_specs if hasattr(s.arg, "name")}
        outs = [self.T(self.env[n]) for n in _flatten(list(out_node.args[0]))
                if hasattr(n, "name") and kinds.get(n.name) == "USER_OUTPUT"
                and isinstance(self.env.get(n), (Tensor, _Lazy))]
        return self.finish(outs, name)

    def finish(self, outs: list[Tensor], name: str) -> Graph:
        produced = {t for o in self.ops for t in o.output_names}
        retag, names = {}, []
        for i, t in enumerate(outs):
            if t.name in names:
                continue
            if t.name in produced:
                retag[t.name] = t.with_role(TensorRole.output)
                names.append(t.name)
            else:  # an input or weight returned as is: copy it so that an op produces the output
                o = Tensor(f"output_{i}", t.shape, t.dtype, TensorRole.output)
                self.ops.append(O.unary(o.name, t, "copy", o, 0))
                names.append(o.name)
        used = {a.tensor.name for o in self.ops for a in o.inputs}
        return Graph([_retag(op, retag) for op in self.ops], inputs=[n for n in self.inputs if n in used],
                     outputs=names, name=name)

    def failed(self, node: Any, why: str) -> Any:
        """Record an untranslatable node; under strict=False it becomes an opaque op so the rest imports."""
        target = str(node.target) if node.op == "call_function" else node.op
        loc = self.location(node)
        self.unsupported.append((f"{target} ({why})" if why else target, loc))
        val = node.meta.get("val")
        vals = list(val) if isinstance(val, (list, tuple)) else [val]
        outs = [Tensor(node.name if len(vals) == 1 else f"{node.name}.{i}", self.safe_shape(v), _dtype(v.dtype))
                if isinstance(v, self.torch.Tensor) else None for i, v in enumerate(vals)]
        if self.strict or not any(outs):
            return outs[0] if len(outs) == 1 else tuple(outs)
        ins = [self.T(v) for v in _flatten(list(self.val(node.args)) + list(self.val(node.kwargs).values()))
               if isinstance(v, (Tensor, _Lazy))]
        self.ops.append(O.opaque(node.name, ins, [t for t in outs if t is not None], target, loc))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def safe_shape(self, fake: Any) -> tuple[int, ...]:
        """A failed node's shape for the stand-in tensor, so that later nodes are still checked."""
        try:
            return tuple(max(1, self.conc(s)) for s in fake.shape)
        except _Unsupported:
            return (1,) * fake.dim()

    def location(self, node: Any) -> str:
        stack = node.meta.get("nn_module_stack") or {}
        path = list(stack.values())[-1][0] if stack else None
        parts = [_user_frame(node.meta.get("stack_trace")), f"module {path}" if path else None, f"node {node.name}"]
        return ", ".join(p for p in parts if p)

    def translate(self, node: Any) -> Any:
        if node.op == "placeholder":
            return self.placeholder(node)
        if node.op != "call_function":
            raise _Unsupported(f"fx op {node.op}")
        if node.target is operator.getitem:
            x, i = self.val(node.args)
            return x[i]
        h = ATEN_OPS.get(str(node.target))
        if h is None:
            val = node.meta.get("val")
            if not any(isinstance(v, self.torch.Tensor) for v in _flatten([val])):
                return self.conc(val)  # shape arithmetic or an assert: no op
            raise _Unsupported("no translator")
        return h(self, node, list(self.val(node.args)), self.val(dict(node.kwargs)))

    def placeholder(self, node: Any) -> Any:
        val = node.meta.get("val")
        if not isinstance(val, self.torch.Tensor):
            return self.conc(val)
        shape = self.shape(val) if val.dim() else ()
        if node.name in self.user_inputs:
            t = Tensor(node.name, shape, _dtype(val.dtype), TensorRole.input)
            self.inputs.append(t.name)
            return t
        return self.const(self.fqn.get(node.name, node.name), shape, _dtype(val.dtype))

    # --- lowering ---------------------------------------------------------------------------------------------------
    def unary(self, node, x, fn, out=None, **attrs) -> Tensor:
        x = self.T(x)
        out = out or self.new(node)
        op = O.unary(out.name, x, fn, out, UNARY_FLOPS.get(fn, 1))
        return self.add(_attrs(op, **attrs) if attrs else op)

    def binary(self, node, a, b, fn, out=None) -> Tensor:
        """Tensor ∘ tensor → binary op; tensor ∘ scalar → unary ``<fn>_scalar`` (``r<fn>_scalar`` with the scalar on
        the left of a non-commutative op)."""
        ta, tb = isinstance(a, (Tensor, _Lazy)), isinstance(b, (Tensor, _Lazy))
        if ta and tb:
            out = out or self.new(node)
            return self.add(O.binary(out.name, self.T(a), self.T(b), fn, out))
        if ta or tb:
            x, s = (a, b) if ta else (b, a)
            f = f"{fn}_scalar" if ta or fn in ("add", "mul") else f"r{fn}_scalar"
            return self.unary(node, x, f, out=out, scalar=_plain_scalar(s))
        raise _Unsupported("no tensor operand")

    def view_to(self, node, x) -> Tensor:
        x = self.T(x)
        out = self.new(node)
        if out.shape == x.shape:
            return x
        return self.add(O.view(out.name, x, out.shape, out))

    def sliced(self, name, x, axis, start, length, step=1) -> Tensor:
        shape = list(x.shape)
        shape[axis % len(shape)] = length
        return self.add(slice_op(name, x, Tensor(name, tuple(shape), x.dtype), axis, start, step))

    def op(self, node, fn: Callable[[Tensor], Op]) -> Tensor:
        """Build one op writing the node's tensor."""
        return self.add(fn(self.new(node)))


def _attrs(op: Op, **kw) -> Op:
    return Op(op.name, op.kind, op.dims, op.inputs, op.outputs, {**op.attr_dict, **kw}, op.flops_per_point)


def _arg(a: list, kw: dict, i: int, name: str, default: Any = None) -> Any:
    if name in kw:
        return kw[name]
    return a[i] if len(a) > i else default


def _is_t(v: Any) -> bool:
    return isinstance(v, (Tensor, _Lazy))


# --- GEMMs, convolutions, attention ---------------------------------------------------------------------------------
def _with_bias(op: Op, bias: Tensor, dims: list[str]) -> Op:
    """``op`` also reading ``bias`` broadcast over its output ``dims`` (addmm / baddbmm)."""
    acc = Access(bias, O._bcast_index(bias.shape, dims))
    return Op(op.name, op.kind, op.dims, op.inputs + (acc,), op.outputs, op.attrs, op.flops_per_point)


def _a_linear(tr, node, a, kw):
    b = _arg(a, kw, 2, "bias")
    return tr.op(node, lambda o: O.linear(o.name, tr.T(a[0]), tr.T(a[1]), o, tr.T(b) if b is not None else None))


def _a_mm(tr, node, a, kw):
    return tr.op(node, lambda o: O.matmul(o.name, tr.T(a[0]), tr.T(a[1]), o))


def _a_matmul(tr, node, a, kw):
    x, y = tr.T(a[0]), tr.T(a[1])
    out = tr.new(node)
    if len(x.shape) >= 2 and len(y.shape) >= 2:
        return tr.add(O.matmul(out.name, x, y, out))
    if len(x.shape) == 1:
        x = tr.add(O.view(f"{node.name}.lhs", x, (1, x.shape[0]), f"{node.name}.lhs"))
    if len(y.shape) == 1:
        y = tr.add(O.view(f"{node.name}.rhs", y, (y.shape[0], 1), f"{node.name}.rhs"))
    t = tr.add(O.matmul(f"{node.name}.mm", x, y, f"{node.name}.mm"))
    return tr.add(O.view(out.name, t, out.shape, out))


def _a_addmm(tr, node, a, kw):
    bias, x, y = (tr.T(v) for v in a[:3])
    beta, alpha = _arg(a, kw, 3, "beta", 1), _arg(a, kw, 4, "alpha", 1)
    out = tr.new(node)
    op = _with_bias(O.matmul(out.name, x, y, out), bias, ["m", "n"])
    return tr.add(_attrs(op, beta=beta, alpha=alpha) if (beta, alpha) != (1, 1) else op)


def _a_baddbmm(tr, node, a, kw):
    bias, x, y = (tr.T(v) for v in a[:3])
    out = tr.new(node)
    op = O.batch_matmul(out.name, x, y, out)
    op = _with_bias(op, bias, [d.name for d in op.dims if not d.reduction])
    beta, alpha = _arg(a, kw, 3, "beta", 1), _arg(a, kw, 4, "alpha", 1)
    return tr.add(_attrs(op, beta=beta, alpha=alpha) if (beta, alpha) != (1, 1) else op)


def _a_convolution(tr, node, a, kw):
    x, w = tr.T(a[0]), tr.T(a[1])
    b = tr.T(a[2]) if a[2] is not None else None
    stride, padding, dilation, transposed, out_pad, groups = a[3:9]
    out = tr.new(node)
    if transposed:
        return tr.add(O.conv_transpose(out.name, x, w, out, b, stride, padding, dilation, groups, out_pad))
    return tr.add(O.conv(out.name, x, w, out, b, stride, padding, dilation, groups))


def _a_sdpa(tr, node, a, kw):
    q, k, v = (tr.T(x) for x in a[:3])
    mask = _arg(a, kw, 3, "attn_mask")
    causal, scale = bool(_arg(a, kw, 5, "is_causal", False)), _arg(a, kw, 6, "scale")
    cm = tr.const(f"const.{node.name}.causal_mask", (q.shape[-2], k.shape[-2]), DType.bool) if causal else None
    out = tr.new(node)
    for op in O.attention(out.name, q, k, v, out, tr.T(mask) if mask is not None else None, scale, cm):
        tr.add(op)
    return out


# --- norms and softmax ------------------------------------------------------------------------------------------------
def _opt(tr, v):
    return tr.T(v) if v is not None else None


def _a_layer_norm(tr, node, a, kw):
    x, ns = tr.T(a[0]), a[1]
    w, b = _opt(tr, _arg(a, kw, 2, "weight")), _opt(tr, _arg(a, kw, 3, "bias"))
    t = tr.op(node, lambda o: O.layernorm(o.name, x, o, w, b, normalized_ndim=len(ns)))
    return (t, None, None) if "native" in str(node.target) else t


def _a_rms_norm(tr, node, a, kw):
    x, ns, w = tr.T(a[0]), a[1], _opt(tr, _arg(a, kw, 2, "weight"))
    return tr.op(node, lambda o: O.rmsnorm(o.name, x, o, w, normalized_ndim=len(ns)))


def _a_group_norm(tr, node, a, kw):
    if "native" in str(node.target):  # native_group_norm(x, w, b, N, C, HxW, group, eps) -> (out, mean, rstd)
        x, w, b, groups = tr.T(a[0]), _opt(tr, a[1]), _opt(tr, a[2]), a[6]
        return tr.op(node, lambda o: O.groupnorm(o.name, x, o, groups, w, b)), None, None
    x, groups, w, b = tr.T(a[0]), a[1], _opt(tr, _arg(a, kw, 2, "weight")), _opt(tr, _arg(a, kw, 3, "bias"))
    return tr.op(node, lambda o: O.groupnorm(o.name, x, o, groups, w, b))


def _a_batch_norm(tr, node, a, kw):
    x = tr.T(a[0])
    C = x.shape[1]
    scale = _opt(tr, a[1]) or tr.const(f"const.{node.name}.scale", (C,))
    shift = _opt(tr, a[2]) or tr.const(f"const.{node.name}.shift", (C,))
    t = tr.op(node, lambda o: _attrs(O.affine_channel(o.name, x, scale, shift, o, axis=1), eps=float(a[6])))
    return t, None, None


def _a_softmax(tr, node, a, kw):
    x, dim = tr.T(a[0]), a[1]
    op = tr.op(node, lambda o: O.softmax(o.name, x, o, axis=dim))
    if "log_softmax" in str(node.target):
        tr.ops[-1] = _attrs(tr.ops[-1], log=True)
    return op


# --- elementwise ------------------------------------------------------------------------------------------------------
UNARY = ("relu", "gelu", "silu", "sigmoid", "tanh", "hardswish", "hardsigmoid", "mish", "softplus", "exp", "exp2",
         "expm1", "log", "log1p", "log2", "sqrt", "rsqrt", "neg", "abs", "erf", "reciprocal", "sin", "cos", "sign",
         "floor", "ceil", "round", "trunc", "logical_not", "bitwise_not", "isnan", "isinf", "sgn", "square")
BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "maximum": "max", "minimum": "min",
          "fmod": "fmod", "remainder": "mod", "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
          "bitwise_and": "and", "bitwise_or": "or", "bitwise_xor": "xor", "logical_and": "and", "logical_or": "or",
          "logical_xor": "xor", "atan2": "atan2"}


def _unary(fn):
    def h(tr, node, a, kw):
        attrs = {}
        if fn == "gelu" and kw.get("approximate", "none") != "none":
            attrs["approximate"] = kw["approximate"]
        return tr.unary(node, a[0], fn, **attrs)
    return h


def _binary(fn):
    def h(tr, node, a, kw):
        x, y = a[0], a[1]
        alpha = _arg(a, kw, 2, "alpha", 1)
        if alpha != 1 and fn in ("add", "sub"):
            y = tr.unary(node, y, "mul_scalar", out=tr.new(node, "alpha", tr.T(y).shape, tr.T(y).dtype),
                         scalar=alpha) if _is_t(y) else y * alpha
        if kw.get("rounding_mode"):
            return _rounded(tr, node, x, y, kw["rounding_mode"])
        return tr.binary(node, x, y, fn)
    return h


def _rounded(tr, node, x, y, mode):
    t = tr.binary(node, x, y, "div")
    tr.ops[-1] = _attrs(tr.ops[-1], rounding_mode=mode)
    return t


def _a_rsub(tr, node, a, kw):
    x, s, alpha = a[0], a[1], _arg(a, kw, 2, "alpha", 1)
    if _is_t(s):
        return tr.binary(node, s, x, "sub")
    return tr.unary(node, x, "rsub_scalar", scalar=_plain_scalar(s), **({"alpha": alpha} if alpha != 1 else {}))


def _a_pow(tr, node, a, kw):
    return tr.binary(node, a[0], a[1], "pow")


def _a_where(tr, node, a, kw):
    ts = [tr.T(v) for v in a[:3] if _is_t(v)]
    scalars = {f"scalar{i}": _plain_scalar(v) for i, v in enumerate(a[:3]) if not _is_t(v)}
    out = tr.new(node)
    return tr.add(_attrs(O.elementwise(out.name, ts, "where", out), **scalars) if scalars else
                  O.elementwise(out.name, ts, "where", out))


def _a_masked_fill(tr, node, a, kw):
    x, mask, value = tr.T(a[0]), tr.T(a[1]), a[2]
    out = tr.new(node)
    if _is_t(value):
        return tr.add(O.elementwise(out.name, [x, mask, tr.T(value)], "masked_fill", out))
    return tr.add(_attrs(O.binary(out.name, x, mask, "masked_fill", out), scalar=_plain_scalar(value)))


def _a_clamp(tr, node, a, kw):
    lo, hi = _arg(a, kw, 1, "min"), _arg(a, kw, 2, "max")
    if "hardtanh" in str(node.target):
        lo, hi = _arg(a, kw, 1, "min_val", -1.0), _arg(a, kw, 2, "max_val", 1.0)
    if _is_t(lo) or _is_t(hi):
        out = tr.new(node)
        return tr.add(O.elementwise(out.name, [tr.T(v) for v in (a[0], lo, hi) if _is_t(v)], "clip", out))
    if (lo, hi) in ((0, 6), (0.0, 6.0)):
        return tr.unary(node, a[0], "relu6")
    return tr.unary(node, a[0], "clip", **{k: float(v) for k, v in (("min", lo), ("max", hi)) if v is not None})


def _a_leaky_relu(tr, node, a, kw):
    return tr.unary(node, a[0], "leaky_relu", negative_slope=float(_arg(a, kw, 1, "negative_slope", 0.01)))


def _a_elu(tr, node, a, kw):
    return tr.unary(node, a[0], "elu", alpha=float(_arg(a, kw, 1, "alpha", 1.0)))


def _a_to_copy(tr, node, a, kw):
    x, out = tr.T(a[0]), tr.new(node)
    return x if out.dtype == x.dtype else tr.unary(node, x, "cast", out=out, dtype=out.dtype.value)


def _a_alias(tr, node, a, kw):
    return a[0]


def _a_tri(tr, node, a, kw):
    fn = str(node.target).split(".")[1]
    return tr.unary(node, a[0], fn, diagonal=int(_arg(a, kw, 1, "diagonal", 0)))


def _a_cumsum(tr, node, a, kw):
    x = tr.T(a[0])
    return tr.unary(node, x, "cumsum", axis=int(a[1]) % max(1, len(x.shape)))


# --- reductions -------------------------------------------------------------------------------------------------------
def _reduce_to(tr, node, x, axes, fn, keep, out=None) -> Tensor:
    x = tr.T(x)
    out = out or tr.new(node)
    axes = list(range(len(x.shape))) if axes is None or axes == [] else ([axes] if isinstance(axes, int) else axes)
    if not x.shape:
        return tr.add(O.unary(out.name, x, fn, out, 1))
    if not out.shape:
        t = tr.add(O.reduce(f"{out.name}.r", x, axes, f"{out.name}.r", fn, keep))
        return tr.add(O.view(out.name, t, (), out))
    return tr.add(O.reduce(out.name, x, axes, out, fn, keep))


def _reduction(fn):
    def h(tr, node, a, kw):
        dim = _arg(a, kw, 1, "dim")
        keep = bool(_arg(a, kw, 2, "keepdim", False))
        if fn == "var":
            keep = bool(kw.get("keepdim", False))
        return _reduce_to(tr, node, a[0], dim, fn, keep)
    return h


def _a_max_dim(tr, node, a, kw):
    """max.dim / min.dim: (values, indices), each a reduction made when used."""
    fn = str(node.target).split(".")[1]
    x, dim, keep = a[0], a[1], bool(_arg(a, kw, 2, "keepdim", False))
    vals = node.meta["val"]

    def piece(i, f):
        return _Lazy(lambda: _reduce_to(tr, node, x, dim, f, keep, tr.new(node, str(i), tr.shape(vals[i]),
                                                                           _dtype(vals[i].dtype))))
    return piece(0, fn), piece(1, f"arg{fn}")


# --- data movement ----------------------------------------------------------------------------------------------------
def _dn(n: int) -> list[str]:
    return [f"d{i}" for i in range(n)]


def _a_view(tr, node, a, kw):
    return tr.view_to(node, a[0])


def _a_permute(tr, node, a, kw):
    x = tr.T(a[0])
    r = len(x.shape)
    t = str(node.target)
    if "transpose" in t:
        perm = list(range(r))
        perm[a[1] % r], perm[a[2] % r] = perm[a[2] % r], perm[a[1] % r]
    elif t.startswith("aten.t."):
        perm = list(range(r))[::-1]
    else:
        perm = [p % r for p in a[1]]
    if perm == list(range(r)):
        return x
    return tr.op(node, lambda o: O.permute(o.name, x, perm, o))


def _a_expand(tr, node, a, kw):
    x, out = tr.T(a[0]), tr.new(node)
    return x if out.shape == x.shape else tr.add(expand_op(out.name, x, out))


def _a_slice(tr, node, a, kw):
    x = tr.T(a[0])
    axis = _arg(a, kw, 1, "dim", 0) % len(x.shape)
    r = range(x.shape[axis])[slice(_arg(a, kw, 2, "start"), _arg(a, kw, 3, "end"), _arg(a, kw, 4, "step", 1))]
    if len(r) == x.shape[axis]:
        return x
    return tr.op(node, lambda o: slice_op(o.name, x, o, axis, r.start, r.step))


def _a_select(tr, node, a, kw):
    x = tr.T(a[0])
    axis = a[1] % len(x.shape)
    return tr.op(node, lambda o: select_op(o.name, x, o, axis, a[2] % x.shape[axis]))


def _a_cat(tr, node, a, kw):
    xs = [tr.T(v) for v in a[0]]
    if len(xs) == 1:
        return xs[0]
    return tr.op(node, lambda o: O.concat(o.name, xs, _arg(a, kw, 1, "dim", 0), o))


def _a_split(tr, node, a, kw):
    """split / split_with_sizes / unbind: lazy pieces (a piece nobody reads leaves no op)."""
    x, t = tr.T(a[0]), str(node.target)
    unbind = "unbind" in t
    axis = (_arg(a, kw, 1, "dim", 0) if unbind else _arg(a, kw, 2, "dim", 0)) % len(x.shape)
    res, off = [], 0
    for i, v in enumerate(node.meta["val"]):
        ln = 1 if unbind else tr.conc(v.shape[axis])
        nm = f"{node.name}.{i}"
        if unbind:
            res.append(_Lazy(lambda nm=nm, off=off, v=v: tr.add(
                select_op(nm, x, Tensor(nm, tr.shape(v), x.dtype), axis, off))))
        elif ln:
            res.append(_Lazy(lambda nm=nm, off=off, ln=ln: x if ln == x.shape[axis] else
                             tr.sliced(nm, x, axis, off, ln)))
        else:
            res.append(None)
        off += ln
    return tuple(res)


def _a_pad(tr, node, a, kw):
    x, pad = tr.T(a[0]), list(a[1])
    r, lo = len(x.shape), [0] * len(x.shape)
    for i in range(len(pad) // 2):
        lo[r - 1 - i] = pad[2 * i]
    idx = [A(f"d{i}") + (-lo[i]) for i in range(r)]
    value = _plain_scalar(_arg(a, kw, 2, "value", 0.0) or 0.0)
    return tr.op(node, lambda o: strided_view(o.name, x, o, idx, "pad",
                                               {"pad": tuple(pad), "value": value, "padded": True}))


def _a_repeat(tr, node, a, kw):
    """Tile ``x``: out[r·n + d] = x[d] along each repeated axis (new leading axes are repeats of size-1 axes)."""
    x, reps, out = tr.T(a[0]), list(a[1]), tr.new(node)
    off = len(reps) - len(x.shape)
    dims, xi, oi = [], [], []
    for i, k in enumerate(reps):
        n = x.shape[i - off] if i >= off else 1
        if i >= off:
            dims.append(Dim(f"d{i}", n))
            xi.append(A(f"d{i}"))
        if k > 1:
            dims.append(Dim(f"r{i}", k))
            oi.append(A(f"r{i}") * n + (A(f"d{i}") if i >= off else 0))
        else:
            oi.append(A(f"d{i}") if i >= off else AffineExpr.constant(0))
    return tr.add(Op(out.name, OpKind.view, tuple(dims), (Access(x, tuple(xi)),), (Access(out, tuple(oi)),),
                     {"fn": "repeat", "repeats": tuple(reps)}, 0))


def _a_flip(tr, node, a, kw):
    x = tr.T(a[0])
    r = len(x.shape)
    axes = {d % r for d in a[1]}
    idx = [A(f"d{i}") * -1 + (x.shape[i] - 1) if i in axes else A(f"d{i}") for i in range(r)]
    return tr.op(node, lambda o: strided_view(o.name, x, o, idx, "flip", {"dims": tuple(sorted(axes))}))


def _gather(out: Tensor, x: Tensor, xi: list, reads: list[tuple[Tensor, tuple]], kind: OpKind, fn: str,
            flat: bool = False) -> Op:
    """A copy looping over ``out`` reading ``x`` at ``xi`` (some axes data-dependent) and the index tensors."""
    d = _dn(len(out.shape))
    ins = {x.name: Access(x, tuple(xi), flat)}
    for t, idx in reads:
        ins.setdefault(t.name, Access(t, idx))
    return Op(out.name, kind, tuple(Dim(v, e) for v, e in zip(d, out.shape)), tuple(ins.values()),
              (Access(out, tuple(A(v) for v in d)),), {"fn": fn}, 0)


def _a_index(tr, node, a, kw):
    """``x[i0, i1, ..]`` with integer index tensors (None for a full axis), numpy's advanced-indexing layout."""
    x, out = tr.T(a[0]), tr.new(node)
    idx = list(a[1]) + [None] * (len(x.shape) - len(a[1]))
    pos = [i for i, t in enumerate(idx) if t is not None]
    its = [tr.T(idx[i]) for i in pos]
    if any(t.dtype == DType.bool for t in its):
        raise _Unsupported("boolean-mask indexing (a data-dependent shape)")
    nb = len(O._broadcast([t.shape for t in its], node.name))
    first = pos[0] if pos == list(range(pos[0], pos[-1] + 1)) else 0
    d = _dn(len(out.shape))
    bd, rest = d[first:first + nb], iter(d[:first] + d[first + nb:])
    reads = [(t, O._bcast_index(t.shape, bd)) for t in its]
    if len(pos) > 1:  # several data-dependent axes: one flat gather
        return tr.add(_gather(out, x, [IndirectIndex(tuple(d))], reads, OpKind.embedding, "index", flat=True))
    t = its[0]
    via = tuple(bd[nb - len(t.shape) + i] for i, n in enumerate(t.shape) if n != 1)
    xi = [IndirectIndex(via) if i == pos[0] else A(next(rest)) for i in range(len(x.shape))]
    return tr.add(_gather(out, x, xi, reads, OpKind.embedding, "index"))


def _a_index_select(tr, node, a, kw):
    x, ix, out = tr.T(a[0]), tr.T(a[2]), tr.new(node)
    axis = a[1] % len(x.shape)
    d = _dn(len(out.shape))
    xi = [IndirectIndex((d[axis],)) if i == axis else A(d[i]) for i in range(len(x.shape))]
    return tr.add(_gather(out, x, xi, [(ix, (A(d[axis]),))], OpKind.embedding, "index_select"))


def _a_gather(tr, node, a, kw):
    x, ix, out = tr.T(a[0]), tr.T(a[2]), tr.new(node)
    axis = a[1] % len(x.shape)
    d = _dn(len(out.shape))
    xi = [IndirectIndex((d[axis],)) if i == axis else A(d[i]) for i in range(len(x.shape))]
    return tr.add(_gather(out, x, xi, [(ix, tuple(A(v) for v in d))], OpKind.view, "gather"))


def _a_embedding(tr, node, a, kw):
    return tr.op(node, lambda o: O.embedding(o.name, tr.T(a[1]), tr.T(a[0]), o))


# --- pooling, resampling, creation ------------------------------------------------------------------------------------
def _a_max_pool(tr, node, a, kw):
    st = _arg(a, kw, 2, "stride")
    return _pool(tr, node, a[0], a[1], st or None, _arg(a, kw, 3, "padding", 0), _arg(a, kw, 4, "dilation", 1), "max",
                 bool(_arg(a, kw, 5, "ceil_mode", False))), None


def _a_avg_pool(tr, node, a, kw):
    st = _arg(a, kw, 2, "stride")
    t = _pool(tr, node, a[0], a[1], st or None, _arg(a, kw, 3, "padding", 0), 1, "avg",
              bool(_arg(a, kw, 4, "ceil_mode", False)))
    if not _arg(a, kw, 5, "count_include_pad", True) or _arg(a, kw, 6, "divisor_override") is not None:
        tr.ops[-1] = _attrs(tr.ops[-1], count_include_pad=bool(_arg(a, kw, 5, "count_include_pad", True)),
                            divisor_override=_arg(a, kw, 6, "divisor_override"))
    return t


def _a_adaptive_avg(tr, node, a, kw):
    return _adaptive(tr, node, a[0], "avg")


def _scales_match(x: Tensor, out: Tensor, scales: Any, n: int) -> bool:
    """Whether given scale factors are the size ratios (torch then indexes with 1/scale, the same grid)."""
    scales = [scales] * n if isinstance(scales, (int, float)) else list(scales or [])
    return all(s is None or math.isclose(s, o / i, rel_tol=1e-9)
               for s, i, o in zip(scales, x.shape[-n:], out.shape[-n:]))


def _a_upsample_nearest(tr, node, a, kw):
    x, out = tr.T(a[0]), tr.new(node)
    n = int(str(node.target).split("upsample_nearest")[1][0])
    vec = str(node.target).endswith(".vec")
    if not _scales_match(x, out, a[2] if vec else a[2:], n):
        raise _Unsupported("scale factors that are not the size ratios")
    return tr.add(resize_nearest_op(out.name, x, out))


_LINEAR_MODES = {"upsample_linear1d": ("linear", 1), "upsample_bilinear2d": ("bilinear", 2),
                 "upsample_trilinear3d": ("trilinear", 3)}


def _a_upsample_linear(tr, node, a, kw):
    x, out = tr.T(a[0]), tr.new(node)
    mode, n = _LINEAR_MODES[str(node.target).split(".")[1]]
    vec = str(node.target).endswith(".vec")
    if not _scales_match(x, out, a[3] if vec else a[3:], n):
        raise _Unsupported("scale factors that are not the size ratios")
    return tr.add(O.interpolate(out.name, x, out, out.shape[-n:], mode, bool(a[2])))


def _a_const(tr, node, a, kw):
    """Tensor creation: a constant the graph reads, stored as a weight (its values do not depend on the inputs)."""
    t = tr.new(node)
    return tr.const(f"const.{node.name}", t.shape, t.dtype)


def _table() -> dict[str, Callable]:
    t: dict[str, Callable] = {
        "aten.linear.default": _a_linear, "aten.mm.default": _a_mm, "aten.bmm.default": _a_mm,
        "aten.matmul.default": _a_matmul, "aten.addmm.default": _a_addmm, "aten.baddbmm.default": _a_baddbmm,
        "aten.convolution.default": _a_convolution, "aten.scaled_dot_product_attention.default": _a_sdpa,
        "aten.native_layer_norm.default": _a_layer_norm, "aten.layer_norm.default": _a_layer_norm,
        "aten.rms_norm.default": _a_rms_norm, "aten.group_norm.default": _a_group_norm,
        "aten.native_group_norm.default": _a_group_norm,
        "aten._native_batch_norm_legit_no_training.default": _a_batch_norm,
        "aten._softmax.default": _a_softmax, "aten._log_softmax.default": _a_softmax,
        "aten.softmax.int": _a_softmax,
        "aten.rsub.Scalar": _a_rsub, "aten.rsub.Tensor": _a_rsub, "aten.where.self": _a_where,
        "aten.pow.Tensor_Scalar": _a_pow, "aten.pow.Tensor_Tensor": _a_pow, "aten.pow.Scalar": _a_pow,
        "aten.masked_fill.Scalar": _a_masked_fill, "aten.masked_fill.Tensor": _a_masked_fill,
        "aten.clamp.default": _a_clamp, "aten.clamp.Tensor": _a_clamp, "aten.hardtanh.default": _a_clamp,
        "aten.leaky_relu.default": _a_leaky_relu, "aten.elu.default": _a_elu, "aten._to_copy.default": _a_to_copy,
        "aten.tril.default": _a_tri, "aten.triu.default": _a_tri, "aten.cumsum.default": _a_cumsum,
        "aten.max.dim": _a_max_dim, "aten.min.dim": _a_max_dim,
        "aten.permute.default": _a_permute, "aten.transpose.int": _a_permute, "aten.t.default": _a_permute,
        "aten.expand.default": _a_expand, "aten.slice.Tensor": _a_slice, "aten.select.int": _a_select,
        "aten.cat.default": _a_cat, "aten.split.Tensor": _a_split, "aten.split_with_sizes.default": _a_split,
        "aten.unbind.int": _a_split, "aten.constant_pad_nd.default": _a_pad, "aten.repeat.default": _a_repeat,
        "aten.flip.default": _a_flip, "aten.index.Tensor": _a_index, "aten.index_select.default": _a_index_select,
        "aten.gather.default": _a_gather, "aten.embedding.default": _a_embedding,
        "aten.max_pool2d_with_indices.default": _a_max_pool, "aten.avg_pool2d.default": _a_avg_pool,
        "aten._adaptive_avg_pool2d.default": _a_adaptive_avg, "aten.adaptive_avg_pool2d.default": _a_adaptive_avg,
    }
    for fn in UNARY:
        t[f"aten.{fn}.default"] = _unary(fn)
    for aten, fn in BINARY.items():
        for ov in ("Tensor", "Scalar", "default", "Tensor_mode"):
            t[f"aten.{aten}.{ov}"] = _binary(fn)
    for v in ("view.default", "_unsafe_view.default", "reshape.default", "squeeze.dim", "squeeze.dims",
              "squeeze.default", "unsqueeze.default", "flatten.using_ints", "view_copy.default"):
        t[f"aten.{v}"] = _a_view
    for v in ("clone.default", "alias.default", "detach.default", "lift_fresh_copy.default", "contiguous.default",
              "dropout.default"):
        t[f"aten.{v}"] = _a_alias
    for fn, ovs in (("sum", ("dim_IntList", "default")), ("mean", ("dim", "default")), ("amax", ("default",)),
                    ("amin", ("default",)), ("argmax", ("default",)), ("argmin", ("default",)),
                    ("any", ("dim", "dims", "default")), ("all", ("dim", "dims", "default")),
                    ("prod", ("dim_int", "default")), ("var", ("correction", "dim", "default"))):
        for ov in ovs:
            t[f"aten.{fn}.{ov}"] = _reduction(fn)
    for n in (1, 2, 3):
        t[f"aten.upsample_nearest{n}d.vec"] = t[f"aten.upsample_nearest{n}d.default"] = _a_upsample_nearest
    for k in _LINEAR_MODES:
        t[f"aten.{k}.vec"] = t[f"aten.{k}.default"] = _a_upsample_linear
    for c in ("arange.default", "arange.start", "arange.start_step", "full.default", "full_like.default",
              "zeros.default", "ones.default", "zeros_like.default", "ones_like.default", "empty.memory_format",
              "empty_like.default", "empty_strided.default", "scalar_tensor.default", "new_ones.default",
              "new_zeros.default", "new_full.default", "new_empty.default", "new_empty_strided.default",
              "rand.default", "randn.default", "rand_like.default", "randn_like.default"):
        t[f"aten.{c}"] = _a_const
    return t


ATEN_OPS: dict[str, Callable] = _table()
"""The ATen operators translated: ``aten.<name>.<overload>`` → translator. Anything else is unsupported."""

__all__ = ["from_torch_export", "export_program", "ATEN_OPS", "KEPT_WHOLE", "UNARY", "BINARY"]
