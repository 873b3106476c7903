"""Define-by-run front end: models with shared parameters, static blocks, lazy values and the op vocabulary.

One op vocabulary (:class:`Ops`) has three back ends:

* :class:`dynamic_batcher.batcher.Batcher` records nodes into a dynamic graph (lazy values, batched later);
* :class:`Eager` computes each op at once with PyTorch on one instance (the per-instance reference);
* :class:`_Trace` records a static block's body once into a template.

A node's batching signature is ``(kind, parameter identities, argument shapes, attrs)``. Parameter identity is
the name of the parameter's :class:`shared_ir.Tensor` (role ``weight``): two uses of one weight share it, two
weights of equal shape do not — that is what makes them batchable together or not.
"""
from __future__ import annotations

import hashlib
import math
from typing import Any, Callable, Sequence

from shared_ir import OpKind, Tensor, TensorRole

from .errors import BatcherError, ShapeMismatchError

# kind -> shared_ir op kind (used in reports) ; every kind here has a batching rule except "custom"
KIND_TO_IR: dict[str, OpKind | None] = {
    "lookup": OpKind.embedding, "constant": OpKind.view, "linear": OpKind.linear, "matmul": OpKind.batch_matmul,
    "add": OpKind.elementwise, "sub": OpKind.elementwise, "mul": OpKind.elementwise, "scale": OpKind.elementwise,
    "tanh": OpKind.elementwise, "sigmoid": OpKind.elementwise, "relu": OpKind.elementwise,
    "concat": OpKind.concat, "log_softmax": OpKind.softmax, "block": None, "custom": None, "input": OpKind.view,
}
UNBATCHABLE_KINDS = frozenset({"custom"})
ELEMENTWISE_UNARY = ("tanh", "sigmoid", "relu")
ELEMENTWISE_BINARY = ("add", "sub", "mul")


class Param:
    """A model parameter: a torch tensor plus its IR identity (a weight :class:`shared_ir.Tensor`)."""

    __slots__ = ("name", "tensor", "ir")

    def __init__(self, name: str, tensor: Any):
        self.name = name
        """Unique name within the model (``<model>.<param>``); the identity used in batching signatures."""
        self.tensor = tensor
        """The torch tensor (fp32; set requires_grad to train through the batcher)."""
        self.ir = Tensor(name, tuple(tensor.shape), role=TensorRole.weight)
        """The shared-IR description (shape, bytes)."""

    @property
    def shape(self) -> tuple[int, ...]:
        return self.ir.shape

    def __repr__(self) -> str:
        return f"Param({self.name}, {list(self.shape)})"


