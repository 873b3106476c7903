"""PyTorch frontend: torch.fx symbolic tracing + shape propagation → :class:`shared_ir.Graph`.

Conventions
- Op and activation-tensor names are the fx node names (``conv1``, ``relu_3``); a node lowered to several ops names
  the extra ones ``<node>.<suffix>``. Parameters and buffers keep their qualified name (``layer1.0.conv1.weight``);
  a parameter reachable under two names (tied weights) keeps the first one, so it is one tensor in the graph.
- Placeholders are ``input`` tensors, parameters/buffers ``weight`` s, what the module returns ``output`` s.
- Shape-only computation (``x.size(0)``, ``x.shape``, int arithmetic) is evaluated during shape propagation and
  leaves no op. Dropout / Identity / ``contiguous`` alias their input (no op).
- BatchNorm (inference) is ``affine_channel`` with the module's ``weight``/``bias`` standing for the folded
  scale/shift. ``nn.Upsample`` / ``F.interpolate`` (nearest, integer factors) become a ``view``-kind copy
  (:func:`shared_ir.frontends.upsample_nearest_op`). ``nn.LSTM`` is unrolled over the traced sequence length into
  linear + elementwise ops per step (weights shared across steps keep one tensor each; an absent initial state is a
  zero ``weight`` constant
  ``const.<node>.h0_l<i>`` / ``c0_l<i>``; tensor-creating calls likewise give ``const.<node>`` weights).
- ``F.scaled_dot_product_attention`` and ``nn.MultiheadAttention`` are decomposed into projections (linear),
  q·kᵀ and p·v batch matmuls, scaling, masks and softmax, as their math backends compute them.
- Every node the frontend cannot translate is collected (target and source location) and reported at the end in
  one :class:`shared_ir.UnsupportedOpError`.
"""
from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any, Callable

from .. import ops as O
from ..dtypes import DType
from ..errors import IRError, UnsupportedOpError
from ..graph import Graph
from ..op import Op, Tensor, TensorRole
from ..ops import expand_op, select_op, slice_op, strided_view, upsample_nearest_op
from .trace import user_frame

# FLOPs per element of elementwise functions (rough, for rooflines; MACs are what the zoo checks).
UNARY_FLOPS = {"relu": 1, "relu6": 1, "gelu": 8, "silu": 4, "sigmoid": 4, "tanh": 4, "hardswish": 3,
               "hardsigmoid": 2, "leaky_relu": 2, "elu": 4, "softplus": 4, "mish": 8, "exp": 1, "log": 1,
               "sqrt": 1, "rsqrt": 2, "neg": 1, "abs": 1, "erf": 4, "reciprocal": 1, "sin": 4, "cos": 4}


class _Unsupported(Exception):
    """Raised by a handler: the node cannot be translated (reason in the message)."""


class _Lazy:
    """A tensor materialised on first use (a split piece, an LSTM's h_n): unused pieces leave no op."""

    def __init__(self, fn: Callable[[], Tensor]):
        self.fn, self.value = fn, None

    def get(self) -> Tensor:
        if self.value is None:
            self.value = self.fn()
        return self.value


def _dtype(td: Any) -> DType:
    try:
        return DType.parse(str(td))
    except IRError:
        return DType.float32  # complex etc.: only reachable through ops reported as unsupported


def from_torch(module: Any, example_inputs: Any, name: str | None = None, *, fake: bool = True,
               leaf_modules: tuple = ()) -> Graph:
    """Trace ``module`` on ``example_inputs`` (a tensor or a tuple of tensors) into a :class:`Graph`.

    ``fake=True`` propagates shapes with fake tensors (no arithmetic, fast for big models); it falls back to real
    execution if fake propagation fails. ``leaf_modules`` are extra module types kept as single calls.
    """
    import torch
    import torch.fx as fx

    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    was_training = module.training
    module.eval()
    try:
        class _Tracer(fx.Tracer):
            def is_leaf_module(self, m, qualname):
                if leaf_modules and isinstance(m, leaf_modules):
                    return True
                return super().is_leaf_module(m, qualname)

        tracer = _Tracer()
        tracer.record_stack_traces = True
        try:
            g = tracer.trace(module)
        except Exception as e:  # noqa: BLE001 - e.g. control flow on tensor values: not traceable symbolically
            import traceback

            frames = [f for f in traceback.extract_tb(e.__traceback__) if "/torch/" not in f.filename]
            where = (f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames
                     else type(module).__name__)
            raise UnsupportedOpError([(f"torch.fx symbolic tracing ({type(e).__name__}: {e})", where)]) from e
        gm = fx.GraphModule(module, g)
        _propagate(gm, example_inputs, fake)
        tr = _Translator(gm, module)
        return tr.run(name or type(module).__name__)
    finally:
        module.train(was_training)


def _propagate(gm: Any, inputs: tuple, fake: bool) -> None:
    """ShapeProp, also recording the concrete value of every node whose result holds no tensor (sizes, ints)."""
    import torch
    from torch.fx.passes.shape_prop import ShapeProp

    class _Prop(ShapeProp):
        def run_node(self, n):
            r = super().run_node(n)
            if not _has_tensor(r):
                n.meta["ir_value"] = r
            return r

    def _has_tensor(v):
        if isinstance(v, torch.Tensor):
            return True
        if isinstance(v, (tuple, list)):
            return any(_has_tensor(x) for x in v)
        if isinstance(v, dict):
            return any(_has_tensor(x) for x in v.values())
        return False

    if fake:
        try:
            from torch._subclasses.fake_tensor import FakeTensorMode

            mode = FakeTensorMode(allow_non_fake_inputs=True)
            with torch.no_grad():
                _Prop(gm, fake_mode=mode).propagate(*inputs)
            return
        except Exception:  # noqa: BLE001 - some ops have no fake kernel: run for real instead
            for n in gm.graph.nodes:
                n.meta.pop("ir_value", None)
    with torch.no_grad():
        _Prop(gm).propagate(*inputs)


class _OperandsBase:
    """What both torch translators (torch.fx here, torch.export in :mod:`.torch_export`) do with operands: look
    node values up (``_leaf`` turns any other argument into a plain value), demand tensors, collect ops and
    constants. Subclasses set ``env``, ``ops`` and ``weights``."""

    env: dict
    ops: list
    weights: dict

    def _leaf(self, a: Any) -> Any:
        return a

    def const(self, name: str, shape: tuple, dtype: DType = DType.float32) -> Tensor:
        """A constant the graph reads but no op produces (zero initial state, a created tensor): a weight."""
        t = self.weights.get(name)
        if t is None:
            t = self.weights[name] = Tensor(name, tuple(shape), dtype, TensorRole.weight)
        return t

    def val(self, a: Any) -> Any:
        import torch.fx as fx

        if isinstance(a, fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.val(x) for x in a)
        if isinstance(a, dict):
            return {k: self.val(v) for k, v in a.items()}
        return self._leaf(a)

    def T(self, v: Any) -> Tensor:
        if isinstance(v, _Lazy):
            return v.get()
        if isinstance(v, Tensor):
            return v
        raise _Unsupported(f"expected a tensor operand, got {type(v).__name__}")

    def add(self, op: Op) -> Tensor:
        self.ops.append(op)
        return op.outputs[0].tensor