class Model:
    """Parameters and static blocks of one network. ``fingerprint`` identifies it in saved policy files."""

    def __init__(self, name: str, seed: int = 0):
        import torch

        if not name or not isinstance(name, str):
            raise BatcherError(f"model.name: must be a non-empty string, got {name!r}")
        self.name = name
        self.params: dict[str, Param] = {}
        self.blocks: dict[str, "Block"] = {}
        self._gen = torch.Generator().manual_seed(int(seed))

    def param(self, name: str, shape: Sequence[int], init: str = "uniform") -> Param:
        """Create a parameter; ``init`` uniform(±1/sqrt(fan_in)) | zeros | normal(0, 0.1)."""
        import torch

        full = f"{self.name}.{name}"
        if full in self.params:
            raise BatcherError(f"model {self.name}: parameter {name!r} defined twice")
        shape = tuple(int(s) for s in shape)
        if init == "zeros":
            t = torch.zeros(shape)
        elif init == "normal":
            t = torch.randn(shape, generator=self._gen) * 0.1
        elif init == "uniform":
            bound = 1.0 / math.sqrt(shape[-1] if len(shape) > 1 else shape[0])
            t = (torch.rand(shape, generator=self._gen) * 2 - 1) * bound
        else:
            raise BatcherError(f"model {self.name}: param {name!r}: unknown init {init!r}")
        p = Param(full, t.contiguous())
        self.params[full] = p
        return p

    def block(self, name: str, fn: Callable[..., Any], input_shapes: Sequence[Sequence[int]]) -> "Block":
        """Declare a static block (a cell): ``fn(ops, *inputs) -> Value | tuple[Value, ...]``, traced once."""
        if name in self.blocks:
            raise BatcherError(f"model {self.name}: block {name!r} defined twice")
        b = Block(self, name, fn, [tuple(int(x) for x in s) for s in input_shapes])
        self.blocks[name] = b
        return b

    @property
    def device(self) -> Any:
        """The torch device of the parameters (cpu for a model without any)."""
        import torch

        return next(iter(self.params.values())).tensor.device if self.params else torch.device("cpu")

    def to(self, device: Any) -> "Model":
        """Move every parameter to ``device`` (e.g. ``"cuda"``), keeping requires_grad; returns the model."""
        import torch

        dev = torch.device(device)
        for p in self.params.values():
            if p.tensor.device != dev:
                p.tensor = p.tensor.detach().to(dev).requires_grad_(p.tensor.requires_grad)
        return self

    def fingerprint(self) -> str:
        """Hash of the model's name, parameter names/shapes and block bodies: equal models, equal fingerprints."""
        h = hashlib.sha1(self.name.encode())
        for n in sorted(self.params):
            h.update(f"{n}{self.params[n].shape}".encode())
        for n in sorted(self.blocks):
            h.update(f"{n}{self.blocks[n].input_shapes}{self.blocks[n].template.signature_text()}".encode())
        return h.hexdigest()[:16]


class Value:
    """A lazy value: output ``out`` of node ``node`` in the builder's current graph (or a computed tensor)."""

    __slots__ = ("b", "g", "node", "out", "shape", "_t")

    def __init__(self, b: "Ops", g: Any, node: int, out: int, shape: tuple[int, ...], t: Any = None):
        self.b = b
        self.g = g
        self.node = node
        self.out = out
        self.shape = shape
        self._t = t

    def value(self):
        """The tensor (per instance, no batch dim). Reading it in the middle of building flushes pending work."""
        return self.b.materialize(self)

    def __add__(self, o: "Value") -> "Value":
        return self.b.add(self, o)

    def __sub__(self, o: "Value") -> "Value":
        return self.b.sub(self, o)

    def __mul__(self, o: "Value") -> "Value":
        return self.b.mul(self, o)

    def __repr__(self) -> str:
        return f"Value(node={self.node}, out={self.out}, shape={list(self.shape)})"


def _same_shape(values: Sequence[Value]) -> list[Value]:
    vals = list(values)
    if not vals:
        raise ShapeMismatchError("stack", "needs at least one value")
    for i, v in enumerate(vals):
        if not isinstance(v, Value) or v.shape != vals[0].shape:
            raise ShapeMismatchError("stack", f"value {i} is {v!r}, not a Value of value 0's shape "
                                              f"{list(vals[0].shape)}")
    return vals


def _label(kind: str, idx: int, params: tuple = (), extra: str = "") -> str:
    p = f"[{','.join(x.name for x in params)}]" if params else ""
    return f"{kind}#{idx}{p}{extra}"