class _Translator(_OperandsBase):
    def __init__(self, gm: Any, root: Any):
        import torch

        self.torch = torch
        self.gm = gm
        self.modules = dict(gm.named_modules())
        self.ops: list[Op] = []
        self.env: dict[Any, Any] = {}
        self.unsupported: list[tuple[str, str]] = []
        self.weights: dict[str, Tensor] = {}
        # tied parameters: one tensor per parameter object, named by its first qualified name
        self.canonical: dict[int, str] = {}
        for qn, p in (list(root.named_parameters(remove_duplicate=False))
                      + list(root.named_buffers(remove_duplicate=False))):
            self.canonical.setdefault(id(p), qn)
        self.qual: dict[str, str] = {}
        for qn, p in (list(root.named_parameters(remove_duplicate=False))
                      + list(root.named_buffers(remove_duplicate=False))):
            self.qual[qn] = self.canonical[id(p)]
        self.root = root
        self.inputs: list[str] = []

    # --- values ---------------------------------------------------------------------------------------------------
    def meta(self, node: Any) -> Any:
        return node.meta.get("tensor_meta")

    def new(self, node: Any, suffix: str | None = None, shape: Any = None, dtype: Any = None) -> Tensor:
        """The tensor a node (or one of its sub-ops) produces, shaped by the node's metadata unless given."""
        tm = self.meta(node)
        if shape is None:
            if not _is_tm(tm):
                raise _Unsupported("result is not a single tensor")
            shape = tuple(tm.shape)
        if dtype is None:
            dtype = _dtype(tm.dtype) if _is_tm(tm) else DType.float32
        return Tensor(node.name if suffix is None else f"{node.name}.{suffix}", tuple(shape), dtype)

    def weight(self, qualname: str) -> Tensor:
        qn = self.qual.get(qualname, qualname)
        t = self.weights.get(qn)
        if t is None:
            p = self._get_attr(qn)
            t = Tensor(qn, tuple(p.shape) if p.dim() else (), _dtype(p.dtype), TensorRole.weight)
            self.weights[qn] = t
        return t

    def _get_attr(self, qn: str) -> Any:
        obj = self.root
        for a in qn.split("."):
            obj = getattr(obj, a)
        return obj

    # --- main loop ------------------------------------------------------------------------------------------------
    def run(self, name: str) -> Graph:
        out_node = None
        for node in self.gm.graph.nodes:
            if node.op == "output":
                out_node = node
                continue
            try:
                self.env[node] = self.translate(node)
            except _Unsupported as e:
                self.unsupported.append((self.describe(node, str(e)), self.location(node)))
                self.env[node] = self.placeholder_value(node)
            except (IRError, ValueError, TypeError, IndexError, KeyError) as e:
                self.unsupported.append((self.describe(node, f"{type(e).__name__}: {e}"), self.location(node)))
                self.env[node] = self.placeholder_value(node)
        if self.unsupported:
            raise UnsupportedOpError(self.unsupported)
        outs = [self.T(v) for v in _flatten(self.val(out_node.args[0])) if isinstance(v, (Tensor, _Lazy))]
        return self.finish(outs, name)

    def finish(self, outs: list[Tensor], name: str) -> Graph:
        produced = {t for o in self.ops for t in o.output_names}
        retag: dict[str, Tensor] = {}
        names: list[str] = []
        for i, t in enumerate(outs):
            if t.name in names:
                continue
            if t.name in produced:
                retag[t.name] = t.with_role(TensorRole.output)
                names.append(t.name)
            else:  # an input or weight returned as is: copy it so the output is produced by an op
                o = Tensor(f"output_{i}", t.shape, t.dtype, TensorRole.output)
                self.ops.append(O.unary(o.name, t, "copy", o, 0))
                names.append(o.name)
        ops = [_retag(op, retag) for op in self.ops]
        return Graph(ops, inputs=self.inputs, outputs=names, name=name)

    def placeholder_value(self, node: Any) -> Any:
        """A stand-in for an untranslatable node's result, so later nodes are still checked."""
        tm = self.meta(node)
        if _is_tm(tm):
            return Tensor(node.name, tuple(tm.shape) or (1,), _dtype(tm.dtype))
        if isinstance(tm, (tuple, list)):
            return tuple(Tensor(f"{node.name}.{i}", tuple(m.shape) or (1,), _dtype(m.dtype)) if _is_tm(m) else None
                         for i, m in enumerate(tm))
        return node.meta.get("ir_value")

    def describe(self, node: Any, why: str) -> str:
        if node.op == "call_module":
            m = self.modules.get(node.target)
            t = f"{type(m).__module__}.{type(m).__name__}" if m is not None else str(node.target)
        elif node.op == "call_method":
            t = f"Tensor.{node.target}"
        else:
            t = _target_name(node.target)
        return f"{t} ({why})" if why else t

    def location(self, node: Any) -> str:
        where = user_frame(node.stack_trace)
        path = node.target if node.op == "call_module" else None
        if path is None:
            stack = node.meta.get("nn_module_stack")
            if stack:
                path = list(stack.keys())[-1]
        parts = [p for p in (where, f"module {path}" if path else None, f"node {node.name}") if p]
        return ", ".join(parts)

    def translate(self, node: Any) -> Any:
        if "ir_value" in node.meta and node.op != "placeholder":
            return node.meta["ir_value"]  # shape-only node: no op
        if node.op == "placeholder":
            tm = self.meta(node)
            if not _is_tm(tm):
                return node.meta.get("ir_value")
            t = Tensor(node.name, tuple(tm.shape), _dtype(tm.dtype), TensorRole.input)
            self.inputs.append(t.name)
            return t
        if node.op == "get_attr":
            obj = self._get_attr(node.target)
            if isinstance(obj, self.torch.Tensor):
                return self.weight(node.target)
            return obj
        if node.op == "call_module":
            m = self.modules[node.target]
            h = _module_handler(m)
            if h is None:
                raise _Unsupported("")
            return h(self, node, m, self.val(node.args), self.val(node.kwargs))
        if node.op == "call_method":
            h = _METHODS.get(node.target)
            if h is None:
                raise _Unsupported("")
            return h(self, node, self.val(node.args), self.val(node.kwargs))
        if node.op == "call_function":
            h = _function_handler(node.target)
            if h is None:
                raise _Unsupported("")
            return h(self, node, self.val(node.args), self.val(node.kwargs))
        raise _Unsupported(f"fx op {node.op}")

    # --- lowering helpers -----------------------------------------------------------------------------------------
    def unary(self, node, x, fn, suffix=None, out=None, **attrs) -> Tensor:
        x = self.T(x)
        out = out or self.new(node, suffix, shape=x.shape if suffix else None)
        op = O.unary(out.name, x, fn, out, UNARY_FLOPS.get(fn, 1))
        if attrs:
            op = dataclasses.replace(op, attrs={**op.attr_dict, **attrs})
        return self.add(op)

    def binary(self, node, a, b, fn, out=None) -> Tensor:
        """Tensor ∘ tensor → binary op; tensor ∘ python scalar → unary ``<fn>_scalar`` (``r<fn>_scalar`` when the
        scalar is on the left of a non-commutative op)."""
        ta, tb = isinstance(a, (Tensor, _Lazy)), isinstance(b, (Tensor, _Lazy))
        if ta and tb:
            a, b = self.T(a), self.T(b)
            out = out or self.new(node)
            return self.add(O.binary(out.name, a, b, fn, out))
        if ta or tb:
            x, s = (a, b) if ta else (b, a)
            f = f"{fn}_scalar" if ta or fn in ("add", "mul") else f"r{fn}_scalar"
            return self.unary(node, x, f, out=out, scalar=_plain_scalar(s))
        raise _Unsupported("no tensor operand")

    def view_to(self, node, x, shape=None, suffix=None) -> Tensor:
        """Reshape ``x`` to the node's shape (or ``shape``); aliases when nothing changes."""
        x = self.T(x)
        out = self.new(node, suffix, shape=shape)
        if tuple(out.shape) == tuple(x.shape):
            return x
        return self.add(O.view(out.name, x, out.shape, out))

    def sliced(self, name, x, axis, start, length, step=1) -> Tensor:
        shape = list(x.shape)
        shape[axis % len(shape)] = length
        out = Tensor(name, tuple(shape), x.dtype)
        return self.add(slice_op(name, x, out, axis, start, step))


# --- helpers ------------------------------------------------------------------------------------------------------
def _is_tm(tm: Any) -> bool:
    return tm is not None and type(tm).__name__ == "TensorMetadata"


def _flatten(v: Any) -> list:
    if isinstance(v, (list, tuple)):
        return [y for x in v for y in _flatten(x)]
    if isinstance(v, dict):
        return [y for x in v.values() for y in _flatten(x)]
    return [v]


def _plain_scalar(s: Any) -> Any:
    if isinstance(s, (bool, int, float)):
        return s
    try:
        return float(s)
    except Exception:  # noqa: BLE001
        return str(s)


def _target_name(t: Any) -> str:
    """How a user writes the target (``torch.fft.fft``, ``torch.cumsum``, ``operator.add``)."""
    n = _public_names().get(id(t))
    if n:
        return n
    mod = getattr(t, "__module__", None) or ""
    n = getattr(t, "__qualname__", None) or getattr(t, "__name__", None) or str(t)
    if mod in ("_operator", "operator"):
        return f"operator.{n}"
    return f"{mod}.{n}" if mod else n


_PUBLIC: dict[int, str] | None = None


def _public_names() -> dict[int, str]:
    """id(function) -> public dotted name, for builtins whose __module__ is private (torch._C._fft.fft_fft)."""
    global _PUBLIC
    if _PUBLIC is None:
        import importlib

        _PUBLIC = {}
        for ns in ("torch.nn.functional", "torch.special", "torch.linalg", "torch.fft", "torch"):
            try:
                mod = importlib.import_module(ns)
            except ImportError:
                continue
            for k in dir(mod):
                if not k.startswith("_"):
                    v = getattr(mod, k, None)
                    if callable(v) and not isinstance(v, type):
                        _PUBLIC.setdefault(id(v), f"{ns}.{k}")
    return _PUBLIC


def _retag(op: Op, tensors: dict[str, Tensor]) -> Op:
    if not tensors or not any(a.tensor.name in tensors for a in op.accesses):
        return op

    def re(a):
        t = tensors.get(a.tensor.name)
        return dataclasses.replace(a, tensor=t) if t is not None else a

    return dataclasses.replace(op, inputs=tuple(map(re, op.inputs)), outputs=tuple(map(re, op.outputs)))


def _arg(args, kwargs, i, name, default=None):
    if name in kwargs:
        return kwargs[name]
    return args[i] if len(args) > i else default


def _dims_arg(args, start, kwargs, name):
    """Varargs or one sequence (``x.permute(0, 2, 1)`` / ``x.permute([0, 2, 1])``)."""
    if name in kwargs:
        v = kwargs[name]
    else:
        v = args[start:]
        if len(v) == 1 and isinstance(v[0], (list, tuple)):
            v = v[0]
    return tuple(int(x) for x in v)


# --- module handlers ----------------------------------------------------------------------------------------------
def _m_linear(tr, node, m, args, kw):
    x = tr.T(args[0])
    b = tr.weight(f"{node.target}.bias") if m.bias is not None else None
    out = tr.new(node)
    return tr.add(O.linear(out.name, x, tr.weight(f"{node.target}.weight"), out, b))