class Ops:
    """The op vocabulary with shape inference; subclasses implement :meth:`_emit` and :meth:`materialize`."""

    def _emit(self, kind: str, args: list[Value], params: tuple, attrs: tuple, shapes: tuple, data: Any = None,
              label: str = "") -> tuple[Value, ...]:
        raise NotImplementedError

    def materialize(self, v: Value):
        raise NotImplementedError

    def stack(self, values: Sequence[Value]):
        """``torch.stack`` of the values' tensors (differentiable): what a loss over many outputs reads."""
        import torch

        return torch.stack([v.value() for v in _same_shape(values)])

    def _next_label(self, kind: str, params: tuple = ()) -> str:
        return _label(kind, self._count(), params)

    def _count(self) -> int:
        return 0

    def _device(self) -> Any:
        """Where this builder's constants live (None: torch's default)."""
        model = getattr(self, "model", None)
        return model.device if model is not None else None

    # --- ops --------------------------------------------------------------------------------------------------
    def lookup(self, table: Param, index: int) -> Value:
        """Row ``index`` of an embedding table (V, *rest) -> shape rest."""
        index = int(index)
        if not 0 <= index < table.shape[0]:
            raise ShapeMismatchError(self._next_label("lookup", (table,)),
                                     f"index {index} out of range for table of {table.shape[0]} rows")
        return self._emit("lookup", [], (table,), (), (table.shape[1:],), data=index)[0]

    def constant(self, t: Any) -> Value:
        """A constant input tensor (per instance)."""
        import torch

        t = torch.as_tensor(t, dtype=torch.float32, device=self._device())
        return self._emit("constant", [], (), (), (tuple(t.shape),), data=t)[0]

    def linear(self, W: Param, x: Value, b: Param | None = None) -> Value:
        """``W @ x (+ b)`` with a shared weight W (out, in); x is (in,) or (in, n)."""
        params = (W,) if b is None else (W, b)
        if len(W.shape) != 2 or len(x.shape) not in (1, 2) or x.shape[0] != W.shape[1] or (
                b is not None and (b.shape != (W.shape[0],) or len(x.shape) != 1)):
            self._linear_error(W, x, b, params)
        out = (W.shape[0],) + tuple(x.shape[1:])
        return self._emit("linear", [x], params, (), (out,))[0]

    def _linear_error(self, W: Param, x: Value, b: Param | None, params: tuple) -> None:
        lab = self._next_label("linear", params)
        if len(W.shape) != 2:
            raise ShapeMismatchError(lab, f"weight {W.name} must be 2-D, got {list(W.shape)}")
        if len(x.shape) not in (1, 2) or x.shape[0] != W.shape[1]:
            raise ShapeMismatchError(lab, f"argument 1 has shape {list(x.shape)} but weight {W.name} is "
                                          f"{list(W.shape)} (needs {W.shape[1]} rows)")
        if b is not None and (b.shape != (W.shape[0],) or len(x.shape) != 1):
            raise ShapeMismatchError(lab, f"bias {b.name} of shape {list(b.shape)} does not fit output "
                                          f"({W.shape[0]},) of a vector linear")

    def matmul(self, a: Value, b: Value) -> Value:
        """Product of two values: (m, n) @ (n,) or (m, n) @ (n, p)."""
        if len(a.shape) != 2 or len(b.shape) not in (1, 2) or a.shape[1] != b.shape[0]:
            raise ShapeMismatchError(self._next_label("matmul"),
                                     f"cannot multiply shapes {list(a.shape)} and {list(b.shape)}")
        return self._emit("matmul", [a, b], (), (), ((a.shape[0],) + tuple(b.shape[1:]),))[0]

    def _binary(self, kind: str, a: Value, b: Value) -> Value:
        if not isinstance(a, Value) or not isinstance(b, Value):
            raise ShapeMismatchError(self._next_label(kind), f"arguments must be Values, got {type(a).__name__}, "
                                                             f"{type(b).__name__}")
        if a.shape != b.shape:
            raise ShapeMismatchError(self._next_label(kind),
                                     f"argument shapes differ: {list(a.shape)} vs {list(b.shape)}")
        return self._emit(kind, [a, b], (), (), (a.shape,))[0]

    def add(self, a: Value, b: Value) -> Value:
        return self._binary("add", a, b)

    def sub(self, a: Value, b: Value) -> Value:
        return self._binary("sub", a, b)

    def mul(self, a: Value, b: Value) -> Value:
        return self._binary("mul", a, b)

    def scale(self, x: Value, s: float) -> Value:
        """``s * x`` for a constant s (part of the signature)."""
        return self._emit("scale", [x], (), (("s", float(s)),), (x.shape,))[0]

    def tanh(self, x: Value) -> Value:
        return self._emit("tanh", [x], (), (), (x.shape,))[0]

    def sigmoid(self, x: Value) -> Value:
        return self._emit("sigmoid", [x], (), (), (x.shape,))[0]

    def relu(self, x: Value) -> Value:
        return self._emit("relu", [x], (), (), (x.shape,))[0]

    def log_softmax(self, x: Value) -> Value:
        if len(x.shape) != 1:
            raise ShapeMismatchError(self._next_label("log_softmax"), f"needs a vector, got {list(x.shape)}")
        return self._emit("log_softmax", [x], (), (), (x.shape,))[0]

    def concat(self, xs: Sequence[Value]) -> Value:
        """Concatenate along the first axis."""
        xs = list(xs)
        lab = ""
        if not xs:
            lab = self._next_label("concat")
            raise ShapeMismatchError(lab, "needs at least one argument")
        rest = xs[0].shape[1:]
        for i, x in enumerate(xs):
            if len(x.shape) != len(xs[0].shape) or x.shape[1:] != rest:
                raise ShapeMismatchError(self._next_label("concat"),
                                         f"argument {i} has shape {list(x.shape)}, incompatible with "
                                         f"argument 0 {list(xs[0].shape)}")
        out = (sum(x.shape[0] for x in xs),) + tuple(rest)
        return self._emit("concat", xs, (), (), (out,))[0]

    def custom(self, fn: Callable[..., Any], *args: Value, shape: Sequence[int], name: str = "custom") -> Value:
        """An op with no batching rule: run per instance (``fn`` on unbatched tensors). Reported as unbatched."""
        return self._emit("custom", list(args), (), (("fn", name),), (tuple(int(s) for s in shape),), data=fn)[0]

    def call(self, block: "Block", *args: Value) -> tuple[Value, ...]:
        """Run a static block; returns its outputs (always a tuple)."""
        lab = ""
        if len(args) != len(block.input_shapes):
            raise ShapeMismatchError(_label("block", self._count(), (), f"<{block.name}>"),
                                     f"block {block.name} takes {len(block.input_shapes)} inputs, got {len(args)}")
        for i, (a, s) in enumerate(zip(args, block.input_shapes)):
            if tuple(a.shape) != s:
                raise ShapeMismatchError(_label("block", self._count(), (), f"<{block.name}>"),
                                         f"block {block.name} input {i} must have shape {list(s)}, got "
                                              f"{list(a.shape)}")
        return self._call_block(block, list(args), lab)

    def _call_block(self, block: "Block", args: list[Value], label: str) -> tuple[Value, ...]:
        return self._emit("block", args, (), (("block", block.name),), block.output_shapes, data=block,
                          label=label)