def _conv(tr, node, x, w, b, stride, padding, dilation, groups):
    x = tr.T(x)
    if x.shape and len(x.shape) != 4:
        raise _Unsupported(f"conv2d on a rank-{len(x.shape)} input")
    if isinstance(padding, str):
        if padding == "valid":
            padding = 0
        else:  # 'same' with stride 1: symmetric when the dilated kernel is odd
            k = w.shape[2:]
            d = O._pair(dilation)
            tot = [d[i] * (k[i] - 1) for i in range(2)]
            if any(t % 2 for t in tot):
                raise _Unsupported("padding='same' with an even kernel (asymmetric padding)")
            padding = (tot[0] // 2, tot[1] // 2)
    out = tr.new(node)
    return tr.add(O.conv2d(out.name, x, w, out, b, stride=stride, padding=padding, dilation=dilation, groups=groups))


def _m_conv2d(tr, node, m, args, kw):
    if m.padding_mode != "zeros":
        raise _Unsupported(f"padding_mode={m.padding_mode!r}")
    b = tr.weight(f"{node.target}.bias") if m.bias is not None else None
    return _conv(tr, node, args[0], tr.weight(f"{node.target}.weight"), b, m.stride, m.padding, m.dilation, m.groups)


def _m_batchnorm(tr, node, m, args, kw):
    x = tr.T(args[0])
    C = x.shape[1]
    q = node.target
    # inference BN: y = x·scale + shift with scale = w/√(var+eps), shift = b − mean·scale; the affine params name them
    scale = tr.weight(f"{q}.weight") if m.affine else tr.const(f"{q}.scale", (C,))
    shift = tr.weight(f"{q}.bias") if m.affine else tr.const(f"{q}.shift", (C,))
    out = tr.new(node)
    op = O.affine_channel(out.name, x, scale, shift, out, axis=1)
    return tr.add(dataclasses.replace(op, attrs={**op.attr_dict, "eps": float(m.eps)}))


def _act_fn(m) -> tuple[str, dict]:
    import torch.nn as nn

    table = [(nn.ReLU, "relu"), (nn.ReLU6, "relu6"), (nn.GELU, "gelu"), (nn.SiLU, "silu"), (nn.Sigmoid, "sigmoid"),
             (nn.Tanh, "tanh"), (nn.Hardswish, "hardswish"), (nn.Hardsigmoid, "hardsigmoid"),
             (nn.LeakyReLU, "leaky_relu"), (nn.ELU, "elu"), (nn.Softplus, "softplus"), (nn.Mish, "mish")]
    for cls, fn in table:
        if type(m) is cls:
            attrs = {}
            if fn == "leaky_relu":
                attrs["negative_slope"] = float(m.negative_slope)
            if fn == "gelu" and m.approximate != "none":
                attrs["approximate"] = m.approximate
            return fn, attrs
    return "", {}


def _m_act(tr, node, m, args, kw):
    fn, attrs = _act_fn(m)
    return tr.unary(node, args[0], fn, **attrs)


def _m_alias(tr, node, m, args, kw):
    return args[0]


def _m_softmax(tr, node, m, args, kw):
    x = tr.T(args[0])
    out = tr.new(node)
    op = O.softmax(out.name, x, out, axis=-1 if m.dim is None else m.dim)
    if type(m).__name__ == "LogSoftmax":
        op = dataclasses.replace(op, attrs={**op.attr_dict, "log": True})
    return tr.add(op)


def _m_layernorm(tr, node, m, args, kw):
    x = tr.T(args[0])
    w = tr.weight(f"{node.target}.weight") if m.weight is not None else None
    b = tr.weight(f"{node.target}.bias") if getattr(m, "bias", None) is not None else None
    out = tr.new(node)
    return tr.add(O.layernorm(out.name, x, out, w, b, normalized_ndim=len(m.normalized_shape)))


def _pool(tr, node, x, kernel, stride, padding, dilation, fn, ceil_mode):
    x = tr.T(x)
    if len(x.shape) != 4:
        raise _Unsupported(f"pool2d on a rank-{len(x.shape)} input")
    if stride is None or (isinstance(stride, (list, tuple)) and not stride):
        stride = kernel
    out = tr.new(node)
    name = out.name
    op = O.pool2d(name + ".tmp", x, name + ".tmp", kernel, stride, padding, fn, dilation)
    if tuple(op.outputs[0].tensor.shape) != tuple(out.shape):
        if not ceil_mode:
            raise _Unsupported(f"pool output {list(out.shape)} differs from {list(op.outputs[0].tensor.shape)}")
        # ceil_mode adds a last partial window: same nest with one more p/q, reads past the end are padding
        dims = tuple(dataclasses.replace(d, extent=out.shape[2]) if d.name == "p" else
                     dataclasses.replace(d, extent=out.shape[3]) if d.name == "q" else d for d in op.dims)
        return tr.add(Op(name, op.kind, dims, op.inputs, (dataclasses.replace(op.outputs[0], tensor=out),),
                         {**op.attr_dict, "padded": True, "ceil_mode": True}, op.flops_per_point))
    return tr.add(dataclasses.replace(op, name=name, outputs=(dataclasses.replace(op.outputs[0], tensor=out),),
                                      attrs={**op.attr_dict, **({"ceil_mode": True} if ceil_mode else {})}))


def _m_maxpool(tr, node, m, args, kw):
    return _pool(tr, node, args[0], m.kernel_size, m.stride, m.padding, m.dilation, "max", m.ceil_mode)


def _m_avgpool(tr, node, m, args, kw):
    return _pool(tr, node, args[0], m.kernel_size, m.stride, m.padding, 1, "avg", m.ceil_mode)


def _adaptive(tr, node, x, fn):
    """Adaptive pooling: a pool2d whose window is derived from the sizes. Exact when the output divides the input;
    otherwise torch's windows vary in size and we use stride ⌊H/oh⌋, kernel H − (oh−1)·stride (same output)."""
    x = tr.T(x)
    out = tr.new(node)
    H, W = x.shape[-2:]
    oh, ow = out.shape[-2:]
    if len(x.shape) != 4:
        raise _Unsupported(f"adaptive pool on rank {len(x.shape)}")
    sh, sw = H // oh, W // ow
    kh, kw_ = H - (oh - 1) * sh, W - (ow - 1) * sw
    op = O.pool2d(out.name, x, out, (kh, kw_), (sh, sw), 0, fn)
    return tr.add(dataclasses.replace(op, attrs={**op.attr_dict, "adaptive": True}))


def _m_adaptive_avg(tr, node, m, args, kw):
    return _adaptive(tr, node, args[0], "avg")


def _m_adaptive_max(tr, node, m, args, kw):
    return _adaptive(tr, node, args[0], "max")


def _m_view(tr, node, m, args, kw):
    return tr.view_to(node, args[0])


def _m_embedding(tr, node, m, args, kw):
    ids = tr.T(args[0])
    out = tr.new(node)
    return tr.add(O.embedding(out.name, ids, tr.weight(f"{node.target}.weight"), out))


def _m_upsample(tr, node, m, args, kw):
    if m.mode != "nearest":
        raise _Unsupported(f"mode={m.mode!r} (only nearest)")
    x = tr.T(args[0])
    out = tr.new(node)
    return tr.add(upsample_nearest_op(out.name, x, out))


def _m_lstm(tr, node, m, args, kw):
    """Unroll an nn.LSTM over the traced sequence: per layer and step, gates = W_ih·x_t + b_ih + W_hh·h + b_hh
    (two linears sharing the layer's weight tensors across steps), i,f,g,o slices, c' = σf·c + σi·tanh g,
    h' = σo·tanh c'. MACs = 4·H·(I+H)·T per layer and batch element, as cuDNN computes."""
    if m.bidirectional or getattr(m, "proj_size", 0):
        raise _Unsupported("bidirectional / proj_size LSTM")
    x = tr.T(args[0])
    if len(x.shape) != 3:
        raise _Unsupported("unbatched LSTM input")
    hx = args[1] if len(args) > 1 else kw.get("hx")
    bf = m.batch_first
    tax = 1 if bf else 0
    T, B = (x.shape[1], x.shape[0]) if bf else (x.shape[0], x.shape[1])
    H, L, q, n = m.hidden_size, m.num_layers, node.target, node.name

    def step_shape(F):
        return (B, 1, F) if bf else (1, B, F)

    def init_state(which: int, layer: int) -> Tensor:
        nm = f"{n}.{'hc'[which]}0_l{layer}"
        if hx is None:
            nm = f"const.{nm}"
            return tr.const(nm, step_shape(H))
        s = tr.T(hx[which])  # [L, B, H]
        t = tr.sliced(nm + ".sel", s, 0, layer, 1)
        if bf:
            v = Tensor(nm, step_shape(H), t.dtype)
            t = tr.add(O.view(nm, t, v.shape, v))
        return t

    prev_out: list[Tensor] = []
    finals_h, finals_c = [], []
    for l in range(L):
        w_ih, w_hh = tr.weight(f"{q}.weight_ih_l{l}"), tr.weight(f"{q}.weight_hh_l{l}")
        b_ih = tr.weight(f"{q}.bias_ih_l{l}") if m.bias else None
        b_hh = tr.weight(f"{q}.bias_hh_l{l}") if m.bias else None
        h, c = init_state(0, l), init_state(1, l)
        outs = []
        for t in range(T):
            p = f"{n}.l{l}.t{t}"
            xt = tr.sliced(f"{p}.x", x, tax, t, 1) if l == 0 else prev_out[t]
            gx = tr.add(O.linear(f"{p}.gx", xt, w_ih, f"{p}.gx", b_ih))
            gh = tr.add(O.linear(f"{p}.gh", h, w_hh, f"{p}.gh", b_hh))
            g = tr.add(O.binary(f"{p}.gates", gx, gh, "add", f"{p}.gates"))
            gi, gf, gg, go = (tr.sliced(f"{p}.{k}", g, -1, j * H, H) for j, k in enumerate("ifgo"))
            c, h = O.lstm_cell_tail(p, gi, gf, gg, go, c, tr.add)
            outs.append(h)
        prev_out = outs
        finals_h.append(h)
        finals_c.append(c)

    def seq_out():
        return tr.add(O.concat(f"{n}.out", prev_out, tax, f"{n}.out")) if T > 1 else prev_out[0]

    def stacked(which: str, xs: list[Tensor]):
        def f():
            parts = xs
            if bf:  # [B,1,H] -> [1,B,H]
                parts = [tr.add(O.view(f"{t.name}.{which}", t, (1, B, H), f"{t.name}.{which}")) for t in xs]
            return tr.add(O.concat(f"{n}.{which}", parts, 0, f"{n}.{which}")) if L > 1 else parts[0]
        return _Lazy(f)

    return (_Lazy(seq_out), (stacked("h_n", finals_h), stacked("c_n", finals_c)))


def _m_mha(tr, node, m, args, kw):
    """nn.MultiheadAttention: in-projection (one [3E, E] linear for self-attention, else row slices of the
    packed weight), per-head scores q·kᵀ (batch matmul), scale, masks, softmax, ·v, out-projection. Returns
    (output, head-averaged weights) like the module; the weights become a reduce op only if used."""
    n, q_ = node.name, node.target
    query, key, value = (tr.T(_arg(args, kw, i, nm)) for i, nm in enumerate(("query", "key", "value")))
    if not m._qkv_same_embed_dim or getattr(m, "bias_k", None) is not None or m.add_zero_attn:
        raise _Unsupported("kdim/vdim != embed_dim, bias_k/bias_v or add_zero_attn")
    if len(query.shape) != 3:
        raise _Unsupported("unbatched input")
    E, h = m.embed_dim, m.num_heads
    dh = E // h
    bf = m.batch_first
    W = tr.weight(f"{q_}.in_proj_weight")
    b = tr.weight(f"{q_}.in_proj_bias") if m.in_proj_bias is not None else None

    def bias_part(j):
        if b is None:
            return None
        return tr.sliced(f"{n}.in_proj_bias.{'qkv'[j]}", b, 0, j * E, E)

    if query.name == key.name == value.name:
        qkv = tr.add(O.linear(f"{n}.qkv", query, W, f"{n}.qkv", b))
        q, k, v = (tr.sliced(f"{n}.{c}", qkv, -1, j * E, E) for j, c in enumerate("qkv"))
    else:
        q, k, v = (tr.add(O.linear(f"{n}.{c}", x, tr.sliced(f"{n}.w{c}", W, 0, j * E, E), f"{n}.{c}", bias_part(j)))
                   for j, (c, x) in enumerate(zip("qkv", (query, key, value))))

    def heads(t, c):
        A_, B_ = t.shape[0], t.shape[1]  # (N, L) if batch_first else (L, N)
        v4 = tr.add(O.view(f"{n}.{c}4", t, (A_, B_, h, dh), f"{n}.{c}4"))
        return tr.add(O.permute(f"{n}.{c}h", v4, (0, 2, 1, 3) if bf else (1, 2, 0, 3), f"{n}.{c}h"))

    qh, kh, vh = heads(q, "q"), heads(k, "k"), heads(v, "v")  # [N, h, L|S, dh]
    N, S = qh.shape[0], kh.shape[2]
    kt = tr.add(O.permute(f"{n}.kT", kh, (0, 1, 3, 2), f"{n}.kT"))
    s = tr.add(O.matmul(f"{n}.scores", qh, kt, f"{n}.scores"))
    u = O.unary(f"{n}.scaled", s, "mul_scalar", f"{n}.scaled", 1)
    s = tr.add(dataclasses.replace(u, attrs={**u.attr_dict, "scalar": 1.0 / math.sqrt(dh)}))
    am = _arg(args, kw, 5, "attn_mask")
    if isinstance(am, (Tensor, _Lazy)):
        am = tr.T(am)
        if len(am.shape) != 2:
            raise _Unsupported("3-D attn_mask")
        s = tr.add(O.binary(f"{n}.amask", s, am, "masked_fill" if am.dtype == DType.bool else "add", f"{n}.amask"))
    kpm = _arg(args, kw, 3, "key_padding_mask")
    if isinstance(kpm, (Tensor, _Lazy)):
        kpm = tr.T(kpm)
        k4 = tr.add(O.view(f"{n}.kpm4", kpm, (N, 1, 1, S), f"{n}.kpm4"))
        s = tr.add(O.binary(f"{n}.kpmask", s, k4, "masked_fill" if kpm.dtype == DType.bool else "add", f"{n}.kpmask"))
    p = tr.add(O.softmax(f"{n}.probs", s, f"{n}.probs", -1))
    o = tr.add(O.matmul(f"{n}.ctx", p, vh, f"{n}.ctx"))  # [N, h, L, dh]
    o = tr.add(O.permute(f"{n}.ctx_t", o, (0, 2, 1, 3) if bf else (2, 0, 1, 3), f"{n}.ctx_t"))
    o = tr.add(O.view(f"{n}.ctx_flat", o, query.shape[:2] + (E,), f"{n}.ctx_flat"))
    ob = tr.weight(f"{q_}.out_proj.bias") if m.out_proj.bias is not None else None
    out = tr.add(O.linear(f"{n}.out", o, tr.weight(f"{q_}.out_proj.weight"), f"{n}.out", ob))
    if not _arg(args, kw, 4, "need_weights", True):
        return (out, None)
    avg = _arg(args, kw, 6, "average_attn_weights", True)
    weights = _Lazy(lambda: tr.add(O.reduce(f"{n}.attn_weights", p, [1], f"{n}.attn_weights", "mean")) if avg else p)
    return (out, weights)


def _module_handler(m) -> Callable | None:
    import torch.nn as nn

    if _act_fn(m)[0]:
        return _m_act
    table: list[tuple[type, Callable]] = [
        (nn.Linear, _m_linear), (nn.Conv2d, _m_conv2d), ((nn.BatchNorm2d, nn.BatchNorm1d), _m_batchnorm),
        ((nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Identity, nn.AlphaDropout), _m_alias),
        ((nn.Softmax, nn.LogSoftmax), _m_softmax), (nn.LayerNorm, _m_layernorm), (nn.MaxPool2d, _m_maxpool),
        (nn.AvgPool2d, _m_avgpool), (nn.AdaptiveAvgPool2d, _m_adaptive_avg), (nn.AdaptiveMaxPool2d, _m_adaptive_max),
        ((nn.Flatten, nn.Unflatten), _m_view), (nn.Embedding, _m_embedding), (nn.Upsample, _m_upsample),
        (nn.LSTM, _m_lstm), (nn.MultiheadAttention, _m_mha),
    ]
    for cls, h in table:
        if type(m) in (cls if isinstance(cls, tuple) else (cls,)):
            return h
    return None


# --- function / method handlers ------------------------------------------------------------------------------------
def _f_binary(fn):
    def h(tr, node, args, kw):
        a = args[0] if args else kw.get("input")
        b = args[1] if len(args) > 1 else kw.get("other")
        return tr.binary(node, a, b, fn)
    return h


def _f_rbinary(fn):
    """operator.sub / truediv with the tensor possibly on the right (python scalar on the left)."""
    return _f_binary(fn)


def _f_unary(fn):
    def h(tr, node, args, kw):
        attrs = {}
        if fn == "leaky_relu":
            attrs["negative_slope"] = float(_arg(args, kw, 1, "negative_slope", 0.01))
        if fn == "gelu" and kw.get("approximate", "none") != "none":
            attrs["approximate"] = kw["approximate"]
        return tr.unary(node, args[0] if args else kw["input"], fn, **attrs)
    return h


def _f_hardtanh(tr, node, args, kw):
    lo, hi = _arg(args, kw, 1, "min_val", -1.0), _arg(args, kw, 2, "max_val", 1.0)
    if (lo, hi) == (0.0, 6.0):
        return tr.unary(node, args[0], "relu6")
    return tr.unary(node, args[0], "clip", min=float(lo), max=float(hi))


def _f_clamp(tr, node, args, kw):
    lo, hi = _arg(args, kw, 1, "min"), _arg(args, kw, 2, "max")
    if isinstance(lo, (Tensor, _Lazy)) or isinstance(hi, (Tensor, _Lazy)):
        raise _Unsupported("tensor bounds")
    if (lo, hi) == (0, 6) or (lo, hi) == (0.0, 6.0):
        return tr.unary(node, args[0], "relu6")
    attrs = {k: float(v) for k, v in (("min", lo), ("max", hi)) if v is not None}
    return tr.unary(node, args[0], "clip", **attrs)


def _f_pow(tr, node, args, kw):
    return tr.binary(node, args[0], _arg(args, kw, 1, "exponent"), "pow")


def _f_matmul(tr, node, args, kw):
    a, b = tr.T(args[0] if args else kw["input"]), tr.T(args[1] if len(args) > 1 else kw.get("other", kw.get("mat2")))
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise _Unsupported("matmul with a 1-D operand")
    out = tr.new(node)
    return tr.add(O.matmul(out.name, a, b, out))


def _f_linear(tr, node, args, kw):
    x, w = tr.T(args[0]), tr.T(_arg(args, kw, 1, "weight"))
    b = _arg(args, kw, 2, "bias")
    out = tr.new(node)
    return tr.add(O.linear(out.name, x, w, out, tr.T(b) if b is not None else None))


def _f_conv2d(tr, node, args, kw):
    w = tr.T(_arg(args, kw, 1, "weight"))
    b = _arg(args, kw, 2, "bias")
    return _conv(tr, node, args[0], w, tr.T(b) if b is not None else None, _arg(args, kw, 3, "stride", 1),
                 _arg(args, kw, 4, "padding", 0), _arg(args, kw, 5, "dilation", 1), _arg(args, kw, 6, "groups", 1))


def _f_softmax(tr, node, args, kw):
    x = tr.T(args[0] if args else kw["input"])
    dim = _arg(args, kw, 1, "dim", -1)
    out = tr.new(node)
    return tr.add(O.softmax(out.name, x, out, axis=-1 if dim is None else dim))


def _f_layer_norm(tr, node, args, kw):
    x = tr.T(args[0])
    ns = _arg(args, kw, 1, "normalized_shape")
    w, b = _arg(args, kw, 2, "weight"), _arg(args, kw, 3, "bias")
    out = tr.new(node)
    return tr.add(O.layernorm(out.name, x, out, tr.T(w) if w is not None else None, tr.T(b) if b is not None else None,
                              normalized_ndim=len(ns) if isinstance(ns, (list, tuple)) else 1))


def _f_embedding(tr, node, args, kw):
    ids, w = tr.T(args[0]), tr.T(_arg(args, kw, 1, "weight"))
    out = tr.new(node)
    return tr.add(O.embedding(out.name, ids, w, out))


def _f_view(tr, node, args, kw):
    return tr.view_to(node, args[0] if args else kw["input"])


def _f_alias(tr, node, args, kw):
    x = args[0] if args else kw["input"]
    tm = tr.meta(node)
    if _is_tm(tm) and isinstance(x, (Tensor, _Lazy)):
        t = tr.T(x)
        dt = _dtype(tm.dtype)
        if dt != t.dtype:  # .float() / .to(dtype): a real conversion
            return tr.unary(node, t, "cast", dtype=dt.value)
    return x


def _f_permute(tr, node, args, kw):
    x = tr.T(args[0] if args else kw["input"])
    perm = _dims_arg(args, 1, kw, "dims")
    out = tr.new(node)
    return tr.add(O.permute(out.name, x, perm, out))


def _f_transpose(tr, node, args, kw):
    x = tr.T(args[0] if args else kw["input"])
    r = len(x.shape)
    d0, d1 = _arg(args, kw, 1, "dim0"), _arg(args, kw, 2, "dim1")
    perm = list(range(r))
    perm[d0 % r], perm[d1 % r] = perm[d1 % r], perm[d0 % r]
    if perm == list(range(r)):
        return x
    out = tr.new(node)
    return tr.add(O.permute(out.name, x, perm, out))


def _f_t(tr, node, args, kw):
    x = tr.T(args[0])
    if len(x.shape) < 2:
        return x
    out = tr.new(node)
    return tr.add(O.permute(out.name, x, (1, 0), out))


def _pieces(tr, node, x, axis, squeeze=False):
    """Split-like results as lazy slices, with lengths taken from the traced result's metadata."""
    x = tr.T(x)
    axis %= len(x.shape)
    metas = tr.meta(node)
    res, off = [], 0
    for i, tm in enumerate(metas):
        ln = 1 if squeeze else tm.shape[axis]

        def mk(i=i, off=off, ln=ln, tm=tm):
            nm = f"{node.name}.{i}"
            if squeeze:
                return tr.add(select_op(nm, x, Tensor(nm, tuple(tm.shape), x.dtype), axis, off))
            return tr.sliced(nm, x, axis, off, ln)

        res.append(_Lazy(mk))
        off += ln
    return tuple(res)


def _f_split(tr, node, args, kw):
    return _pieces(tr, node, args[0], _arg(args, kw, 2, "dim", 0))


def _f_unbind(tr, node, args, kw):
    return _pieces(tr, node, args[0], _arg(args, kw, 1, "dim", 0), squeeze=True)


def _f_cat(tr, node, args, kw):
    xs = [tr.T(v) for v in (args[0] if args else kw["tensors"])]
    dim = _arg(args, kw, 1, "dim", 0)
    if len(xs) == 1:
        return xs[0]
    out = tr.new(node)
    return tr.add(O.concat(out.name, xs, dim, out))


def _f_stack(tr, node, args, kw):
    xs = [tr.T(v) for v in (args[0] if args else kw["tensors"])]
    dim = _arg(args, kw, 1, "dim", 0) % (len(xs[0].shape) + 1)
    ups = []
    for i, x in enumerate(xs):
        s = list(x.shape)
        s.insert(dim, 1)
        ups.append(tr.add(O.view(f"{node.name}.u{i}", x, s, f"{node.name}.u{i}")))
    out = tr.new(node)
    return tr.add(O.concat(out.name, ups, dim, out))


def _reduce(fn):
    def h(tr, node, args, kw):
        x = tr.T(args[0] if args else kw["input"])
        dim = _arg(args, kw, 1, "dim", None)
        if fn in ("max", "min") and dim is not None and not isinstance(dim, (list, tuple)):
            raise _Unsupported(f"{fn}(dim) returns indices")
        keep = bool(_arg(args, kw, 2, "keepdim", False))
        axes = list(range(len(x.shape))) if dim is None else ([dim] if isinstance(dim, int) else list(dim))
        out = tr.new(node)
        if not out.shape:
            t = tr.add(O.reduce(f"{out.name}.r", x, axes, f"{out.name}.r", fn, keep))
            return tr.add(O.view(out.name, t, (), out))
        return tr.add(O.reduce(out.name, x, axes, out, fn, keep))
    return h


def _f_getitem(tr, node, args, kw):
    x, idx = args
    if isinstance(x, (tuple, list)):
        return x[idx]
    if not isinstance(x, (Tensor, _Lazy)):
        raise _Unsupported(f"getitem on {type(x).__name__}")
    x = tr.T(x)
    out = tr.new(node)
    if not isinstance(idx, tuple):
        idx = (idx,)
    if any(isinstance(i, (Tensor, _Lazy, list)) for i in idx):
        raise _Unsupported("advanced (tensor) indexing")
    # expand the ellipsis / pad with full slices so every axis of x has one entry
    n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
    fill = (slice(None),) * (len(x.shape) - n_real)
    if Ellipsis in idx:
        k = idx.index(Ellipsis)
        idx = idx[:k] + fill + idx[k + 1:]
    else:
        idx = idx + fill
    in_index, od, ax = [], 0, 0
    from ..affine import AffineExpr as AE

    for i in idx:
        if i is None:
            od += 1
            continue
        n = x.shape[ax]
        if isinstance(i, int):
            in_index.append(AE.constant(i % n))
        elif isinstance(i, slice):
            r = range(n)[i]
            in_index.append(AE.dim(f"d{od}") * r.step + r.start if len(r) else AE.constant(0))
            od += 1
        else:
            raise _Unsupported(f"index {i!r}")
        ax += 1
    if all(str(e) == f"d{k}" for k, e in enumerate(in_index)) and tuple(out.shape) == tuple(x.shape):
        return x
    return tr.add(strided_view(out.name, x, out, in_index, "getitem"))


def _f_expand(tr, node, args, kw):
    x = tr.T(args[0])
    out = tr.new(node)
    if tuple(out.shape) == tuple(x.shape):
        return x
    return tr.add(expand_op(out.name, x, out))


def _f_pool(fn):
    def h(tr, node, args, kw):
        k = _arg(args, kw, 1, "kernel_size")
        st = _arg(args, kw, 2, "stride", None)
        pad = _arg(args, kw, 3, "padding", 0)
        if fn == "max":
            dil, ceil = _arg(args, kw, 4, "dilation", 1), _arg(args, kw, 5, "ceil_mode", False)
        else:
            dil, ceil = 1, _arg(args, kw, 4, "ceil_mode", False)
        return _pool(tr, node, args[0], k, st, pad, dil, fn, ceil)
    return h


def _f_adaptive(fn):
    def h(tr, node, args, kw):
        return _adaptive(tr, node, args[0], fn)
    return h


def _f_interpolate(tr, node, args, kw):
    mode = _arg(args, kw, 3, "mode", "nearest")
    if mode != "nearest":
        raise _Unsupported(f"mode={mode!r} (only nearest)")
    x = tr.T(args[0])
    out = tr.new(node)
    return tr.add(upsample_nearest_op(out.name, x, out))


def _f_masked_fill(tr, node, args, kw):
    x, mask, value = tr.T(args[0]), tr.T(_arg(args, kw, 1, "mask")), _arg(args, kw, 2, "value")
    out = tr.new(node)
    op = O.binary(out.name, x, mask, "masked_fill", out)
    return tr.add(dataclasses.replace(op, attrs={**op.attr_dict, "scalar": _plain_scalar(value)}))


def _f_const(tr, node, args, kw):
    """Tensor creation (zeros, ones, arange, full, ...): a constant the graph reads, stored as a weight."""
    tm = tr.meta(node)
    if not _is_tm(tm):
        raise _Unsupported("creation op without tensor result")
    return tr.const(f"const.{node.name}", tuple(tm.shape), _dtype(tm.dtype))


def _f_sdpa(tr, node, args, kw):
    """F.scaled_dot_product_attention decomposed as the math backend computes it: q·kᵀ (batch matmul), scale,
    mask (additive, or masked_fill for a boolean mask; ``is_causal`` adds a constant [L, S] mask), softmax, ·v."""
    q, k, v = (tr.T(_arg(args, kw, i, n)) for i, n in enumerate(("query", "key", "value")))
    mask = _arg(args, kw, 3, "attn_mask")
    causal = bool(_arg(args, kw, 5, "is_causal", False))
    scale = _arg(args, kw, 6, "scale")
    if kw.get("enable_gqa") or q.shape[:-2] != k.shape[:-2]:
        raise _Unsupported("grouped-query attention (enable_gqa / differing head counts)")
    n, r = node.name, len(k.shape)
    L, S = q.shape[-2], k.shape[-2]
    kt = tr.add(O.permute(f"{n}.kT", k, list(range(r - 2)) + [r - 1, r - 2], f"{n}.kT"))
    s = tr.add(O.matmul(f"{n}.scores", q, kt, f"{n}.scores"))
    sc = float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    u = O.unary(f"{n}.scaled", s, "mul_scalar", f"{n}.scaled", 1)
    s = tr.add(dataclasses.replace(u, attrs={**u.attr_dict, "scalar": sc}))
    if causal:
        m = tr.const(f"const.{n}.causal_mask", (L, S))
        s = tr.add(O.binary(f"{n}.causal", s, m, "add", f"{n}.causal"))
    if isinstance(mask, (Tensor, _Lazy)):
        m = tr.T(mask)
        fn = "masked_fill" if m.dtype == DType.bool else "add"
        s = tr.add(O.binary(f"{n}.masked", s, m, fn, f"{n}.masked"))
    p = tr.add(O.softmax(f"{n}.probs", s, f"{n}.probs", -1))
    out = tr.new(node)
    return tr.add(O.matmul(out.name, p, v, out))


def _f_getattr(tr, node, args, kw):
    x, attr = args
    if attr in ("T", "mT") and isinstance(x, (Tensor, _Lazy)):
        x = tr.T(x)
        r = len(x.shape)
        perm = list(range(r))[::-1] if attr == "T" else list(range(r - 2)) + [r - 1, r - 2]
        out = tr.new(node)
        return tr.add(O.permute(out.name, x, perm, out))
    raise _Unsupported(f"getattr {attr!r}")


def _function_table() -> dict:
    import torch
    import torch.nn.functional as F

    t: dict[Any, Callable] = {
        operator.add: _f_binary("add"), operator.sub: _f_binary("sub"), operator.mul: _f_binary("mul"),
        operator.truediv: _f_binary("div"), operator.floordiv: _f_binary("floordiv"), operator.pow: _f_pow,
        operator.matmul: _f_matmul, operator.getitem: _f_getitem, operator.neg: _f_unary("neg"),
        torch.add: _f_binary("add"), torch.sub: _f_binary("sub"), torch.mul: _f_binary("mul"),
        torch.div: _f_binary("div"), torch.true_divide: _f_binary("div"), torch.pow: _f_pow,
        torch.matmul: _f_matmul, torch.bmm: _f_matmul, torch.mm: _f_matmul,
        F.linear: _f_linear, F.conv2d: _f_conv2d, F.embedding: _f_embedding,
        torch.softmax: _f_softmax, F.softmax: _f_softmax, F.layer_norm: _f_layer_norm,
        torch.flatten: _f_view, torch.reshape: _f_view, torch.squeeze: _f_view, torch.unsqueeze: _f_view,
        torch.permute: _f_permute, torch.transpose: _f_transpose, torch.t: _f_t,
        torch.split: _f_split, torch.chunk: _f_split, torch.unbind: _f_unbind, torch.tensor_split: _f_split,
        torch.cat: _f_cat, torch.concat: _f_cat, torch.stack: _f_stack,
        torch.mean: _reduce("mean"), torch.sum: _reduce("sum"), torch.amax: _reduce("max"),
        torch.amin: _reduce("min"),
        F.dropout: _f_alias, F.dropout2d: _f_alias, torch.clone: _f_alias, torch.detach: _f_alias,
        F.max_pool2d: _f_pool("max"), F.avg_pool2d: _f_pool("avg"),
        F.adaptive_avg_pool2d: _f_adaptive("avg"), F.adaptive_max_pool2d: _f_adaptive("max"),
        F.interpolate: _f_interpolate, torch.masked_fill: _f_masked_fill,
        F.hardtanh: _f_hardtanh, F.relu6: _f_hardtanh, torch.clamp: _f_clamp, torch.clip: _f_clamp,
        getattr: _f_getattr, F.scaled_dot_product_attention: _f_sdpa,
        torch.zeros: _f_const, torch.ones: _f_const, torch.arange: _f_const, torch.full: _f_const,
        torch.zeros_like: _f_const, torch.ones_like: _f_const, torch.tril: None, torch.triu: None,
    }
    for fn in ("relu", "gelu", "silu", "sigmoid", "tanh", "hardswish", "hardsigmoid", "leaky_relu", "elu", "softplus",
               "mish", "exp", "log", "sqrt", "rsqrt", "neg", "abs", "erf", "reciprocal", "sin", "cos"):
        for ns in (torch, F, torch.special):
            f = getattr(ns, fn, None)
            if f is not None and f not in t:
                t[f] = _f_unary(fn)
    t[F.relu6] = _f_hardtanh
    return {k: v for k, v in t.items() if v is not None}


_FUNCS: dict | None = None


def _function_handler(target) -> Callable | None:
    global _FUNCS
    if _FUNCS is None:
        _FUNCS = _function_table()
    try:
        return _FUNCS.get(target)
    except TypeError:  # unhashable target
        return None


def _method_sized_view(tr, node, args, kw):
    return tr.view_to(node, args[0])


_METHODS: dict[str, Callable] = {
    "add": _f_binary("add"), "sub": _f_binary("sub"), "mul": _f_binary("mul"), "div": _f_binary("div"),
    "truediv": _f_binary("div"), "__add__": _f_binary("add"), "__mul__": _f_binary("mul"), "pow": _f_pow,
    "matmul": _f_matmul, "bmm": _f_matmul, "mm": _f_matmul,
    "softmax": _f_softmax,
    "view": _method_sized_view, "reshape": _method_sized_view, "flatten": _method_sized_view,
    "unflatten": _method_sized_view, "squeeze": _method_sized_view, "unsqueeze": _method_sized_view,
    "view_as": _method_sized_view, "reshape_as": _method_sized_view,
    "contiguous": _f_alias, "clone": _f_alias, "detach": _f_alias, "float": _f_alias, "to": _f_alias,
    "type_as": _f_alias, "half": _f_alias, "bfloat16": _f_alias,
    "permute": _f_permute, "transpose": _f_transpose, "t": _f_t,
    "split": _f_split, "chunk": _f_split, "unbind": _f_unbind, "tensor_split": _f_split,
    "mean": _reduce("mean"), "sum": _reduce("sum"), "amax": _reduce("max"), "amin": _reduce("min"),
    "expand": _f_expand, "expand_as": _f_expand, "masked_fill": _f_masked_fill,
    "clamp": _f_clamp, "clip": _f_clamp,
}
for _fn in ("relu", "gelu", "silu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "neg", "abs", "erf",
            "reciprocal", "sin", "cos"):
    _METHODS[_fn] = _f_unary(_fn)

__all__ = ["from_torch", "UNARY_FLOPS"]