class Eager(Ops):
    """Per-instance eager PyTorch: every op runs at once on one instance (the correctness reference)."""

    def __init__(self, model: Model | None = None):
        self.model = model
        self.n = 0

    def _count(self) -> int:
        return self.n

    def materialize(self, v: Value):
        return v._t

    def _emit(self, kind, args, params, attrs, shapes, data=None, label=""):
        self.n += 1
        xs = [a._t for a in args]
        if kind == "block":
            outs = data.fn(self, *args)
            return tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
        t = eager_kernel(kind, xs, params, dict(attrs), data)
        if tuple(t.shape) != tuple(shapes[0]):
            raise ShapeMismatchError(label or _label(kind, self.n), f"custom op returned shape {list(t.shape)}, "
                                                                    f"declared {list(shapes[0])}")
        return (Value(self, None, self.n, 0, tuple(shapes[0]), t),)


def eager_kernel(kind: str, xs: list, params: tuple, attrs: dict, data: Any):
    """One op on one instance (no batch dimension)."""
    import torch
    import torch.nn.functional as F

    if kind == "lookup":
        return params[0].tensor[data]
    if kind == "constant":
        return data
    if kind == "linear":
        W = params[0].tensor
        if len(xs[0].shape) == 1:
            return F.linear(xs[0], W, params[1].tensor if len(params) > 1 else None)
        return W @ xs[0]
    if kind == "matmul":
        return xs[0] @ xs[1]
    if kind == "add":
        return xs[0] + xs[1]
    if kind == "sub":
        return xs[0] - xs[1]
    if kind == "mul":
        return xs[0] * xs[1]
    if kind == "scale":
        return xs[0] * attrs["s"]
    if kind == "tanh":
        return torch.tanh(xs[0])
    if kind == "sigmoid":
        return torch.sigmoid(xs[0])
    if kind == "relu":
        return torch.relu(xs[0])
    if kind == "log_softmax":
        return F.log_softmax(xs[0], dim=-1)
    if kind == "concat":
        return torch.cat(xs, dim=0)
    if kind == "custom":
        return data(*xs)
    raise BatcherError(f"unknown op kind {kind!r}")


class TNode:
    """A node of a block template (single output)."""

    __slots__ = ("idx", "kind", "args", "params", "attrs", "shape", "label")

    def __init__(self, idx, kind, args, params, attrs, shape, label):
        self.idx = idx
        self.kind = kind
        self.args = args  # template node indices
        self.params = params
        self.attrs = attrs
        self.shape = shape
        self.label = label


class Template:
    """A traced static block: template nodes (inputs first), output node indices."""

    def __init__(self, name: str):
        self.name = name
        self.nodes: list[TNode] = []
        self.outputs: list[int] = []

    def signature_text(self) -> str:
        return ";".join(f"{n.kind}{n.args}{[p.name for p in n.params]}{n.attrs}{n.shape}" for n in self.nodes)


class _Trace(Ops):
    def __init__(self, block: "Block"):
        self.block = block
        self.t = Template(block.name)

    def _count(self) -> int:
        return len(self.t.nodes)

    def materialize(self, v: Value):
        raise BatcherError(f"block {self.block.name}: a block body cannot read values (it is traced once)")

    def input(self, i: int, shape: tuple) -> Value:
        idx = len(self.t.nodes)
        self.t.nodes.append(TNode(idx, "input", [], (), (("index", i),), shape, f"input#{i}"))
        return Value(self, self.t, idx, 0, shape)

    def _emit(self, kind, args, params, attrs, shapes, data=None, label=""):
        lab = label or _label(kind, len(self.t.nodes), params)
        if kind in ("block", "lookup", "constant", "custom"):
            raise BatcherError(f"block {self.block.name}: node {lab}: {kind} ops are not allowed inside a static "
                               "block (pass their results in as block inputs)")
        for a in args:
            if a.g is not self.t:
                raise BatcherError(f"block {self.block.name}: node {lab} uses a value from outside the block")
        idx = len(self.t.nodes)
        self.t.nodes.append(TNode(idx, kind, [a.node for a in args], params, attrs, tuple(shapes[0]), lab))
        return (Value(self, self.t, idx, 0, tuple(shapes[0])),)


class Block:
    """A static block (cell): traced once into a :class:`Template`; batched as one node of the dynamic graph."""

    def __init__(self, model: Model, name: str, fn: Callable[..., Any], input_shapes: list[tuple]):
        self.model = model
        self.name = name
        self.fn = fn
        self.input_shapes = input_shapes
        tr = _Trace(self)
        ins = [tr.input(i, s) for i, s in enumerate(input_shapes)]
        outs = fn(tr, *ins)
        outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
        if not outs:
            raise BatcherError(f"block {name}: must return at least one value")
        for i, o in enumerate(outs):
            if not isinstance(o, Value) or o.g is not tr.t:
                raise BatcherError(f"block {name}: output {i} is not a value computed in the block")
        tr.t.outputs = [o.node for o in outs]
        self.template = tr.t
        self.output_shapes = tuple(tuple(tr.t.nodes[o].shape) for o in tr.t.outputs)

    def __repr__(self) -> str:
        return f"Block({self.name}, in={self.input_shapes}, out={list(self.output_shapes)})"


__all__ = ["Param", "Model", "Block", "Value", "Ops", "Eager", "Template", "TNode", "KIND_TO_IR",
           "UNBATCHABLE_KINDS", "eager_kernel"]
